# Session 18 call 2: the rope-out probe again (its sel is now read after the upload), then the
# engine's two size knobs on this build (pass bound 16384 vs 32768, GEMM tile rows 512 vs 1024 /
# 2048), then ncu over the indexer's kernels at 128K (2 layers).
source scripts/pdb_carry.sh && pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
$B/test_cuda_v4_attn > $OUT/test_cuda_v4_attn.log 2>&1; echo "test_cuda_v4_attn rc=$?"; grep -E "PASSED|FAILED|rope-out" $OUT/test_cuda_v4_attn.log | tail -6
python3 bench/gpu_prefill.py ceiling 2>&1 | tee $OUT/ceiling.log
for f in profile profile,chunk=32768 profile,rows=1024 profile,rows=2048 profile,chunk=32768,rows=1024 profile; do
  echo "[$f]"; $B/cuda_v4_bench seeded v4-flash 4 256 3 32768,131072 bf16 60 $f; done 2>&1 | tee $OUT/bench_knobs.log | grep -E "^\[|time=|profile_ms" | cut -c1-230
timeout 200 ncu --clock-control none --cache-control none --csv --page raw --metrics gpu__time_duration.sum,dram__bytes.sum \
  -k regex:"index|topk|k_v4_attn" $B/cuda_v4_bench seeded v4-flash 2 256 3 131072 bf16 60 > $OUT/ncu_idx.csv 2> $OUT/ncu.err; echo "ncu rc=$?"
python3 bench/results/issue21_session17/ncu_sum.py $OUT/ncu_idx.csv > $OUT/ncu_idx_summary.txt; head -20 $OUT/ncu_idx_summary.txt
