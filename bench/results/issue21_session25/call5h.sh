# Session 25 call 5h (an H100; 318 s of device budget left after refused starts): the final build's tests only
# (test_cuda_prefill: every V2 engine chunked = one shot with the attention's default, 128-key tiles
# ping-ponging) and the attention alone, 8 warps beside the default kernel.
source scripts/pdb_carry.sh
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
T=$OUT/tests.log
timeout 90 $B/test_cuda_prefill > $T 2>&1; rc=$?; echo "NEW test_cuda_prefill rc=$rc" | tee -a $T
grep -E "PASSED|FAILED|Failure|attn-tiles warpgroup|error" $T | cut -c1-220 | head -20
timeout 30 $B/cuda_attn_bench 8192,32768,131072 8192 8,wg128p 3 16 > $OUT/attn_bench.log 2>&1
grep -E "cuda-attn tokens" $OUT/attn_bench.log | cut -c1-200
