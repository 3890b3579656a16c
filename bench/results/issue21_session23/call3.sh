# Session 23 call 3: the table rows of call 2's build. Tests of NEW on this card; BASE (281e922) / NEW / BASE at 8K,
# 32K and 128K on LAYERS x 256 experts (8 on a card of > 100 GB, else 4); then bench/gpu_prefill_v4.sh (the bf16
# ceiling, NEW's seeded rows, the 4-layer 8-expert checkpoint and transformers on it: the peer) -> table/.
source scripts/pdb_carry.sh
tar xJf .cache/devcarry_base/devcarry_base.tar.xz -C /tmp; BASE=/tmp/devcarry_base/bin
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1); L=4; [ "$MEM" -gt 100000 ] && L=8
T=$OUT/tests.log
for t in test_cuda_v4_engine test_prefill_cuda_v4; do
  echo "== NEW $t" >> $T; timeout 150 $B/$t >> $T 2>&1; echo "NEW $t rc=$?" | tee -a $T; done
for b in "$BASE" "$B" "$BASE"; do echo "[$b]"; timeout 200 $b/cuda_v4_bench seeded v4-flash $L 256 3 8192,32768,131072 bf16 60 profile; done 2>&1 \
  | tee $OUT/bench_${L}x256.log | grep -E "^\[|time=" | cut -c1-250
OUT=$OUT/table LAYERS=$L bash bench/gpu_prefill_v4.sh 2>&1 | tail -12
