#!/usr/bin/env bash
# test_front_openai: issue 5 "Must show" 6 — the official `openai` npm client (installed by
# scripts/setup.sh into .cache/npm) streams a bridged chat completion through the front,
# unmodified; real tokenizer (preset small), decoder on unquantized weights, CPU prefill. Issue
# 19: bridged top-20 logprobs equal native ones, n = 2, JSON mode, and every field of
# docs/api.md's table through the front (tests/common/pdb_api_fields.py).
set -euo pipefail
source "$(dirname "$0")/../common/pdb_e2e.sh"
pdb_e2e_init fopenai
fail() { pdb_e2e_fail "$@"; }
start() { pdb_e2e_start "$@"; }
OPENAI_MODULE="$PWD/.cache/npm/node_modules/openai"
[ -f "$OPENAI_MODULE/package.json" ] || fail "$OPENAI_MODULE missing: run scripts/setup.sh"
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
# every field of docs/api.md's table through the front: the same 200s and 400s as the decoder's
python3 tests/common/pdb_api_fields.py "$URL" docs/api.md >"$T/fields.txt" || fail "field table through the front: $(grep FAIL "$T/fields.txt")"
echo "ok   field table through the front: $(grep -c '^ok' "$T/fields.txt") checks"
