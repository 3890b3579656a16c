#!/usr/bin/env bash
# test_front_openai: issue 5 "Must show" 6 — the official `openai` npm client (installed by
# scripts/setup.sh into .cache/npm) streams a bridged chat completion through the front,
# unmodified; real tokenizer (preset small), decoder on unquantized weights, CPU prefill.
set -euo pipefail
cd "${PDB_SRC:-$(dirname "$0")/../..}"
BIN="${PDB_BIN:-build/pdbridge}"
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
OPENAI_MODULE="$PWD/.cache/npm/node_modules/openai"
[ -f "$OPENAI_MODULE/package.json" ] || { echo "FAIL: $OPENAI_MODULE missing: run scripts/setup.sh" >&2; exit 1; }
T="$(mktemp -d /tmp/pdbtest-fopenai-XXXXXX)"
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$T"/*.log; do echo "--- $f" >&2; tail -10 "$f" >&2; done; exit 1; }
URL=""
start() {
    local name="$1"; shift
    "$@" >"$T/$name.log" 2>&1 & PIDS+=($!)
    for _ in $(seq 1 600); do
        URL=$(sed -n 's|^listening on \(http://[0-9.]*:[0-9]*\).*|\1|p' "$T/$name.log" | head -1)
        [ -n "$URL" ] && return 0
        sleep 0.1
    done
    fail "$name did not start"
}
"$BIN" make-model --arch deepseek_v2 --preset small --seed 7 --out "$T/hf" --tokenizer .cache/tokenizer/deepseek_v3/tokenizer.json >/dev/null
"$BIN" quantize --model "$T/hf" --out "$T/dec" --scheme none >/dev/null 2>&1
start native "$BIN" decode-server --model "$T/dec" --cache-dir "$T/cache-native" --port 0 --block-size 512 --threads 1
NATIVE=$URL
start dec "$BIN" decode-server --model "$T/dec" --cache-dir "$T/cache" --port 0 --block-size 512 --threads 1
DEC=$URL
start pre "$BIN" prefill-server --model "$T/hf" --decoder-model "$T/dec" --port 0 --backend cpu --threads 1
PRE=$URL
start front "$BIN" front --decoder "$DEC" --prefill "$PRE" --decoder-model "$T/dec" --cache-dir "$T/cache" --port 0 \
    --block-size 512 --min-bridge-tokens 600 --min-tail 512
OPENAI_MODULE="$OPENAI_MODULE" node tests/front/front_openai_client.js "$URL" "$NATIVE" || fail "openai client through the front"
