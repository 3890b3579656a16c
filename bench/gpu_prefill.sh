#!/usr/bin/env bash
# gpu_prefill: the GPU prefill table (issue 21) on the machine with the GPU, from binaries staged by
# `tools/cuda_validate.sh build` (carried as .cache/devcarry). Writes $OUT/gpu_prefill.csv with
# arch, layers, experts, tokens, precision, tok_s, model_gflop_per_token, ceiling_tflops, mfu,
# peer_tok_s, and the raw logs beside it. Every number is measured in this run (ceiling and peer
# included); a length the time budget skips is written as skipped, never estimated.
#   bench/gpu_prefill.sh [MODEL_DIR]   (default /tmp/pdb-v2lite-full: make-model preset v2-lite,
#                                       27 layers, 64 experts, vocab 102400, bf16, seed 3)
# Env: TOKENS (default "8192 32768 131072"), PEER_TOKENS (default "8192 32768"), BUDGET_S (one
# run's time budget of cuda_prefill_bench, default 200), OLD_ARCHIVE (another build's carry archive, one folder of bin/ and lib/:
# its engine is run on the same checkpoint at OLD_TOKENS, default "8192 32768", into engine_old.log,
# for a before/after in one run). The engine runs with the stage profile (profile_ms lines).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/.cache/gpu-out}
MODEL=${1:-/tmp/pdb-v2lite-full}
TOKENS=${TOKENS:-8192 32768 131072}
PEER_TOKENS=${PEER_TOKENS:-8192 32768}
mkdir -p "$OUT"
source "$ROOT/scripts/pdb_carry.sh"
pdb_carry_unpack "$ROOT/.cache/devcarry"
B=$CARRY/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1

if [ ! -f "$MODEL/config.json" ]; then
  s=$SECONDS
  "$B/pdbridge" make-model --arch deepseek_v2 --preset v2-lite --seed 3 --out "$MODEL" > "$OUT/make_model.log" 2>&1 || { cat "$OUT/make_model.log"; exit 1; }
  echo "make-model v2-lite (full) $((SECONDS - s)) s, $(du -sh "$MODEL" | cut -f1)" | tee -a "$OUT/make_model.log"
fi
python3 "$ROOT/bench/gpu_prefill.py" ceiling 2>&1 | tee "$OUT/ceiling.log"
ceil=$(sed -n 's/.*tflops=\([0-9.]*\).*/\1/p' "$OUT/ceiling.log" | tail -1)
layers=$(python3 -c "import json;print(json.load(open('$MODEL/config.json'))['num_hidden_layers'])")
experts=$(python3 -c "import json;print(json.load(open('$MODEL/config.json'))['n_routed_experts'])")

"$B/cuda_prefill_bench" "$MODEL" "$layers" "$experts" 8192 "${BUDGET_S:-200}" 0 bf16 "$(echo $TOKENS | tr ' ' ,)" profile 2>&1 | tee "$OUT/engine.log"
if [ -n "${OLD_ARCHIVE:-}" ]; then
  rm -rf /tmp/gpu-old && mkdir -p /tmp/gpu-old && tar xJf "$OLD_ARCHIVE" -C /tmp/gpu-old # one folder: bin/ and lib/
  old_bin=$(ls -d /tmp/gpu-old/*/bin | head -1)
  LD_LIBRARY_PATH="$old_bin/../lib:$LD_LIBRARY_PATH" "$old_bin/cuda_prefill_bench" \
    "$MODEL" "$layers" "$experts" 8192 "${BUDGET_S:-200}" 0 bf16 "$(echo ${OLD_TOKENS:-8192 32768} | tr ' ' ,)" 2>&1 | tee "$OUT/engine_old.log"
fi
python3 "$ROOT/bench/gpu_prefill.py" peer "$MODEL" $PEER_TOKENS 2>&1 | tee "$OUT/peer.log"

echo "arch,layers,experts,tokens,precision,tok_s,model_gflop_per_token,ceiling_tflops,mfu,peer_tok_s" > "$OUT/gpu_prefill.csv"
for T in $TOKENS; do
  tok=$(sed -n "s/^cuda-bench T=$T capture=on time=.* tokens_per_s=\([0-9]*\).*/\1/p" "$OUT/engine.log" | tail -1)
  peer=$(sed -n "s/^gpu-peer T=$T .*tok_s=\([0-9]*\).*/\1/p" "$OUT/peer.log" | tail -1)
  gf=$(python3 "$ROOT/bench/gpu_prefill.py" flops "$MODEL" "$T")
  mfu=skipped
  [ -n "$tok" ] && [ -n "$ceil" ] && mfu=$(python3 -c "print(f'{$tok * $gf / 1e3 / $ceil:.3f}')")
  echo "deepseek_v2,$layers,$experts,$T,bf16,${tok:-skipped},$gf,${ceil:-none},$mfu,${peer:-not_run}" >> "$OUT/gpu_prefill.csv"
done
cat "$OUT/gpu_prefill.csv"
