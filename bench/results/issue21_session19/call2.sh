# Session 19 call 2: three builds side by side. OLD: session 18 (05bddea); MID: call 1's (53d8327: the
# indexer's scores a warp per token, the new top-k); NEW: MID + the scores' k loop unbounded at ihd 64 /
# 128 / 256 and the attention's lazy running max (rescale only past e^8, the products skipped while the
# corrections are 1). Tests of NEW, the indexer's own timing MID vs NEW, 4 layers x 256 experts OLD / MID /
# NEW, then (a GPU with > 100 GB) 8 layers x 256 experts NEW between two bf16 ceilings, then ncu per
# kernel of NEW's 128K pass (attention, indexer, top-k).
source scripts/pdb_carry.sh
pdb_carry_unpack .cache/devcarry_old && mv /tmp/devcarry /tmp/devcarry_old; OLD=/tmp/devcarry_old/bin
pdb_carry_unpack .cache/devcarry_mid && mv /tmp/devcarry /tmp/devcarry_mid; MID=/tmp/devcarry_mid/bin
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin; D=bench/results/issue21_session19
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
T=$OUT/tests.log
for t in test_cuda_v4_ops test_cuda_v4_attn test_cuda_v4_index test_cuda_v4_engine; do echo "== NEW $t" >> $T; $B/$t >> $T 2>&1; echo "$t rc=$?" | tee -a $T; done
grep -E "PASSED|FAILED|Failure|32K-token|v4flash tc16:" $T
for t in test_cuda_v4_index test_cuda_v4_attn; do echo "== MID $t" >> $T; $MID/$t >> $T 2>&1; echo "MID $t rc=$?" | tee -a $T; done
grep -A400 "== MID" $T | grep -E "32K-token|v4flash tc16:"
for b in $OLD $MID $B; do echo "[$b]"; $b/cuda_v4_bench seeded v4-flash 4 256 3 32768,131072 bf16 60 profile; done 2>&1 | tee $OUT/bench_4x256.log | grep -E "^\[|time=|profile" | cut -c1-250
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$MEM" -gt 100000 ]; then
  python3 bench/gpu_prefill.py ceiling 2>&1 | tee $OUT/ceiling.log
  $B/cuda_v4_bench seeded v4-flash 8 256 3 8192,32768,131072 bf16 60 profile 2>&1 | tee $OUT/bench_8x256.log | grep -E "time=|profile" | cut -c1-250
  python3 bench/gpu_prefill.py ceiling 2>&1 | tee -a $OUT/ceiling.log
fi
timeout 100 ncu --clock-control none --cache-control none --csv --page raw --metrics gpu__time_duration.sum,dram__bytes.sum \
  --kernel-name regex:'.*(k_embed_hc|index|topk|attn_tc16).*' \
  $B/cuda_v4_bench seeded v4-flash 4 256 3 131072 bf16 60 > $OUT/ncu128k.csv 2> /tmp/ncu128k.err; echo "ncu rc=$?"
python3 $D/ncu_pass.py $OUT/ncu128k.csv > $OUT/ncu128k_summary.txt; head -6 $OUT/ncu128k_summary.txt | cut -c1-150; xz -9 $OUT/ncu128k.csv
