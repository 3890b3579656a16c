#!/usr/bin/env bash
# test_bridge_v4_e2e: the bridge end to end on DeepSeek-V4 (issue 8 "Must show" 2), loopback, real
# processes: a random tiny V4 (window 8, CSA rate 4 with its indexer, HCA rate 16), decoder on
# unquantized weights (--scheme none, official semantics), decode-server + prefill-server (CPU) +
# front, block size 128 (a multiple of 128 and of both rates). Checks: a cold long prompt is
# bridged (verdict complete, the decoder reports the full blocks cached) and its greedy output
# equals a purely native decoder's; the bridged store's blocks equal the native decoder's own
# blocks tensor by tensor (verify-blocks); a warm follow-up is "skipped warm"; an unreachable
# prefill server gives "declined prefill_unreachable" with a correct answer; a prefill server
# built for another V4 semantics is refused (fingerprint mismatch) and the answer stays correct;
# with an MX-quantized decoder (quantize --scheme mx) and the prefill engine on the same MX
# checkpoint, cold prompts are bridged (complete) with the MX decoder's own blocks and answer; with
# the engine on bf16 weights they are bridged too and the agreement is reported (the engine's
# attention inputs differ from the MX decoder's from layer 1 on, as for V2).
set -euo pipefail
source "$(dirname "$0")/../common/pdb_e2e.sh"
pdb_e2e_init bridgev4
ok() { echo "ok   $*"; }
fail() { pdb_e2e_fail "$@"; }
start() { pdb_e2e_start "$@"; }

pdb_e2e_model deepseek_v4 tiny 44
"$BIN" quantize --model "$T/hf" --out "$T/dec-exact" --scheme none --v4-semantics exact >/dev/null 2>&1
"$BIN" quantize --model "$T/hf" --out "$T/dec-mx" --scheme mx >/dev/null 2>&1
grep -q '"scheme": "mx"' "$T/dec-mx/pdbridge_decoder.json" || fail "MX decoder identity: $(cat "$T/dec-mx/pdbridge_decoder.json")"
grep -q '"v4_semantics": "official"' "$T/dec/pdbridge_decoder.json" || fail "decoder identity: $(cat "$T/dec/pdbridge_decoder.json")"
BS=128
pdb_e2e_decoders $BS
start pre "$BIN" prefill-server --model "$T/hf" --decoder-model "$T/dec" --port 0 --backend cpu --threads 1 --chunk 45
PRE=$URL
start pre_exact "$BIN" prefill-server --model "$T/hf" --decoder-model "$T/dec-exact" --port 0 --backend cpu --threads 1
PRE_EXACT=$URL
FOPTS=(--decoder "$DEC" --decoder-model "$T/dec" --cache-dir "$T/cache" --port 0 --block-size $BS --min-bridge-tokens 256 --min-tail 128)
start front "$BIN" front --prefill "$PRE" "${FOPTS[@]}"
FRONT=$URL
start front_dead "$BIN" front --prefill "http://127.0.0.1:1" "${FOPTS[@]}"
FRONT_DEAD=$URL
start front_exact "$BIN" front --prefill "$PRE_EXACT" "${FOPTS[@]}"
FRONT_EXACT=$URL

cat >"$T/c.py" <<'PY'
import json, sys
sys.path.insert(0, "tests/common")
from pdb_e2e_client import post, prompt
front, native, seed, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
body = {"prompt": prompt(seed, n), "max_tokens": 8, "temperature": 0, "return_token_ids": True, "ignore_eos": True}
r = post(front, body); ref = post(native, body, "off")
r["equal"] = r["ids"] == ref["ids"]; r["same"] = sum(a == b for a, b in zip(r["ids"], ref["ids"])); r["native_cached"] = ref["cached"]; print(json.dumps(r))
PY
j() { pdb_e2e_j "$@"; }

# 1. cold long prompt: complete, full blocks cached, token-identical to native
R=$(python3 "$T/c.py" "$FRONT" "$NATIVE" 1 437)
[ "$(j "$R" "d['verdict'].split(';')[0]")" = complete ] || fail "cold prompt verdict: $R"
[ "$(j "$R" "d['cached']")" = 384 ] || fail "cold prompt: decoder cached $(j "$R" "d['cached']"), want 384 (3 blocks of 128)"
[ "$(j "$R" "d['equal']")" = True ] || fail "cold prompt: bridged output differs from native: $R"
ok "V4 cold prompt: complete, 384/437 cached, 8 greedy tokens identical to native"

# 2. the bridged blocks are the native decoder's own blocks, tensor by tensor
"$BIN" verify-blocks "$T/cache" "$T/cache-native" >"$T/verify.txt" 2>&1 || fail "verify-blocks: $(cat "$T/verify.txt")"
grep -q "^3/3 identical" "$T/verify.txt" || fail "verify-blocks output: $(cat "$T/verify.txt")"
ok "verify-blocks: 3/3 bridged V4 blocks identical to the native decoder's"

# 3. warm follow-up
R=$(python3 "$T/c.py" "$FRONT" "$NATIVE" 1 437)
[ "$(j "$R" "d['verdict'].split(';')[0]")" = "skipped warm" ] || fail "warm verdict: $R"
[ "$(j "$R" "d['equal']")" = True ] || fail "warm answer differs: $R"
ok "V4 warm follow-up: skipped warm, correct"

# 4. prefill unreachable: declined, correct
R=$(python3 "$T/c.py" "$FRONT_DEAD" "$NATIVE" 3 437)
[ "$(j "$R" "d['verdict'].split(';')[0]")" = "declined prefill_unreachable" ] || fail "unreachable verdict: $R"
[ "$(j "$R" "d['equal']")" = True ] || fail "unreachable answer differs: $R"
ok "V4 prefill unreachable: declined prefill_unreachable, correct"

# 5. a prefill server for the other semantics (exact) computes other pools: refused, never mounted
R=$(python3 "$T/c.py" "$FRONT_EXACT" "$NATIVE" 5 437)
[ "$(j "$R" "d['verdict'].split(';')[0]")" = "declined fingerprint_mismatch" ] || fail "semantics mismatch verdict: $R"
[ "$(j "$R" "d['equal']")" = True ] || fail "semantics mismatch answer differs: $R"
ok "V4 prefill for another semantics: declined fingerprint_mismatch, correct"
# 6. an MX-quantized decoder. (a) The prefill engine runs the MX checkpoint too (equal precision):
# complete, the MX decoder's own blocks bit for bit, the native MX answer. (b) The engine keeps its
# bf16 weights (the usual split): complete; the blocks and the answer are compared and reported.
start native_mx "$BIN" decode-server --model "$T/dec-mx" --cache-dir "$T/cache-mx-native" --port 0 --block-size $BS --threads 1
NATIVE_MX=$URL
for v in eq bf16; do
    start dec_mx_$v "$BIN" decode-server --model "$T/dec-mx" --cache-dir "$T/cache-mx-$v" --port 0 --block-size $BS --threads 1
    D=$URL
    E="$T/dec-mx"; [ $v = bf16 ] && E="$T/hf"
    start pre_mx_$v "$BIN" prefill-server --model "$E" --decoder-model "$T/dec-mx" --port 0 --backend cpu --threads 1 --chunk 45
    start front_mx_$v "$BIN" front --prefill "$URL" --decoder "$D" --decoder-model "$T/dec-mx" --cache-dir "$T/cache-mx-$v" \
        --port 0 --block-size $BS --min-bridge-tokens 256 --min-tail 128
    eval "FRONT_MX_$v=\$URL"
done
same16=0
for seed in 1 7; do
    R=$(python3 "$T/c.py" "$FRONT_MX_eq" "$NATIVE_MX" $seed 437)
    [ "$(j "$R" "d['verdict'].split(';')[0]")" = complete ] || fail "MX decoder, MX engine, prompt $seed: verdict: $R"
    [ "$(j "$R" "d['cached']")" = 384 ] || fail "MX decoder, MX engine, prompt $seed: cached $(j "$R" "d['cached']"), want 384"
    [ "$(j "$R" "d['equal']")" = True ] || fail "MX decoder, MX engine, prompt $seed: output differs from the native MX decoder's: $R"
    R=$(python3 "$T/c.py" "$FRONT_MX_bf16" "$NATIVE_MX" $seed 437)
    [ "$(j "$R" "d['verdict'].split(';')[0]")" = complete ] || fail "MX decoder, bf16 engine, prompt $seed: verdict: $R"
    [ "$(j "$R" "d['cached']")" = 384 ] || fail "MX decoder, bf16 engine, prompt $seed: cached $(j "$R" "d['cached']"), want 384"
    echo "     MX decoder, bf16 engine, prompt $seed: $(j "$R" "d['same']")/8 greedy tokens equal to the native MX decoder's"
done
"$BIN" verify-blocks "$T/cache-mx-eq" "$T/cache-mx-native" >"$T/verify-mx.txt" 2>&1 || fail "verify-blocks MX/MX: $(cat "$T/verify-mx.txt")"
grep -q "^6/6 identical" "$T/verify-mx.txt" || fail "verify-blocks MX/MX output: $(cat "$T/verify-mx.txt")"
ok "V4 MX decoder, MX engine: 2 cold prompts complete (384/437 cached), answers = native MX, 6/6 blocks identical"
set +e
"$BIN" verify-blocks "$T/cache-mx-bf16" "$T/cache-mx-native" >"$T/verify-mx16.txt" 2>&1; rc=$?
set -e
[ $rc = 1 ] || fail "verify-blocks MX decoder bf16 engine vs native: exit $rc, want 1: $(cat "$T/verify-mx16.txt")"
ok "V4 MX decoder, bf16 engine: 2 cold prompts complete; blocks vs native MX: $(tail -1 "$T/verify-mx16.txt")"
echo "all V4 bridge end-to-end checks passed"
