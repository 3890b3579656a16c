# Session 25 call 1h (an H100: the H200 did not start): call1.sh's NEW and BASE (the same builds) without the
# 8-layer V4 model (107.5 GB of weights: not on 80 GB). 1. NEW's test_cuda_prefill, 2. the attention alone, BASE
# and NEW, 3. if the tests pass, the V2-Lite table (27 layers, 64 experts) with BASE's engine beside it.
source scripts/pdb_carry.sh
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
rm -rf /tmp/base && mkdir -p /tmp/base && tar xJf .cache/devcarry_base/devcarry_base.tar.xz -C /tmp/base; OB=$(ls -d /tmp/base/*/bin)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
T=$OUT/tests.log
timeout 150 $B/test_cuda_prefill > $T 2>&1; rc=$?; echo "NEW test_cuda_prefill rc=$rc" | tee -a $T
grep -E "PASSED|FAILED|Failure|attn-tiles|error" $T | cut -c1-220 | head -20
A=$OUT/attn_bench.log
( echo "[BASE]"; LD_LIBRARY_PATH=$OB/../lib:$LD_LIBRARY_PATH timeout 60 $OB/cuda_attn_bench 8192,32768,131072 8192 8,0 3 16
  echo "[NEW]"; timeout 90 $B/cuda_attn_bench 8192,32768,131072 8192 8,wg64,wg128,wg64p,wg128p 3 16 ) > $A 2>&1
grep -E "^\[|cuda-attn tokens" $A | cut -c1-200
if [ $rc -eq 0 ]; then
  OUT=$OUT/table_v2 OLD_ARCHIVE=$PWD/.cache/devcarry_base/devcarry_base.tar.xz timeout 330 bash bench/gpu_prefill.sh 2>&1 | tail -4
  grep -h "tokens_per_s\|profile_ms" $OUT/table_v2/engine_old.log $OUT/table_v2/engine.log | grep "capture=on" | cut -c1-330
fi
