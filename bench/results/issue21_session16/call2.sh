source scripts/pdb_carry.sh && pdb_carry_unpack .cache/devcarry
B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1); LAY=4; [ "$mem" -gt 100000 ] && LAY=8
for t in test_cuda_v4_engine test_cuda_prefill test_prefill_cuda_v4; do $B/$t > $OUT/$t.log 2>&1; echo "$t rc=$?"; grep -E "cuda-metric.*(16-row|chunked)|PASSED|FAILED" $OUT/$t.log | tail -6; done
python3 bench/gpu_prefill.py ceiling 2>&1 | tee $OUT/ceiling.log
for f in profile tiles-seq,profile profile tiles-seq,profile; do echo "[$f]"; $B/cuda_v4_bench seeded v4-flash $LAY 256 3 8192,32768 bf16 60 $f; done 2>&1 | tee $OUT/bench_seeded.log | grep -v "^$"
