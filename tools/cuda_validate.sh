#!/usr/bin/env bash
# cuda_validate: build the CUDA backend, its tests (V2 backend, V4 products) and the prefill benchmark
# (sm_90a), then run them
# on a GPU machine, writing logs to $OUT (default .cache/cuda-out). Invariant: prints only what the
# programs measured; on a machine without a GPU the test passes with "skipped: no GPU" lines and
# the bench prints "skipped".
#   tools/cuda_validate.sh build   # here: build + stage binaries and their shared libs in .cache/devcarry
#   tools/cuda_validate.sh run     # on the GPU machine: run the staged binaries
#   tools/cuda_validate.sh all     # both, on a machine that has the build dependencies and a GPU
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/pdb_carry.sh"
BUILD=${PDB_CUDA_BUILD:-$ROOT/build-cuda}
CARRY=$ROOT/.cache/devcarry
OUT=${OUT:-$ROOT/.cache/cuda-out}
MODE=${1:-all}
# the device-resident V4 engine's kernels and engine (src/cuda/pdb_cuda_v4_*)
V4_TESTS="test_cuda_v4_ops test_cuda_v4_attn test_cuda_v4_index test_cuda_v4_engine"
V4_BENCH="cuda_v4_bench"

build() {
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
  cmake --build "$BUILD" --target test_cuda_prefill test_prefill_cuda_v4 $V4_TESTS $V4_BENCH bench_prefill_memory cuda_prefill_bench \
    cuda_attn_bench pdbridge
  pdb_carry_pack "$CARRY" "$BUILD/test_cuda_prefill" "$BUILD/test_prefill_cuda_v4" "$BUILD/cuda_prefill_bench" "$BUILD/cuda_attn_bench" \
    "$BUILD/bench_prefill_memory" "$BUILD/pdbridge" $(for t in $V4_TESTS $V4_BENCH; do echo "$BUILD/$t"; done)
}

run() {
  mkdir -p "$OUT"
  pdb_carry_unpack "$CARRY"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$OUT/gpu.txt" || true
  set +e
  (cd "$ROOT" && "$CARRY/bin/test_cuda_prefill") 2>&1 | tee "$OUT/test_cuda_prefill.log"
  local trc=${PIPESTATUS[0]}
  (cd "$ROOT" && "$CARRY/bin/test_prefill_cuda_v4") 2>&1 | tee "$OUT/test_prefill_cuda_v4.log"
  local vrc=${PIPESTATUS[0]} t
  for t in $V4_TESTS; do
    (cd "$ROOT" && "$CARRY/bin/$t") 2>&1 | tee "$OUT/$t.log"
    [ "${PIPESTATUS[0]}" = 0 ] || vrc=1
  done
  "$CARRY/bin/cuda_prefill_bench" /tmp/pdb-cuda-bench-model "${PDB_BENCH_LAYERS:-4}" "${PDB_BENCH_EXPERTS:-16}" \
    "${PDB_BENCH_CHUNK:-8192}" "${PDB_BENCH_BUDGET:-150}" 2>&1 | tee "$OUT/cuda_prefill_bench.log"
  local brc=${PIPESTATUS[0]}
  # pool-validate on the GPU for both architectures: the hook alone and the whole prefill
  local prc=0 m
  # (V2's default bf16 engine is not the decoder's math: its hook alone; the exact engine: both checks)
  for m in "deepseek_v2:small:hook:bf16" "deepseek_v2:small:both:exact" "deepseek_v4:tiny:both:exact" "deepseek_v4:tiny:hook:bf16"; do
    IFS=: read -r arch preset check prec <<<"$m"
    [ -d "/tmp/pdb-pv-$arch-dec" ] ||
      { "$CARRY/bin/pdbridge" make-model --arch "$arch" --preset "$preset" --seed 3 --vocab 4000 --out "/tmp/pdb-pv-$arch" >/dev/null &&
        "$CARRY/bin/pdbridge" quantize --model "/tmp/pdb-pv-$arch" --out "/tmp/pdb-pv-$arch-dec" --scheme none >/dev/null 2>&1; }
    "$CARRY/bin/pdbridge" pool-validate --decoder-model "/tmp/pdb-pv-$arch-dec" --backend cuda --check "$check" --precision "$prec" \
      --tokens 512 2>&1 | tee "$OUT/pool_validate_${arch}_${check}_$prec.log"
    [ "${PIPESTATUS[0]}" = 0 ] || prc=1
  done
  set -e
  echo "test rc=$trc v4 test rc=$vrc bench rc=$brc pool-validate rc=$prc" | tee "$OUT/rc.txt"
  [ "$trc" = 0 ] && [ "$vrc" = 0 ] && [ "$brc" = 0 ] && [ "$prc" = 0 ]
}

case "$MODE" in
  build) build ;;
  run) run ;;
  all) build && run ;;
  *) echo "usage: $0 [build|run|all]" >&2; exit 2 ;;
esac
