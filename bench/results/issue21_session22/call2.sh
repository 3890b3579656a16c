# Session 22 call 2: NEW = call 1 + the router on bf16 tensor cores as a two-term split (lo(x).hi(g) + hi(x).hi(g), D48)
# k_hc_mix at 32 tokens a block (the same bits), the indexer's scores on warpgroup MMA (k_v4_index_wg), q made inside k_v4_attn_wg from q_b's rows. Tests of NEW; BASE (5b834d8) / NEW / BASE at 32K and 128K on
# 4 layers x 256 experts, then NEW with attn-mma-sync (tc16 attention with q from heads_norm_rope, the mma.sync
# indexer); the bf16 ceiling; on a card of > 100 GB 8 layers x 256 experts; every kernel's time in one 128K
# forward of NEW under ncu.
source scripts/pdb_carry.sh
tar xJf .cache/devcarry_base/devcarry_base.tar.xz -C /tmp; BASE=/tmp/devcarry_base/bin
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
T=$OUT/tests.log
for t in test_cuda_v4_attn test_cuda_v4_index test_cuda_v4_ops test_cuda_v4_engine test_prefill_cuda_v4 test_cuda_prefill; do
  echo "== NEW $t" >> $T; timeout 150 $B/$t >> $T 2>&1; echo "NEW $t rc=$?" | tee -a $T; done
grep -E "^== |PASSED|FAILED|Failure|device engine|x16lo|forms:|GPU ms|invariance|32K-token|bad [1-9]|rope-out" $T | cut -c1-250
for b in "$BASE" "$B" "$BASE" "$B"; do f=profile; [ "$b" = "$B" ] && [ -n "$DONE" ] && f=profile,attn-mma-sync; [ "$b" = "$B" ] && DONE=1
  echo "[$b $f]"; timeout 150 $b/cuda_v4_bench seeded v4-flash 4 256 3 32768,131072 bf16 60 $f; done 2>&1 \
  | tee $OUT/bench_4x256.log | grep -E "^\[|time=|profile" | cut -c1-300
python3 bench/gpu_prefill.py ceiling 2>&1 | tee $OUT/ceiling.log | tail -2
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$MEM" -gt 100000 ]; then
  timeout 200 $B/cuda_v4_bench seeded v4-flash 8 256 3 8192,32768,131072 bf16 60 profile 2>&1 | tee $OUT/bench_8x256.log | grep -E "time=|profile" | cut -c1-300
  python3 bench/gpu_prefill.py ceiling 2>&1 | tee -a $OUT/ceiling.log | tail -1
fi
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 150 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
  $B/cuda_v4_bench seeded v4-flash 4 256 3 131072 bf16 60 > $OUT/ncu_128k.csv 2> $OUT/ncu_128k.err; echo "ncu rc=$?"
python3 bench/results/issue21_session22/ncu_sum.py $OUT/ncu_128k.csv > $OUT/ncu_128k_summary.txt; head -45 $OUT/ncu_128k_summary.txt
xz -9 $OUT/ncu_128k.csv
