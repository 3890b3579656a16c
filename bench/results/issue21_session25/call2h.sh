# Session 25 call 2h (an H100; the H200 refused a sixth start): the final build (the engine's attention 128-key
# tiles ping-ponging, PDB_CUDA_MHA_WG_KEYS) beside BASE = b131f8a. 1. test_cuda_prefill (every V2 engine chunked =
# one shot with the ping-pong kernel), 2. the attention alone, 3. if the tests pass, the V2-Lite table with BASE's
# engine beside it.
source scripts/pdb_carry.sh
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
T=$OUT/tests.log
timeout 150 $B/test_cuda_prefill > $T 2>&1; rc=$?; echo "NEW test_cuda_prefill rc=$rc" | tee -a $T
grep -E "PASSED|FAILED|Failure|attn-tiles warpgroup|error" $T | cut -c1-220 | head -20
timeout 60 $B/cuda_attn_bench 8192,32768,131072 8192 8,wg128,wg128p 3 16 > $OUT/attn_bench.log 2>&1
grep -E "cuda-attn tokens" $OUT/attn_bench.log | cut -c1-200
if [ $rc -eq 0 ]; then
  OUT=$OUT/table_v2 OLD_ARCHIVE=$PWD/.cache/devcarry_base/devcarry_base.tar.xz timeout 330 bash bench/gpu_prefill.sh 2>&1 | tail -4
  grep -h "tokens_per_s\|profile_ms" $OUT/table_v2/engine_old.log $OUT/table_v2/engine.log | grep "capture=on" | cut -c1-330
fi
