#!/usr/bin/env bash
# gpu_prefill_v4: the DeepSeek-V4 rows of the GPU prefill table (issue 21) on the machine with the GPU, from
# binaries staged by `tools/cuda_validate.sh build` (carried as .cache/devcarry): the device-resident engine
# (bench/cuda_v4_bench.c) on (1) a V4-Flash-shaped model with all 256 experts and LAYERS layers whose weights
# are seeded on the device (make-model's bf16 stream of seed 3: no checkpoint on disk; no peer can load it),
# and (2) a checkpoint small enough to write (v4-flash, 4 layers, 8 experts) that transformers also runs (the
# peer, same file, same run). Writes $OUT/gpu_prefill_v4.csv (gpu_prefill.csv's columns) and the raw logs.
# Env: LAYERS (default 8: what fits 139 GiB with the scratch of 8192-token passes), TOKENS (default "8192 32768
# 131072"), PEER_TOKENS (default "8192 32768"), BUDGET_S (default 60).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/.cache/gpu-out}
TOKENS=${TOKENS:-8192 32768 131072}
PEER_TOKENS=${PEER_TOKENS:-8192 32768}
mkdir -p "$OUT"
source "$ROOT/scripts/pdb_carry.sh"
pdb_carry_unpack "$ROOT/.cache/devcarry"
B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
python3 "$ROOT/bench/gpu_prefill.py" ceiling 2>&1 | tee "$OUT/ceiling.log"
ceil=$(sed -n 's/.*tflops=\([0-9.]*\).*/\1/p' "$OUT/ceiling.log" | tail -1)
"$B/cuda_v4_bench" seeded v4-flash "${LAYERS:-8}" 256 3 "$(echo $TOKENS | tr ' ' ,)" bf16 "${BUDGET_S:-60}" profile 2>&1 | tee "$OUT/v4_bench.log"
M=/tmp/pdb-v4flash-4l-8e
[ -f "$M/config.json" ] || "$B/pdbridge" make-model --arch deepseek_v4 --preset v4-flash --layers 4 --experts 8 --seed 3 --out "$M" > "$OUT/make_model.log" 2>&1
"$B/cuda_v4_bench" model "$M" "$(echo $PEER_TOKENS | tr ' ' ,)" bf16 "${BUDGET_S:-60}" profile 2>&1 | tee "$OUT/v4_bench_file.log"
python3 "$ROOT/bench/gpu_prefill.py" peer "$M" $PEER_TOKENS 2>&1 | grep gpu-peer | tee "$OUT/peer.log"
echo "arch,layers,experts,tokens,precision,tok_s,model_gflop_per_token,ceiling_tflops,mfu,peer_tok_s" > "$OUT/gpu_prefill_v4.csv"
row() { # LOG LAYERS EXPERTS T PEER
  local tok gf mfu=skipped
  tok=$(sed -n "s/^cuda-v4-bench T=$4 time=.* tokens_per_s=\([0-9]*\) .*/\1/p" "$1" | tail -1)
  gf=$(sed -n "s/^cuda-v4-bench T=$4 .*model_gflop_per_token=\([0-9.]*\).*/\1/p" "$1" | tail -1)
  [ -n "$tok" ] && [ -n "$ceil" ] && mfu=$(python3 -c "print(f'{$tok * $gf / 1e3 / $ceil:.3f}')")
  echo "deepseek_v4,$2,$3,$4,bf16,${tok:-skipped},${gf:-none},${ceil:-none},$mfu,$5" >> "$OUT/gpu_prefill_v4.csv"
}
for T in $TOKENS; do row "$OUT/v4_bench.log" "${LAYERS:-8}" 256 "$T" not_run; done
for T in $PEER_TOKENS; do
  peer=$(sed -n "s/^gpu-peer T=$T .*tok_s=\([0-9]*\).*/\1/p" "$OUT/peer.log" | tail -1)
  grep -q "^gpu-peer T=$T out_of_memory" "$OUT/peer.log" && peer=out_of_memory
  row "$OUT/v4_bench_file.log" 4 8 "$T" "${peer:-not_run}"
done
cat "$OUT/gpu_prefill_v4.csv"
