# Session 21 call 2: BASE (f59fe7e, sm_90), NEW (5dc7d01: the wg attention with the trimmed per-tile
# work, + the bf16 q_b and expert gate/up outputs, 03a merge). Tests of NEW; test_prefill_cuda_v4 of
# BASE and of session 18's build (05bddea) too (call 1: NEW's bf16 engine blocks 0.197 > 0.1 on tiny);
# 4 layers x 256 experts BASE / NEW / NEW attn-mma-sync (tc16 + the bf16 outputs) at 32K and 128K; ncu sections of one wg launch.
source scripts/pdb_carry.sh
pdb_carry_unpack .cache/devcarry_base && mv /tmp/devcarry /tmp/devcarry_base; BASE=/tmp/devcarry_base/bin

tar xJf .cache/devcarry_s18/devcarry_s18.tar.xz -C /tmp; S18=/tmp/devcarry_s18/bin
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
T=$OUT/tests.log
for t in test_cuda_v4_attn test_cuda_v4_ops test_cuda_v4_index test_cuda_v4_engine test_cuda_prefill test_prefill_cuda_v4; do
  echo "== NEW $t" >> $T; timeout 120 $B/$t >> $T 2>&1; echo "NEW $t rc=$?" | tee -a $T; done
for b in BASE S18; do eval d=\$$b; echo "== $b test_prefill_cuda_v4" >> $T; timeout 120 $d/test_prefill_cuda_v4 >> $T 2>&1; echo "$b test_prefill_cuda_v4 rc=$?" | tee -a $T; done
grep -E "^== |PASSED|FAILED|Failure|ERROR|device engine bf16|v4attn-metric (v4flash|rope-out case [13])|in16|bf16 input" $T | cut -c1-220
for b in "$BASE" "$B" "$B attn-mma-sync"; do set -- $b; echo "[$b]"; timeout 150 $1/cuda_v4_bench seeded v4-flash 4 256 3 32768,131072 bf16 60 profile,$2; done 2>&1 \
  | tee $OUT/bench_4x256.log | grep -E "^\[|time=|profile" | cut -c1-250
timeout 120 ncu --clock-control none -k regex:attn_wg -s 2 -c 1 --section SpeedOfLight --section WarpStateStats --section LaunchStats \
  $B/cuda_v4_bench seeded v4-flash 4 256 1 32768 bf16 60 > $OUT/ncu_wg.txt 2>&1; echo "ncu rc=$?"
grep -E "Duration|Compute .SM. Thr|Warp Cycles Per Issued|L2 Cache Thr" $OUT/ncu_wg.txt | head
