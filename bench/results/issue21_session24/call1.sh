# Session 24 call 1: NEW = session 24's tree: k_mha_wg pipelined (S_j issued with P_{j-1} V_{j-1}, softmax of
# tile j while the P V product runs, 4 key-tile buffers, 2 tiles prefetched). BASE = 0b03870 (session 23's
# final build). NEW also runs the hook's kv_a, the exact engine's products and V2's router on k_dot32_tiled. NEW's tests (test_cuda_prefill: the warpgroup kernel against the mma.sync one bit for bit,
# every engine variant chunked = one shot); the kernel alone, BASE and NEW, each beside the unchanged
# mma.sync kernel (differing= counts NEW's bits against it); if the tests pass, the V2-Lite table.
source scripts/pdb_carry.sh
pdb_carry_unpack .cache/devcarry; B=$CARRY/bin
tar xJf .cache/devcarry_base/devcarry_base.tar.xz -C /tmp; BB=/tmp/devcarry_base/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
T=$OUT/tests.log
timeout 200 $B/test_cuda_prefill > $T 2>&1; rc=$?; echo "NEW test_cuda_prefill rc=$rc" | tee -a $T
grep -E "PASSED|FAILED|Failure|attn-tiles|error" $T | cut -c1-220 | head -20
for w in BASE NEW; do
  X=$B; [ $w = BASE ] && X=$BB
  echo "== $w" | tee -a $OUT/attn_bench.log
  timeout 150 $X/cuda_attn_bench 8192,32768,131072 8192 8,0 3 16 2>&1 | tee -a $OUT/attn_bench.log | grep -E "cuda-attn" | cut -c1-200
done
# NEW also holds the tiled exact-order dot32 (the hook's kva and the exact engine's products): test_gpu_dot32
# above checks it bit for bit against pdb_qmat_dot and prints its rate beside the general kernel's.
grep -E "cuda-metric dot32|dot32.*differing" $T | cut -c1-200 | head -20
# the two exact-order f32 kernels side by side (V4's k_v4_mm_exact tiles, V2's dot32) and SGEMM, bits against tile 0:
# the hook's shapes of V2-Lite (kv_a) and V4 (the default); which one stays as the single exact-order kernel
for d in 32768,576,2048 8192,3072,4096; do timeout 60 $B/cuda_v4_bench mm $d 5 2>&1 | tee -a $OUT/mm_exact.log | cut -c1-160; done
# if the tests pass: the V2-Lite table (27 layers, 64 experts, bf16), BASE's engine beside it at 8K and 32K
if [ $rc -eq 0 ]; then
  OUT=$OUT/table_v2 OLD_ARCHIVE=$PWD/.cache/devcarry_base/devcarry_base.tar.xz timeout 380 bash bench/gpu_prefill.sh 2>&1 | tail -8
  (cd $OUT && tar cJf table_v2.tar.xz table_v2 && rm -rf table_v2)
fi
