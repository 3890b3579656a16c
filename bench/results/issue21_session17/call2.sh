# Session 17 call 2: the memory-bound kernels rewritten (hc post / site, gather, ranks, bf16 convert):
# tests, then the old build (HEAD before) and the new one on the same seeded weights, alternating
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
source scripts/pdb_carry.sh && pdb_carry_unpack .cache/devcarry_old && mv /tmp/devcarry /tmp/devcarry_old; OLD=/tmp/devcarry_old
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
for t in test_cuda_v4_ops test_cuda_v4_engine test_prefill_cuda_v4 test_cuda_prefill; do $B/$t > $OUT/$t.log 2>&1; echo "$t rc=$?"; grep -E "PASSED|FAILED|cuda-metric.*(16-row|chunked)" $OUT/$t.log | tail -4; done
for r in 1 2; do for b in $OLD/bin $B; do echo "[$b]"; $b/cuda_v4_bench seeded v4-flash 4 256 3 8192,32768,131072 bf16 60 profile; done; done 2>&1 | tee $OUT/bench_4x256.log | grep -v "^$"
timeout 300 ncu --clock-control none --cache-control none --csv --page raw --metrics gpu__time_duration.sum,dram__bytes.sum \
  $B/cuda_v4_bench seeded v4-flash 2 256 3 16384 bf16 60 > $OUT/ncu_2x256.csv 2> $OUT/ncu.err; echo "ncu rc=$?"
python3 bench/results/issue21_session17/ncu_sum.py $OUT/ncu_2x256.csv | tee $OUT/ncu_summary.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 100000 ]; then  # an H200: the table's 8-layer rows, with the ceiling measured in this call
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
  python3 bench/gpu_prefill.py ceiling 2>&1 | tee $OUT/ceiling.log
  $B/cuda_v4_bench seeded v4-flash 8 256 3 8192,32768,131072 bf16 90 profile 2>&1 | tee $OUT/bench_8x256.log | grep -v "^$"
fi
