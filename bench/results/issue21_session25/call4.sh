# Session 25 call 4 (the H200, needs_h200: 8 layers x 256 experts of V4-Flash's shape hold 107.5 GB): the final
# build (V2's attention 128-key tiles ping-ponging). 1. test_cuda_prefill (every V2 engine chunked = one shot with
# it), 2. the attention alone, 3. the V4 rows (bench/gpu_prefill_v4.sh), 4. if the tests pass, the V2-Lite rows
# (bench/gpu_prefill.sh). Shorter limits than call1.sh: what was left of the device budget.
source scripts/pdb_carry.sh
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
T=$OUT/tests.log
timeout 70 $B/test_cuda_prefill > $T 2>&1; rc=$?; echo "NEW test_cuda_prefill rc=$rc" | tee -a $T
grep -E "PASSED|FAILED|Failure|attn-tiles warpgroup|error" $T | cut -c1-220 | head -20
timeout 30 $B/cuda_attn_bench 8192,32768,131072 8192 8,wg128p 3 16 > $OUT/attn_bench.log 2>&1
grep -E "cuda-attn tokens" $OUT/attn_bench.log | cut -c1-200
OUT=$OUT/table_v4 LAYERS=8 timeout 170 bash bench/gpu_prefill_v4.sh 2>&1 | grep -E "^deepseek|T=.*time=|weight_gb|peer" | cut -c1-300
if [ $rc -eq 0 ]; then
  OUT=$OUT/table_v2 timeout 150 bash bench/gpu_prefill.sh 2>&1 | tail -5
  grep -h "tokens_per_s\|profile_ms" $OUT/table_v2/engine.log | grep "capture=on" | cut -c1-330
fi
