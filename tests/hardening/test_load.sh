#!/usr/bin/env bash
# test_load: 32 concurrent clients for a bounded time ($PDB_LOAD_SECONDS, default 20 s) against
# front + decode-server + prefill-server on loopback (CPU, random tiny DeepSeek-V2, block 128),
# mixing cold bridges, warm prompts and short prompts. Asserts 0 errors, 0 wrong answers (each
# distinct prompt is compared with a native decoder's greedy answer afterwards), 0 untruthful
# verdicts, and that each kind of request was actually exercised; prints latency p50/p95/p99.
set -euo pipefail
source "$(dirname "$0")/../common/pdb_e2e.sh"
pdb_e2e_init load
H="$(pwd)/tests/hardening/pdbh.py"
fail() { pdb_e2e_fail "$@"; }
start() { pdb_e2e_start "$@"; }
pdb_e2e_model deepseek_v2 tiny 47
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
for p in "${PDB_E2E_PIDS[@]}"; do kill -0 "$p" 2>/dev/null || fail "a server died under load"; done
if grep -l "ERROR: AddressSanitizer\|runtime error:" "$T"/*.log 2>/dev/null; then fail "sanitizer report in a server log"; fi
echo "ok   32 clients x ${SECS}s: 0 errors, 0 wrong answers, 0 untruthful verdicts over $(j "d['distinct_prompts']") distinct prompts"
