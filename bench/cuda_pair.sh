#!/usr/bin/env bash
# cuda_pair: the CUDA prefill benchmark of two builds side by side in one run on the GPU machine
# (before/after a change), from archives staged by `tools/cuda_validate.sh build` (copy
# .cache/devcarry to .cache/devcarry-old before rebuilding to keep the "before").
#   bench/cuda_pair.sh OLD_ARCHIVE NEW_ARCHIVE MODEL_DIR LAYERS EXPERTS TOKENS [NEW_FLAGS...]
# Writes $OUT/pair_<layers>x<experts>_{old,new[_FLAGS]}.log; the model is made by the benchmark if
# missing (make-model v2-lite with that many layers and experts, vocab 32000, seed 3). Every number
# is the benchmark's own measurement; the old build ignores flags it does not know.
set -uo pipefail
old=$1 new=$2 model=$3 layers=$4 experts=$5 tokens=$6
shift 6
OUT=${OUT:-/tmp/cuda-pair}
mkdir -p "$OUT" /tmp/pair-old /tmp/pair-new
tar xJf "$old" -C /tmp/pair-old && tar xJf "$new" -C /tmp/pair-new || exit 1
cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null || true)
run() { # tag dir flags
  LD_LIBRARY_PATH="$2/devcarry/lib:/usr/local/cuda/lib64:${cublas_dir}" "$2/devcarry/bin/cuda_prefill_bench" \
    "$model" "$layers" "$experts" 8192 200 0 bf16 "$tokens" "$3" > "$OUT/pair_${layers}x${experts}_$1.log" 2>&1
  echo "== $1 ($3) rc=$?"; grep -E "tokens_per_s|profile_ms" "$OUT/pair_${layers}x${experts}_$1.log"
}
run old /tmp/pair-old ""
for f in "$@"; do run "new${f:+_${f//,/_}}" /tmp/pair-new "$f"; done
