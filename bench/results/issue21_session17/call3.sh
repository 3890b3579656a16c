# Session 17 call 3: the bf16 GEMM ceiling and the new build in one run (mfu)
source scripts/pdb_carry.sh && pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
python3 bench/gpu_prefill.py ceiling 2>&1 | tee $OUT/ceiling.log
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1); LAY=4; [ "$mem" -gt 100000 ] && LAY=8
$B/cuda_v4_bench seeded v4-flash $LAY 256 3 8192,32768,131072 bf16 90 profile 2>&1 | tee $OUT/bench.log | grep -v "^$"
