#!/usr/bin/env bash
# test_verify_v4_e2e: the exactness tools on DeepSeek-V4's multi-pool layout (issue 8, docs/v4.md
# §6). A random tiny V4 with the real tokenizer (window 8, CSA rate 4 with its indexer, HCA rate 16;
# 8 pools: win, comp_csa, ikeys, ov_kv, ov_gate, iov_kv, iov_gate, comp_hca), block size 128. A
# text prompt and a chat prompt are bridged (decode-server + CPU prefill-server + front, decoder
# --scheme none) into one cache dir; a native decoder prefills them into another. Asserts:
# verify-blocks bridged vs native: every block identical (exit 0); diff-state (completion and
# --chat) against the bridged dir: every block found, every one of the 8 pools bit-exact (exit 0);
# an MX decoder bridged with a bf16 engine: diff-state exit 1 with a per-pool report whose window
# pool differs; pool-validate on V4 (whole prefill vs the decoder's blocks, 8 pools) passes on the CPU,
# exits 1 for a bf16 engine in front of an MX decoder, 2 below one block.
set -euo pipefail
source "$(dirname "$0")/../common/pdb_e2e.sh"
pdb_e2e_init verifyv4
source "$(dirname "$0")/../common/pdb_verify_e2e.sh"

BS=128
pdb_verify_models --arch deepseek_v4 --preset tiny --vocab 129280 --seed 12
SRV=(--port 0 --block-size $BS --threads 1)
pdb_e2e_start native "$BIN" decode-server --model "$T/dec" --cache-dir "$T/cache-native" "${SRV[@]}"; NATIVE=$URL
pdb_e2e_start dec "$BIN" decode-server --model "$T/dec" --cache-dir "$T/cache-bridged" "${SRV[@]}"; DEC=$URL
pdb_e2e_start pre "$BIN" prefill-server --model "$T/hf" --decoder-model "$T/dec" --port 0 --backend cpu --threads 1 --chunk 45
PRE=$URL
FOPTS=(--port 0 --block-size $BS --min-bridge-tokens 256 --min-tail 64)
pdb_e2e_start front "$BIN" front --decoder "$DEC" --prefill "$PRE" --decoder-model "$T/dec" --cache-dir "$T/cache-bridged" "${FOPTS[@]}"
FRONT=$URL
pdb_e2e_start decmx "$BIN" decode-server --model "$T/mx" --cache-dir "$T/cache-mx" "${SRV[@]}"; DECMX=$URL
pdb_e2e_start premx "$BIN" prefill-server --model "$T/hf" --decoder-model "$T/mx" --port 0 --backend cpu --threads 1
PREMX=$URL
pdb_e2e_start frontmx "$BIN" front --decoder "$DECMX" --prefill "$PREMX" --decoder-model "$T/mx" --cache-dir "$T/cache-mx" "${FOPTS[@]}"
FRONTMX=$URL

python3 tests/common/pdb_e2e_text.py prompts "$T" 5 500 380
NBLK=0
for kind in text chat; do
    pdb_verify_prompt $kind; f=$PF
    for fr in "$FRONT" "$FRONTMX"; do
        R=$(python3 tests/common/pdb_e2e_text.py ask "$fr" $kind "$f" auto) || pdb_e2e_fail "front request ($kind)"
        [ "$(j "$R" "d['verdict'].split(';')[0]")" = complete ] || pdb_e2e_fail "$kind prompt was not bridged: $R"
    done
    n=$(j "$R" "d['prompt'] // $BS")
    [ "$n" -ge 2 ] || pdb_e2e_fail "$kind prompt too short for the test: $R"
    NBLK=$((NBLK + n))
    python3 tests/common/pdb_e2e_text.py ask "$NATIVE" $kind "$f" off >/dev/null || pdb_e2e_fail "native request ($kind)"
    ok "V4 $kind prompt bridged for the unquantized and the MX decoder ($n blocks, $(j "$R" "d['prompt']") tokens)"
done
pdb_verify_wait_blocks $NBLK "$T/cache-native"

# 1. bridged dir == native dir, block by block (8 pool tensors + tokens each)
pdb_verify_identical "$T/cache-bridged" "$T/cache-native" $NBLK
ok "verify-blocks: $NBLK/$NBLK bridged V4 blocks identical to the native decoder's"

# 2. diff-state: the decoder's native state, each block taken at its end, vs the mounted blocks
POOLS="win comp_csa ikeys ov_kv ov_gate iov_kv iov_gate comp_hca"
for kind in text chat; do
    pdb_verify_prompt $kind
    run "$BIN" diff-state --model "$T/dec" --prompt-file "$PF" --cache-dir "$T/cache-bridged" $FLAG --threads 1
    [ $RC -eq 0 ] || pdb_e2e_fail "diff-state ($kind): exit $RC: $OUT"
    grep -Eq "^blocks: ([0-9]+)/\1 found \(\1 leading" <<<"$OUT" || pdb_e2e_fail "diff-state ($kind): not every block found: $OUT"
    for p in $POOLS; do
        grep -Eq "^pool $p: ([0-9]+)/\1 elements bit-exact \(100.000000%\), worst \|d\| 0, worst rel 0" <<<"$OUT" \
            || pdb_e2e_fail "diff-state ($kind): pool $p not bit-exact: $OUT"
    done
    echo "$OUT" | grep "^all pools" | sed 's/^/     /'
    ok "diff-state ($kind): every block found, all 8 pools bit-exact"
done

# 3. an MX decoder bridged with the bf16 engine: its blocks are the hook's MX pools on the engine's
#    attention inputs, which differ from the MX decoder's own from layer 1 on -> exit 1, per pool
run "$BIN" diff-state --model "$T/mx" --prompt-file "$T/prompt.txt" --cache-dir "$T/cache-mx" --threads 1
[ $RC -eq 1 ] || pdb_e2e_fail "diff-state, MX decoder with a bf16 engine: exit $RC (want 1): $OUT"
grep -Eq "^blocks: ([0-9]+)/\1 found" <<<"$OUT" || pdb_e2e_fail "diff-state MX: blocks not found: $OUT"
grep -Eq "^block 0 [0-9a-f]+  win: [0-9]+/[0-9]+ differ" <<<"$OUT" || pdb_e2e_fail "diff-state MX: no per-pool difference: $OUT"
grep -E "^pool |^all pools" <<<"$OUT" | sed 's/^/     /'
ok "diff-state, MX decoder + bf16 engine: exit 1, differences reported per pool"

# 4. pool-validate on V4: --check prefill, the whole prefill through the backend against the
#    decoder's native blocks, every pool; --check hook, the hook alone on seeded attention inputs
#    against the CPU's; CPU: every element identical (--scheme none, and an MX decoder read by the
#    engine too); a bf16 engine in front of the MX decoder misses the prefill check (exit 1);
#    --backend cuda passes on a GPU and is a clear exit 3 without one; less than one block is a
#    usage error for the prefill check
run "$BIN" pool-validate --decoder-model "$T/dec" --check prefill --tokens 300 --threads 2
[ $RC -eq 0 ] && grep -q "^PASS" <<<"$OUT" || pdb_e2e_fail "pool-validate V4 cpu: exit $RC: $OUT"
[ "$(grep -c "^overall .*100.000000%.*pass" <<<"$OUT")" = 3 ] || pdb_e2e_fail "pool-validate V4 cpu: not 3 exact modes: $OUT"
[ "$(grep -c "^whole .*pool " <<<"$OUT")" = 8 ] || pdb_e2e_fail "pool-validate V4: not 8 pools: $OUT"
ok "pool-validate V4 cpu: 8 pools, whole/chunked/odd-chunked bit-identical to the decoder's blocks"
run "$BIN" pool-validate --decoder-model "$T/dec" --check hook --tokens 300 --threads 2
[ $RC -eq 0 ] && [ "$(grep -c "^overall hook .*100.000000%.*pass" <<<"$OUT")" = 3 ] || pdb_e2e_fail "pool-validate V4 hook: exit $RC: $OUT"
ok "pool-validate V4 cpu --check hook: the hook alone, whole/chunked/odd-chunked, bit-identical to the CPU's"
run "$BIN" pool-validate --decoder-model "$T/mx" --check both --tokens 128 --threads 1
[ $RC -eq 0 ] || pdb_e2e_fail "pool-validate V4 cpu, MX decoder read by the engine: exit $RC: $OUT"
run "$BIN" pool-validate --decoder-model "$T/mx" --model "$T/hf" --check prefill --tokens 128 --threads 1
[ $RC -eq 1 ] && grep -q "^FAIL" <<<"$OUT" || pdb_e2e_fail "pool-validate V4, bf16 engine + MX decoder: exit $RC (want 1): $OUT"
ok "pool-validate V4: MX decoder exact with its own weights in the engine, exit 1 with the bf16 engine"
pdb_verify_cuda "pool-validate V4" --decoder-model "$T/dec" --check both --tokens 300
run "$BIN" pool-validate --decoder-model "$T/dec" --check prefill --tokens 100
[ $RC -eq 2 ] && grep -q "less than one block" <<<"$OUT" || pdb_e2e_fail "pool-validate V4, 100 tokens: exit $RC: $OUT"
ok "pool-validate V4: fewer tokens than a block is a usage error (exit 2)"
echo "all V4 verify end-to-end checks passed"
