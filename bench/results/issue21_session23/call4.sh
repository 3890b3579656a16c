# Session 23 call 4: NEW = call 2's build + the routed experts' cuBLAS row tiles as one module shared by both
# engines (pdb_cuda_moe_tiles) and V2's default on them (its own grouped GEMM kept as moe_kernel). Tests of NEW
# (V2 and V4); V2: BASE (281e922) / NEW / BASE on a 4-layer V2-Lite-shaped checkpoint (64 experts) at 8K and 32K;
# V4: the table rows (bench/gpu_prefill_v4.sh, 4 layers x 256 experts on this card) -> table_v4/.
source scripts/pdb_carry.sh
tar xJf .cache/devcarry_base/devcarry_base.tar.xz -C /tmp; BASE=/tmp/devcarry_base/bin
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
T=$OUT/tests.log
for t in test_cuda_prefill test_cuda_v4_engine test_prefill_cuda_v4; do
  echo "== NEW $t" >> $T; timeout 200 $B/$t >> $T 2>&1; echo "NEW $t rc=$?" | tee -a $T; done
grep -E "PASSED|FAILED|Failure|vs_one_shot.*no|max_dlogit" $T | grep -E "PASSED|FAILED|Failure|chunk=1000|MHA-form" | cut -c1-220 | head -24
for b in "$BASE" "$B" "$BASE"; do echo "[$b]"; timeout 150 $b/cuda_prefill_bench /tmp/v2l4 4 64 8192 100 0 bf16 8192,32768 profile; done 2>&1 \
  | tee $OUT/v2_bench_4x64.log | grep -E "^\[|time=|profile" | cut -c1-300
OUT=$OUT/table_v4 LAYERS=4 bash bench/gpu_prefill_v4.sh 2>&1 | tail -8
