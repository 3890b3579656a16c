#!/usr/bin/env bash
# test_dec_tools: tools on /v1/chat/completions and the Messages API (/v1/messages) on one
# decode-server with the real tokenizer (preset small): forced calls (body and stream deltas
# equal, arguments that parse), tool_choice required among three tools and Messages' any among
# two (greedy and sampled, stream and not: one call of a tool each), tool_choice none/auto, a
# tool output rendered back, the 256-token bound on a forced call, Messages text answers
# (stream = non-stream, stop_sequence), and 400/404 answers naming their field in each API's
# error shape (tests/decoder/dec_tools_check.py).
set -euo pipefail
source "$(dirname "$0")/../common/pdb_e2e.sh"
pdb_e2e_init dectools
"$BIN" make-model --arch deepseek_v2 --preset small --seed 7 --out "$T/hf" --tokenizer .cache/tokenizer/deepseek_v3/tokenizer.json >/dev/null
"$BIN" quantize --model "$T/hf" --out "$T/dec" --scheme none >/dev/null 2>&1
pdb_e2e_start dec "$BIN" decode-server --model "$T/dec" --cache-dir "$T/cache" --port 0 --block-size 512 --threads 1
python3 tests/decoder/dec_tools_check.py "$URL" dec || pdb_e2e_fail "dec_tools_check"
# servers stopped with SIGTERM exit through their shutdown: a sanitized build reports leaks then
pdb_e2e_stop_all
if grep -lE "ERROR: AddressSanitizer|LeakSanitizer|runtime error:" "$T"/*.log; then pdb_e2e_fail "sanitizer report in a server log"; fi
echo "test_dec_tools: ok"
