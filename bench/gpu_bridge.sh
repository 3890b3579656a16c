#!/usr/bin/env bash
# gpu_bridge: issue 21's end-to-end table on the GPU machine: cold prompts through a front whose
# prefill server runs the CUDA engine on the GPU while both decoders (bridged and native) run on
# the host's CPU cores; bench/sweep_cold.sh does the measuring (fresh servers per size, a native
# decoder beside), from binaries staged by `tools/cuda_validate.sh build` (carried as
# .cache/devcarry) and the tokenizer in .cache/tokenizer (carry it too).
#   bench/gpu_bridge.sh [SIZES]   (default "8192 32768"; env ARCH (default deepseek_v2), PRESET (default
#                                  v2-lite), THREADS (decoder threads, default nproc), MAKE_ARGS (default
#                                  "--layers 4 --experts 64 --vocab 129280"), TIMEOUT_S)
# Writes $OUT/gpu_bridge.csv (arch, model, then sweep.csv's columns: one line per size, native and bridged TTFT and
# the ratio, verdicts, the engine's ms) and the raw bench-cold rows and server logs beside it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/.cache/gpu-out}/gpu_bridge
SIZES=${1:-8192 32768}
mkdir -p "$OUT"
source "$ROOT/scripts/pdb_carry.sh"
pdb_carry_unpack "$ROOT/.cache/devcarry"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1 || true
nproc > "$OUT/cpus.txt"
PDB_BIN="$CARRY/bin/pdbridge" "$ROOT/bench/sweep_cold.sh" --sizes "$SIZES" --arch "${ARCH:-deepseek_v2}" --preset "${PRESET:-v2-lite}" \
  --make-args "${MAKE_ARGS:---layers 4 --experts 64 --vocab 129280}" --models /tmp/pdb-gpu-bridge-models --out "$OUT" \
  --backend cuda --no-plot --threads "${THREADS:-$(nproc)}" --timeout-s "${TIMEOUT_S:-400}"
# gpu_bridge.csv: sweep.csv's columns after the architecture and the model (bench/results/gpu_bridge.csv's form)
awk -F, -v a="${ARCH:-deepseek_v2}" -v m="${PRESET:-v2-lite} ${MAKE_ARGS:---layers 4 --experts 64 --vocab 129280}" \
  'NR == 1 { print "arch,model," $0; next } { print a "," m "," $0 }' "$OUT/sweep.csv" > "$OUT/gpu_bridge.csv"
cat "$OUT/gpu_bridge.csv"
