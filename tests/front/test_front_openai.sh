#!/usr/bin/env bash
# test_front_openai: issue 5 "Must show" 6 — the official `openai` npm client (installed by
# scripts/setup.sh into .cache/npm) streams a bridged chat completion through the front,
# unmodified; real tokenizer (preset small), decoder on unquantized weights, CPU prefill.
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
