# Session 23 call 1: NEW = 281e922 + a hookless engine (no hook slots) and q / o_a / o sized to what the bf16 path
# stores, so that 32K-token passes fit beside the 4 x 256-expert weights on an 80 GB card; the bf16 SwiGLU 8 values
# a thread (k_swiglu8). Tests of NEW; BASE (281e922) / NEW / BASE at 32K and 128K on 4 layers x 256 experts (the
# logits hashes side by side); NEW with 16K passes (chunk=16384); the bf16 ceiling; a 128K forward of NEW under ncu.
source scripts/pdb_carry.sh
tar xJf .cache/devcarry_base/devcarry_base.tar.xz -C /tmp; BASE=/tmp/devcarry_base/bin
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
T=$OUT/tests.log
for t in test_cuda_v4_ops test_cuda_v4_engine test_cuda_v4_attn test_prefill_cuda_v4; do
  echo "== NEW $t" >> $T; timeout 150 $B/$t >> $T 2>&1; echo "NEW $t rc=$?" | tee -a $T; done
grep -E "PASSED|FAILED|Failure|hookless|swiglu bf16 g" $T | cut -c1-250
for b in "$BASE" "$B" "$BASE"; do echo "[$b]"; timeout 150 $b/cuda_v4_bench seeded v4-flash 4 256 3 32768,131072 bf16 60 profile; done 2>&1 \
  | tee $OUT/bench_4x256.log | grep -E "^\[|time=|profile" | cut -c1-300
timeout 150 $B/cuda_v4_bench seeded v4-flash 4 256 3 32768,131072 bf16 60 profile,chunk=16384 2>&1 | tee $OUT/bench_chunk16k.log \
  | grep -E "time=|profile" | cut -c1-300
python3 bench/gpu_prefill.py ceiling 2>&1 | tee $OUT/ceiling.log | tail -1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 200 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
  $B/cuda_v4_bench seeded v4-flash 4 256 3 131072 bf16 60 > $OUT/ncu_128k.csv 2> $OUT/ncu_128k.err; echo "ncu rc=$?"
python3 bench/results/issue21_session22/ncu_sum.py $OUT/ncu_128k.csv > $OUT/ncu_128k_summary.txt; head -40 $OUT/ncu_128k_summary.txt
xz -9 $OUT/ncu_128k.csv
