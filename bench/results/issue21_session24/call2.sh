# Session 24 call 2: NEW = call 1's build with k_mha_wg back to session 23's lockstep kernel (call 1 measured
# the pipelined one at 0.96-0.97x alone) and V4's hook on dot32 (its own exact-order kernel deleted). BASE = 0b03870. NEW's tests (test_cuda_prefill, test_prefill_cuda_v4:
# dot32 and the router change), then the V2-Lite table with BASE's engine beside it.
source scripts/pdb_carry.sh
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
T=$OUT/tests.log
timeout 200 $B/test_cuda_prefill > $T 2>&1; rc=$?; echo "NEW test_cuda_prefill rc=$rc" | tee -a $T
timeout 200 $B/test_prefill_cuda_v4 >> $T 2>&1; rc2=$?; echo "NEW test_prefill_cuda_v4 rc=$rc2" | tee -a $T
timeout 120 $B/test_cuda_v4_engine >> $T 2>&1; rc3=$?; echo "NEW test_cuda_v4_engine rc=$rc3" | tee -a $T
grep -E "PASSED|FAILED|Failure|attn-tiles warpgroup|dot32 32768|error" $T | cut -c1-220 | head -20
# V4's hook on the GPU against the CPU's (pool-validate, both semantics), as tools/cuda_validate.sh runs it
$B/pdbridge make-model --arch deepseek_v4 --preset tiny --seed 3 --vocab 4000 --out /tmp/pv4 >/dev/null &&
  $B/pdbridge quantize --model /tmp/pv4 --out /tmp/pv4-dec --scheme none >/dev/null 2>&1
for m in both:exact hook:bf16; do
  IFS=: read -r check prec <<<"$m"
  timeout 120 $B/pdbridge pool-validate --decoder-model /tmp/pv4-dec --backend cuda --check $check --precision $prec --tokens 512 \
    2>&1 | tee $OUT/pool_validate_v4_${check}_$prec.log | tail -3
done
timeout 60 $B/cuda_v4_bench mm 8192,3072,4096 5 2>&1 | tee $OUT/mm_exact.log | cut -c1-160
timeout 100 $B/cuda_attn_bench 8192,32768,131072 8192 8,0 3 16 2>&1 | tee $OUT/attn_bench.log | grep -E "cuda-attn" | cut -c1-200
if [ $rc -eq 0 ]; then
  OUT=$OUT/table_v2 OLD_ARCHIVE=$PWD/.cache/devcarry_base/devcarry_base.tar.xz timeout 380 bash bench/gpu_prefill.sh 2>&1 | tail -4
  grep -h "tokens_per_s\|profile_ms" $OUT/table_v2/engine_old.log $OUT/table_v2/engine.log | grep "capture=on" | cut -c1-330
  (cd $OUT && tar cJf table_v2.tar.xz table_v2 && rm -rf table_v2)
fi
