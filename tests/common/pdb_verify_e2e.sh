# pdb_verify_e2e.sh: the steps the two end-to-end tests of the exactness tools share
# (tests/e2e/test_verify_e2e.sh on DeepSeek-V2, test_verify_v4_e2e.sh on V4's multi-pool layout).
# The tests check different things past these steps (V2: flipped floats, one-sided blocks,
# precisions, usage errors; V4: every pool, an MX decoder behind a bf16 engine), so only the
# harness is shared. Source it after tests/common/pdb_e2e.sh and pdb_e2e_init.
#   ok MESSAGE; run CMD... (-> $OUT stdout+stderr, $RC; never aborts); j JSON EXPR (-> a field)
#   pdb_verify_models MAKE_MODEL_ARGS...   -> $T/hf (random model, real tokenizer), $T/dec (--scheme none), $T/mx (--scheme mx)
#   pdb_verify_prompt KIND                 -> $PF (the prompt file of text|chat), $FLAG (--chat for chat)
#   pdb_verify_wait_blocks N DIR...        -> waits (30 s at most) until every DIR holds N block files
#   pdb_verify_identical BRIDGED NATIVE N  -> verify-blocks exit 0 with "N/N identical" (in $OUT)
#   pdb_verify_cuda LABEL ARGS...          -> pool-validate --backend cuda ARGS: a pass on a GPU, a clear exit 3 without
TOK=.cache/tokenizer/deepseek_v3/tokenizer.json
[ -f "$TOK" ] || pdb_e2e_fail "$TOK missing: run scripts/setup.sh"
ok() { echo "ok   $*"; }
run() { set +e; OUT=$("$@" 2>&1); RC=$?; set -e; }
j() { pdb_e2e_j "$@"; }

pdb_verify_models() {
    "$BIN" make-model "$@" --out "$T/hf" --tokenizer "$TOK" >/dev/null
    "$BIN" quantize --model "$T/hf" --out "$T/dec" --scheme none >/dev/null 2>&1
    "$BIN" quantize --model "$T/hf" --out "$T/mx" --scheme mx >/dev/null 2>&1
}

pdb_verify_prompt() {
    PF="$T/prompt.txt"; FLAG=""
    if [ "$1" = chat ]; then PF="$T/chat.txt"; FLAG=--chat; fi
}

pdb_verify_wait_blocks() {
    local n=$1 d all
    shift
    for _ in $(seq 1 300); do
        all=1
        for d in "$@"; do [ "$(find "$d" -name '*.pdbblk' | wc -l)" -ge "$n" ] || all=0; done
        [ $all = 1 ] && break
        sleep 0.1
    done
}

pdb_verify_identical() {
    run "$BIN" verify-blocks "$1" "$2"
    [ $RC -eq 0 ] || pdb_e2e_fail "verify-blocks $1 $2: exit $RC: $OUT"
    grep -q "^$3/$3 identical" <<<"$OUT" || pdb_e2e_fail "verify-blocks summary, want $3/$3 identical: $OUT"
}

pdb_verify_cuda() {
    local label=$1 gpus
    shift
    gpus=$("$BIN" info | sed -n 's/^cuda_devices: //p')
    run "$BIN" pool-validate "$@" --backend cuda
    if [ "${gpus:-0}" -gt 0 ]; then
        echo "$OUT" | tail -4 | sed 's/^/     /'
        [ $RC -eq 0 ] || pdb_e2e_fail "$label cuda on a GPU: exit $RC: $OUT"
        ok "$label cuda: within threshold"
    else
        [ $RC -eq 3 ] && grep -q "backend cuda unavailable" <<<"$OUT" || pdb_e2e_fail "$label cuda without a GPU: exit $RC: $OUT"
        ok "$label cuda without a GPU: clear error, exit 3 (not a pass)"
    fi
}
