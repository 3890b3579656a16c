#!/usr/bin/env bash
# gpu_hook: issue 21's device capture hook on the machine with the GPU, from binaries staged by
# `tools/cuda_validate.sh build` (carried as .cache/devcarry): (1) its exactness, test_prefill_cuda_v4 (the
# device hook's products against the CPU hook on identical inputs) and pool-validate of a tiny V4 on the
# cuda backend (the hook alone in bf16, the hook and the whole prefill in exact); (2) its cost: the product
# alone (each block tile beside cuBLAS SGEMM, bench/cuda_v4_bench.c mm) and cuda_v4_bench
# on a v4-flash-shaped checkpoint (4 layers, 8 experts) without a hook and with hook-feed (the products on
# the device, the decoder's cache fed on the host's cores) side by side in one process order.
#   bench/gpu_hook.sh [TOKENS]   (default "8192,32768"; env STEPS (default "test pv mm bench"), BUDGET_S (default 60))
# Writes $OUT/gpu_hook/*.log; prints only what the programs measured.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/.cache/gpu-out}/gpu_hook
TOKENS=${1:-8192,32768}
mkdir -p "$OUT"
source "$ROOT/scripts/pdb_carry.sh"
pdb_carry_unpack "$ROOT/.cache/devcarry"
B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
rc=0
for step in ${STEPS:-test pv mm bench}; do
  case $step in
    test)
      for t in test_prefill_cuda_v4 test_cuda_v4_engine; do
        (cd "$ROOT" && "$B/$t") > "$OUT/$t.log" 2>&1 || rc=1
        tail -3 "$OUT/$t.log"
      done ;;
    pv)
      M=/tmp/pdb-pv-deepseek_v4
      [ -d "$M-dec" ] || { "$B/pdbridge" make-model --arch deepseek_v4 --preset tiny --seed 3 --vocab 4000 --out "$M" >/dev/null &&
        "$B/pdbridge" quantize --model "$M" --out "$M-dec" --scheme none >/dev/null 2>&1; }
      for m in hook:bf16 both:exact; do
        "$B/pdbridge" pool-validate --decoder-model "$M-dec" --backend cuda --check "${m%:*}" --precision "${m#*:}" --tokens 512 \
          > "$OUT/pool_validate_${m%:*}_${m#*:}.log" 2>&1 || rc=1
        tail -4 "$OUT/pool_validate_${m%:*}_${m#*:}.log"
      done ;;
    mm) # the product alone at the hook's widths (a CSA layer's 512 + 2x1024 + 2x256 outputs, a sliding layer's 512)
      for shape in 8192,3072,4096 8192,512,4096; do "$B/cuda_v4_bench" mm $shape 10 >> "$OUT/mm.log" 2>&1 || rc=1; done
      cat "$OUT/mm.log" ;;
    bench)
      M=/tmp/pdb-v4flash-4l-8e
      [ -f "$M/config.json" ] || "$B/pdbridge" make-model --arch deepseek_v4 --preset v4-flash --layers 4 --experts 8 --seed 3 \
        --out "$M" > "$OUT/make_model.log" 2>&1
      for f in profile hook-feed,profile profile hook-feed,profile; do
        "$B/cuda_v4_bench" model "$M" "$TOKENS" bf16 "${BUDGET_S:-60}" "$f" >> "$OUT/bench_${f%%,*}.log" 2>&1 || rc=1
      done
      grep -h "^cuda-v4-bench" "$OUT"/bench_*.log ;;
  esac
done
echo "gpu_hook rc=$rc"
exit $rc
