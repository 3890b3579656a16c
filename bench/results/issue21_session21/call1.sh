# Session 21 call 1: the warpgroup-MMA attention (k_v4_attn_wg, sm_90a build) against BASE (f59fe7e, sm_90).
# Tests of the new build (every V4 kernel test, the V2 and prefill CUDA tests: the whole backend is sm_90a now),
# 4 layers x 256 experts BASE / NEW / NEW with attn-mma-sync (tc16 in the same binary) at 32K and 128K, then ncu
# sections of one wg launch of a 32K pass.
source scripts/pdb_carry.sh
pdb_carry_unpack .cache/devcarry_base && mv /tmp/devcarry /tmp/devcarry_base; BASE=/tmp/devcarry_base/bin
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
T=$OUT/tests.log
for t in test_cuda_v4_attn test_cuda_v4_ops test_cuda_v4_index test_cuda_v4_engine test_cuda_prefill test_prefill_cuda_v4; do
  echo "== $t" >> $T; timeout 120 $B/$t >> $T 2>&1; echo "$t rc=$?" | tee -a $T; done
grep -E "PASSED|FAILED|Failure|error|v4attn-metric (v4flash|rope-out|csa nh80|sliding nh96|hca nh64)" $T | cut -c1-200
for b in "$BASE" "$B" "$B attn-mma-sync"; do set -- $b; echo "[$b]"; timeout 150 $1/cuda_v4_bench seeded v4-flash 4 256 3 32768,131072 bf16 60 profile,$2; done 2>&1 \
  | tee $OUT/bench_4x256.log | grep -E "^\[|time=|profile" | cut -c1-250
timeout 120 ncu --clock-control none -k regex:attn_wg -s 2 -c 1 --section SpeedOfLight --section WarpStateStats --section LaunchStats \
  --section Occupancy $B/cuda_v4_bench seeded v4-flash 4 256 1 32768 bf16 60 > $OUT/ncu_wg.txt 2>&1; echo "ncu rc=$?"
grep -E "Duration|Throughput|Registers|Warp Cycles|Eligible|Issued|Achieved Occ|Stall" $OUT/ncu_wg.txt | head -30
