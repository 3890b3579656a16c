# Session 25 call 1 (the H200, needs_h200: the 8-layer V4-Flash-shaped model holds 107.5 GB of weights).
# NEW = this tree: V2's warpgroup attention with 128-key tiles, ping-ponging (k_mha_wg<128, true>, the engine's
# default since call 1h measured it fastest), its tile
# loads by one swizzle a thread (134 / 163 registers instead of 204 / 255 with spills), O's rescale skipped
# where both corrections are 1; wg64p / wg128p: the same kernels with the warpgroups ping-ponging on
# named barriers (bit for bit the same as without). 1. the attention alone (8 warps, wg64, wg128), 2. test_cuda_prefill (wg64 bit for
# bit with mma.sync, wg128 within tolerance; every V2 engine chunked = one shot), 3. the V4 rows (8 layers x 256
# experts seeded on the device; the 4-layer 8-expert checkpoint beside transformers), 4. if the tests pass, the
# V2-Lite rows (27 layers, 64 experts, transformers beside). Each table script measures its own ceiling.
source scripts/pdb_carry.sh
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 80 $B/cuda_attn_bench 8192,32768,131072 8192 8,wg64,wg128,wg64p,wg128p 3 16 > $OUT/attn_bench.log 2>&1
grep -E "cuda-attn tokens" $OUT/attn_bench.log | cut -c1-200
T=$OUT/tests.log
timeout 100 $B/test_cuda_prefill > $T 2>&1; rc=$?; echo "NEW test_cuda_prefill rc=$rc" | tee -a $T
grep -E "PASSED|FAILED|Failure|attn-tiles|error" $T | cut -c1-220 | head -20
OUT=$OUT/table_v4 LAYERS=8 timeout 190 bash bench/gpu_prefill_v4.sh 2>&1 | grep -E "^deepseek|T=.*time=|weight_gb|peer" | cut -c1-300
if [ $rc -eq 0 ]; then
  OUT=$OUT/table_v2 timeout 210 bash bench/gpu_prefill.sh 2>&1 | tail -5
  grep -h "tokens_per_s\|profile_ms" $OUT/table_v2/engine.log | grep "capture=on" | cut -c1-330
fi
