# Session 21 call 3: NEW2 = call 2's NEW + k_hc_mix with 4 tokens x 3 mixes a thread (128 threads, the same
# order per value: the logits hash must not move) and test_prefill_cuda_v4's error diagnostics. Tests of
# NEW2, then BASE / NEW2 at 32K and 128K on 4 layers x 256 experts, BASE again, the bf16
# ceiling; on a card of > 100 GB 8 layers x 256 experts NEW2 at 8K / 32K / 128K and the ceiling again.
source scripts/pdb_carry.sh
tar xJf .cache/devcarry_base/devcarry_base.tar.xz -C /tmp; BASE=/tmp/devcarry_base/bin  # f59fe7e cuda_v4_bench alone (sm_90)

pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
T=$OUT/tests.log
for t in test_cuda_v4_ops test_cuda_v4_engine test_prefill_cuda_v4; do
  echo "== NEW2 $t" >> $T; timeout 120 $B/$t >> $T 2>&1; echo "NEW2 $t rc=$?" | tee -a $T; done
grep -E "^== |PASSED|FAILED|Failure|device engine|hc_mix" $T | cut -c1-240
for b in "$BASE" "$B" "$BASE"; do echo "[$b]"; timeout 150 $b/cuda_v4_bench seeded v4-flash 4 256 3 32768,131072 bf16 60 profile; done 2>&1 \
  | tee $OUT/bench_4x256.log | grep -E "^\[|time=|profile" | cut -c1-250
python3 bench/gpu_prefill.py ceiling 2>&1 | tee $OUT/ceiling.log
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$MEM" -gt 100000 ]; then
  timeout 200 $B/cuda_v4_bench seeded v4-flash 8 256 3 8192,32768,131072 bf16 60 profile 2>&1 | tee $OUT/bench_8x256.log | grep -E "time=|profile" | cut -c1-250
  python3 bench/gpu_prefill.py ceiling 2>&1 | tee -a $OUT/ceiling.log
fi
