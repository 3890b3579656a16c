# Session 22 call 3: FINAL = call 2's NEW without q inside the attention (reverted) and with k_hc_mix back at 64
# tokens a block (both slower in call 2). Tests of FINAL; BASE (5b834d8) / FINAL / BASE at 32K and 128K on 4 layers
# x 256 experts; FINAL with 2048-row M-invariant tiles (rows=2048, not the default); the bf16 ceiling; on a card of > 100 GB 8 layers x 256 experts and the ceiling again.
source scripts/pdb_carry.sh
tar xJf .cache/devcarry_base/devcarry_base.tar.xz -C /tmp; BASE=/tmp/devcarry_base/bin
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
T=$OUT/tests.log
for t in test_cuda_v4_attn test_cuda_v4_ops test_cuda_v4_engine test_prefill_cuda_v4; do
  echo "== FINAL $t" >> $T; timeout 150 $B/$t >> $T 2>&1; echo "FINAL $t rc=$?" | tee -a $T; done
grep -E "PASSED|FAILED|Failure|device engine bf16 chunk=1000" $T | cut -c1-250
for b in "$BASE" "$B" "$BASE"; do echo "[$b]"; timeout 150 $b/cuda_v4_bench seeded v4-flash 4 256 3 32768,131072 bf16 60 profile; done 2>&1 \
  | tee $OUT/bench_4x256.log | grep -E "^\[|time=|profile" | cut -c1-300
timeout 150 $B/cuda_v4_bench seeded v4-flash 4 256 3 32768,131072 bf16 60 profile,rows=2048 2>&1 | tee $OUT/bench_rows2048.log \
  | grep -E "time=" | cut -c1-200
python3 bench/gpu_prefill.py ceiling 2>&1 | tee $OUT/ceiling.log | tail -1
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$MEM" -gt 100000 ]; then
  timeout 200 $B/cuda_v4_bench seeded v4-flash 8 256 3 8192,32768,131072 bf16 60 profile 2>&1 | tee $OUT/bench_8x256.log | grep -E "time=|profile" | cut -c1-300
  python3 bench/gpu_prefill.py ceiling 2>&1 | tee -a $OUT/ceiling.log | tail -1
fi
