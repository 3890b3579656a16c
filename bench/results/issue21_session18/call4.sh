# Session 18 call 4 (the same warm H200 as call 3): V4-Flash's shape, 8 layers x 256 experts, this build,
# the bf16 ceiling before and after (gpu_prefill.csv's V4 rows).
source scripts/pdb_carry.sh && pdb_carry_unpack .cache/devcarry; B=$CARRY/bin; nvidia-smi --query-gpu=name,memory.total --format=csv; python3 bench/gpu_prefill.py ceiling; $B/cuda_v4_bench seeded v4-flash 8 256 3 8192,32768,131072 bf16 60 profile 2>&1 | tee $OUT/bench_8x256.log | cut -c1-220; python3 bench/gpu_prefill.py ceiling
