# Session 23 call 6: NEW = call 4's build + V2's MHA-form attention on warpgroup MMA (k_mha_wg, the default where it
# fits). Tests of NEW (test_cuda_prefill: the kernel against the mma.sync one and a double reference, the engine's
# chunked = one shot); the kernel alone beside the mma.sync one (cuda_attn_bench, 16 heads, passes of 8192); then,
# if the tests pass, the V2-Lite table again (bench/gpu_prefill.sh, BASE = 281e922 beside it) -> table_v2.tar.xz.
source scripts/pdb_carry.sh
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
T=$OUT/tests.log
echo "== NEW test_cuda_prefill" >> $T; timeout 200 $B/test_cuda_prefill >> $T 2>&1; rc=$?; echo "NEW test_cuda_prefill rc=$rc" | tee -a $T
grep -E "PASSED|FAILED|Failure|attn-tiles|error" $T | cut -c1-220 | head -20
grep -E "vs_one_shot" $T | grep -v "identical=100.0000%.*logits_identical=yes" | head -5
timeout 120 $B/cuda_attn_bench 8192,32768,131072 8192 8,0 3 16 2>&1 | tee $OUT/attn_bench.log | grep -E "cuda-attn" | cut -c1-200
if [ $rc -eq 0 ]; then
  OUT=$OUT/table_v2 OLD_ARCHIVE=$PWD/.cache/devcarry_base/devcarry_base.tar.xz timeout 400 bash bench/gpu_prefill.sh 2>&1 | tail -5
  (cd $OUT && tar cJf table_v2.tar.xz table_v2 && rm -rf table_v2)
  grep -h "time=" /dev/null
fi
