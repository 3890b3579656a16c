# Session 17 call 5 (review): the Sinkhorn's serial form shared by k_hc_site and k_hc_comb4, k_hc_site's
# dead HCT parameter removed: tests, then call 4's build and this one on the same weights (logits hash)
source scripts/pdb_carry.sh && pdb_carry_unpack .cache/devcarry_old && mv /tmp/devcarry /tmp/devcarry_old; OLD=/tmp/devcarry_old
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for t in test_cuda_v4_ops test_cuda_v4_engine test_prefill_cuda_v4; do $B/$t > $OUT/$t.log 2>&1; echo "$t rc=$?"; grep -E "PASSED|FAILED" $OUT/$t.log | tail -2; done
for b in $OLD/bin $B; do echo "[$b]"; $b/cuda_v4_bench seeded v4-flash 4 256 3 8192,32768 bf16 60; done 2>&1 | tee $OUT/bench_4x256.log | grep -E "^\[|time="
