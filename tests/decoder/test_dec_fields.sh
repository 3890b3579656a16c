#!/usr/bin/env bash
# test_dec_fields: issue 19's field rule end to end. Reads the field table of docs/api.md (the
# parser's own list, checked by tests/core/test_openai) and sends every row's sample once to each
# endpoint the row names: honoured and accepted fields must get a 200, refused ones a 400 whose
# param names the field; an unknown field is a 400 naming it. Then what the honoured fields
# promise: logprobs (greedy token = top-1, descending, stream == non-stream, chat bytes == the
# text), n = 2 (choice 0 == the n = 1 answer, stream == non-stream), echo, logit_bias, and JSON
# mode whose every answer parses (12 seeds and budgets, stream and not). Real tokenizer, random
# weights (preset small), one decode-server.
set -euo pipefail
source "$(dirname "$0")/../common/pdb_e2e.sh"
pdb_e2e_init decfields
TOK=.cache/tokenizer/deepseek_v3/tokenizer.json
[ -f "$TOK" ] || pdb_e2e_fail "$TOK is missing: run scripts/setup.sh"
"$BIN" make-model --preset small --seed 3 --out "$T/small" --tokenizer "$TOK" >/dev/null 2>&1 || pdb_e2e_fail "make-model small"
pdb_e2e_start dec "$BIN" decode-server --model "$T/small" --cache-dir "$T/cache" --port 0 --block-size 128 --threads 2
python3 tests/common/pdb_api_fields.py "$URL" docs/api.md --all || pdb_e2e_fail "field checks"
pdb_e2e_stop_all
if grep -qE "runtime error|AddressSanitizer|LeakSanitizer" "$T"/*.log; then pdb_e2e_fail "sanitizer report"; fi
echo "test_dec_fields: all checks passed"
