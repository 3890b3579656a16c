#!/usr/bin/env bash
# test_load: 32 concurrent clients for a bounded time ($PDB_LOAD_SECONDS, default 20 s) against
# front + decode-server + prefill-server on loopback (CPU, random tiny DeepSeek-V2, block 128),
# mixing cold bridges, warm prompts and short prompts. Asserts 0 errors, 0 wrong answers (each
# distinct prompt is compared with a native decoder's greedy answer afterwards), 0 untruthful
# verdicts, and that each kind of request was actually exercised; prints latency p50/p95/p99.
set -euo pipefail
cd "${PDB_SRC:-$(dirname "$0")/../..}"
BIN="${PDB_BIN:-build/pdbridge}"
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
H="$(pwd)/tests/hardening/pdbh.py"
T="$(mktemp -d /tmp/pdbtest-load-XXXXXX)"
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$T"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -12 "$f" >&2; }; done; exit 1; }
URL=""
start() {
    local name="$1"; shift
    : >"$T/$name.log"   # exists before the child opens it (the sed below may run first)
    "$@" >>"$T/$name.log" 2>&1 &
    PIDS+=("$!")
    for _ in $(seq 1 900); do
        URL=$(sed -n 's|^listening on \(http://[0-9.]*:[0-9]*\).*|\1|p' "$T/$name.log" | head -1)
        [ -n "$URL" ] && return 0
        kill -0 "$!" 2>/dev/null || fail "$name exited"
        sleep 0.1
    done
    fail "$name did not start"
}
"$BIN" make-model --arch deepseek_v2 --preset tiny --seed 47 --out "$T/hf" >/dev/null
"$BIN" quantize --model "$T/hf" --out "$T/dec" --scheme none >/dev/null 2>&1
BS=128
start native "$BIN" decode-server --model "$T/dec" --cache-dir "$T/cache-native" --port 0 --block-size $BS --threads 2 --log-level warn
NATIVE=$URL
start dec "$BIN" decode-server --model "$T/dec" --cache-dir "$T/cache" --port 0 --block-size $BS --threads 2 --log-level warn
DEC=$URL
start pre "$BIN" prefill-server --model "$T/hf" --decoder-model "$T/dec" --port 0 --backend cpu --parallel 4 --threads 1 --chunk 128 --log-level warn
PRE=$URL
start front "$BIN" front --decoder "$DEC" --prefill "$PRE" --decoder-model "$T/dec" --cache-dir "$T/cache" --port 0 \
    --block-size $BS --min-bridge-tokens 256 --min-tail 128 --log-level warn
FRONT=$URL
SECS="${PDB_LOAD_SECONDS:-20}"
R=$(python3 "$H" load "$FRONT" "$NATIVE" "$SECS" 32 $BS "$T/load.json") || fail "load generator failed"
j() { python3 -c "import json,sys;d=json.loads(sys.argv[1]);print($1)" "$R"; }
echo "load: $(j "d['requests']") requests from $(j "d['clients']") clients in $(j "d['seconds']") s; verdicts $(j "d['verdicts']")"
for k in all cold warm short; do
    echo "latency $k: n=$(j "d['latency']['$k']['n']") p50=$(j "d['latency']['$k']['p50_ms']") ms p95=$(j "d['latency']['$k']['p95_ms']") ms p99=$(j "d['latency']['$k']['p99_ms']") ms"
done
[ "$(j "d['n_errors']")" = 0 ] || fail "$(j "d['n_errors']") errors: $(j "d['errors']")"
[ "$(j "d['n_wrong']")" = 0 ] || fail "$(j "d['n_wrong']") wrong answers: $(j "d['wrong']")"
[ "$(j "d['n_untruthful']")" = 0 ] || fail "$(j "d['n_untruthful']") untruthful verdicts: $(j "d['untruthful']")"
for k in cold warm short; do [ "$(j "d['latency']['$k']['n']")" -ge 3 ] || fail "too few $k requests: $R"; done
[ "$(j "d['verdicts'].get('complete', 0)")" -ge 1 ] || fail "no cold request was bridged completely: $(j "d['verdicts']")"
for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || fail "a server died under load"; done
if grep -l "ERROR: AddressSanitizer\|runtime error:" "$T"/*.log 2>/dev/null; then fail "sanitizer report in a server log"; fi
echo "ok   32 clients x ${SECS}s: 0 errors, 0 wrong answers, 0 untruthful verdicts over $(j "d['distinct_prompts']") distinct prompts"
