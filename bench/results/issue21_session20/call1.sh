# Session 20 call 1: the build of f59fe7e (session 19's last, never run on a GPU): the device tests, the bf16
# ceiling, 8 layers x 256 experts at 8K / 32K / 128K with the pass memory (device_gb / engine_gb) when the card
# has > 100 GB, the ceiling again, then ncu over every kernel of a 32K pass on 4 layers (time + DRAM bytes).
source scripts/pdb_carry.sh
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin; D=bench/results/issue21_session20
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
T=$OUT/tests.log
for t in test_cuda_v4_ops test_cuda_v4_attn test_cuda_v4_index test_cuda_v4_engine; do echo "== $t" >> $T; $B/$t >> $T 2>&1; echo "$t rc=$?" | tee -a $T; done
grep -E "PASSED|FAILED|Failure|32K-token|v4flash tc16:" $T
python3 bench/gpu_prefill.py ceiling 2>&1 | tee $OUT/bench.log
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$MEM" -gt 100000 ]; then L=8; else L=4; fi
$B/cuda_v4_bench seeded v4-flash $L 256 3 8192,32768,131072 bf16 60 profile 2>&1 | tee -a $OUT/bench.log | grep -E "time=|profile|_gb" | cut -c1-260
python3 bench/gpu_prefill.py ceiling 2>&1 | tee -a $OUT/bench.log
timeout 200 ncu --clock-control none --cache-control none --csv --page raw --metrics gpu__time_duration.sum,dram__bytes.sum \
  $B/cuda_v4_bench seeded v4-flash 4 256 1 32768 bf16 60 > $OUT/ncu32k.csv 2> /tmp/ncu.err; echo "ncu rc=$?"; tail -3 /tmp/ncu.err
python3 $D/ncu_pass.py $OUT/ncu32k.csv > $OUT/ncu32k_summary.txt; head -40 $OUT/ncu32k_summary.txt | cut -c1-160; xz -9 $OUT/ncu32k.csv
