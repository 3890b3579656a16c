#!/usr/bin/env bash
# test_front_tools: issue 19 Must-show 2 (tool-call round trip) and 3 (Anthropic Messages): the
# official `openai` npm client makes a forced tool-call round trip through the front, and the
# official Anthropic SDK (@anthropic-ai/sdk) drives /v1/messages streamed and not, each through
# a bridged prompt (X-PD-Bridge checked) with answers equal to a native decoder's; real
# tokenizer (preset small), decoder on unquantized weights, CPU prefill. Both clients are
# installed by scripts/setup.sh into .cache/npm.
set -euo pipefail
source "$(dirname "$0")/../common/pdb_e2e.sh"
pdb_e2e_init ftools
fail() { pdb_e2e_fail "$@"; }
OPENAI_MODULE="$PWD/.cache/npm/node_modules/openai"
ANTHROPIC_MODULE="$PWD/.cache/npm/node_modules/@anthropic-ai/sdk"
[ -f "$OPENAI_MODULE/package.json" ] || fail "$OPENAI_MODULE missing: run scripts/setup.sh"
[ -f "$ANTHROPIC_MODULE/package.json" ] || fail "$ANTHROPIC_MODULE missing: run scripts/setup.sh"
"$BIN" make-model --arch deepseek_v2 --preset small --seed 7 --out "$T/hf" --tokenizer .cache/tokenizer/deepseek_v3/tokenizer.json >/dev/null
"$BIN" quantize --model "$T/hf" --out "$T/dec" --scheme none >/dev/null 2>&1
pdb_e2e_decoders 512
pdb_e2e_start pre "$BIN" prefill-server --model "$T/hf" --decoder-model "$T/dec" --port 0 --backend cpu --threads 1
PRE=$URL
pdb_e2e_start front "$BIN" front --decoder "$DEC" --prefill "$PRE" --decoder-model "$T/dec" --cache-dir "$T/cache" --port 0 \
    --block-size 512 --min-bridge-tokens 600 --min-tail 512
FRONT=$URL
OPENAI_MODULE="$OPENAI_MODULE" node tests/front/front_tools_client.js "$FRONT" "$NATIVE" || fail "openai tool-call round trip through the front"
ANTHROPIC_MODULE="$ANTHROPIC_MODULE" node tests/front/front_anthropic_client.js "$FRONT" "$NATIVE" dec || fail "Anthropic SDK through the front"
# servers stopped with SIGTERM exit through their shutdown: a sanitized build reports leaks then
pdb_e2e_stop_all
if grep -lE "ERROR: AddressSanitizer|LeakSanitizer|runtime error:" "$T"/*.log; then pdb_e2e_fail "sanitizer report in a server log"; fi
echo "test_front_tools: ok"
