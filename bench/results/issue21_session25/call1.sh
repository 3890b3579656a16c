# Session 25 call 1 (the H200, needs_h200: the 8-layer V4-Flash-shaped model holds 107.5 GB of weights).
# NEW = this tree: V2's warpgroup attention with 128-key tiles (k_mha_wg<128>, the engine's default), its tile
# loads by fixed per-thread swizzle (134 / 163 registers instead of 204 / 255 with spills), O's rescale skipped
# where both corrections are 1. BASE = b131f8a (session 24's final build, carried as .cache/devcarry_base).
# 1. NEW's test_cuda_prefill (the attention tiles: wg64 bit for bit with mma.sync, wg128 within tolerance; every
#    V2 engine chunked = one shot), 2. the attention alone, BASE and NEW, 3. the V4 rows (8 layers x 256 experts).
source scripts/pdb_carry.sh
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
rm -rf /tmp/base && mkdir -p /tmp/base && tar xJf .cache/devcarry_base/devcarry_base.tar.xz -C /tmp/base; OB=$(ls -d /tmp/base/*/bin)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
T=$OUT/tests.log
timeout 200 $B/test_cuda_prefill > $T 2>&1; rc=$?; echo "NEW test_cuda_prefill rc=$rc" | tee -a $T
grep -E "PASSED|FAILED|Failure|attn-tiles|error" $T | cut -c1-220 | head -20
A=$OUT/attn_bench.log
( echo "[BASE]"; LD_LIBRARY_PATH=$OB/../lib:$LD_LIBRARY_PATH timeout 60 $OB/cuda_attn_bench 8192,32768,131072 8192 8,0 3 16
  echo "[NEW]"; timeout 90 $B/cuda_attn_bench 8192,32768,131072 8192 8,wg64,wg128 3 16 ) > $A 2>&1
grep -E "^\[|cuda-attn tokens" $A | cut -c1-200
OUT=$OUT/table_v4 LAYERS=8 timeout 260 bash bench/gpu_prefill_v4.sh 2>&1 | grep -E "^deepseek|T=.*time=|weight_gb|peer" | cut -c1-300
