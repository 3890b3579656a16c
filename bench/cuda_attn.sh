#!/usr/bin/env bash
# cuda_attn: the attention kernel's benchmark on the GPU machine, from binaries staged by
# `tools/cuda_validate.sh build` (.cache/devcarry): cuda_attn_bench per tile configuration (times,
# TFLOP/s, bit-identity with the first configuration), torch SDPA on the same shapes in the same
# run (the peer), and with NCU=1 one Nsight Compute report of the first configuration's
# launch for the last 8192-token pass of a 32K prompt (--clock-control none). With OLD_ARCHIVE
# (another build's devcarry.tar.xz holding cuda_attn_bench) that build's kernel runs in the same
# call, configurations OLD_CFGS, into cuda_attn_bench_old.log (a before/after). Logs into $OUT.
#   bench/cuda_attn.sh [T,T,...] [W,W,...]   (defaults 8192,32768,131072 and 8,4; W: warps per block)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/.cache/attn-out}
TS=${1:-8192,32768,131072}
CFGS=${2:-8,4}
mkdir -p "$OUT"
CARRY=$ROOT/.cache/devcarry
if [ -f "$CARRY/devcarry.tar.xz" ]; then tar xJf "$CARRY/devcarry.tar.xz" -C /tmp && CARRY=/tmp/devcarry; fi
export LD_LIBRARY_PATH="$CARRY/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
"$CARRY/bin/cuda_attn_bench" "$TS" 8192 "$CFGS" 3 2>&1 | tee "$OUT/cuda_attn_bench.log"
if [ -n "${OLD_ARCHIVE:-}" ]; then
  mkdir -p /tmp/attn-old && tar xJf "$OLD_ARCHIVE" -C /tmp/attn-old &&
    d=$(ls -d /tmp/attn-old/*/ | head -1) && LD_LIBRARY_PATH="$d/lib:/usr/local/cuda/lib64" "$d/bin/cuda_attn_bench" \
      "$TS" 8192 "${OLD_CFGS:-4x2}" 3 2>&1 | tee "$OUT/cuda_attn_bench_old.log"
fi
python3 "$ROOT/bench/gpu_prefill.py" attn $(echo "$TS" | tr , ' ') 2>&1 | tee "$OUT/attn_peer.log"
if [ "${NCU:-0}" = 1 ]; then
  for c in $(echo "$CFGS" | cut -d, -f1); do
    # the prompt's 4 passes run untimed once, then 3 timed: launch 4 of the first run is the last pass
    timeout 240 ncu --clock-control none --set full -k regex:k_mha_tc --launch-skip 3 --launch-count 1 \
      "$CARRY/bin/cuda_attn_bench" 32768 8192 "$c" 1 > "$OUT/ncu_$c.txt" 2>&1
    echo "ncu $c rc=$?"
  done
fi
