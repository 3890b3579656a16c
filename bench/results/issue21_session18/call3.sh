# Session 18 call 3: the hc mixes on pdb_cuda_v4_hc_mix (values change: the tests' tolerances and the
# bf16 engine against the CPU), x's bf16 copy, router 1024-row tiles, pass bound 32768; tests, then
# 54d8bb7 (session 17's last) and this build alternating, then ncu per kernel on this build.
source scripts/pdb_carry.sh && pdb_carry_unpack .cache/devcarry_old && mv /tmp/devcarry /tmp/devcarry_old; OLD=/tmp/devcarry_old
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
for t in test_cuda_v4_ops test_cuda_v4_attn test_cuda_v4_engine test_prefill_cuda_v4 test_cuda_prefill; do $B/$t > $OUT/$t.log 2>&1; echo "$t rc=$?"; grep -E "PASSED|FAILED|mixed|Failure|error" $OUT/$t.log | tail -4; done
python3 bench/gpu_prefill.py ceiling 2>&1 | tee $OUT/ceiling.log
for r in 1 2; do for b in $OLD/bin $B; do echo "[$b]"; $b/cuda_v4_bench seeded v4-flash 4 256 3 8192,32768,131072 bf16 60 profile; done; done 2>&1 | tee $OUT/bench_4x256.log | grep -E "^\[|time=" | cut -c1-200
python3 bench/gpu_prefill.py ceiling 2>&1 | tee -a $OUT/ceiling.log
timeout 240 ncu --clock-control none --cache-control none --csv --page raw --metrics gpu__time_duration.sum,dram__bytes.sum \
  $B/cuda_v4_bench seeded v4-flash 2 256 3 16384 bf16 60 > $OUT/ncu.csv 2> $OUT/ncu.err; echo "ncu rc=$?"
python3 bench/results/issue21_session17/ncu_sum.py $OUT/ncu.csv > $OUT/ncu_summary.txt; head -32 $OUT/ncu_summary.txt | cut -c1-150
