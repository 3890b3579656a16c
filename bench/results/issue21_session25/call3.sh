# Session 25 call 3 (the H200, needs_h200: 8 layers x 256 experts of V4-Flash's shape hold 107.5 GB; the device
# budget left no room for call1.sh whole): the final build's V4 rows (bench/gpu_prefill_v4.sh) and V2's attention
# alone (8 warps beside the engine's kernel, 128-key tiles ping-ponging).
source scripts/pdb_carry.sh
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 40 $B/cuda_attn_bench 8192,32768,131072 8192 8,wg128p 3 16 > $OUT/attn_bench.log 2>&1
grep -E "cuda-attn tokens" $OUT/attn_bench.log | cut -c1-200
OUT=$OUT/table_v4 LAYERS=8 timeout 200 bash bench/gpu_prefill_v4.sh 2>&1 | grep -E "^deepseek|T=.*time=|weight_gb|peer" | cut -c1-300
