#!/usr/bin/env bash
# run_device: the CPU benchmarks on a many-core machine (the GPU boxes' hosts: 16 or 32 cores).
#   bench/run_device.sh stage   # here: build, pack binaries + non-system shared libs into .cache/benchcarry
#   bench/run_device.sh run     # there (OUT=dir): make the models, run bench_decode and bench_prefill_memory
#   bench/run_device.sh diag    # there: where decode time goes (bench_decode --classes --phases, kernels)
#   bench/run_device.sh each 'ARGS' ...  # there: bench_decode on the 16-layer model once per ARGS
#                                         # (tokens threads [flags]), e.g. '128 16 --attn stages' '128 16 --context 2048';
#                                         # 'NAME: ARGS' runs the carried bench_decode.NAME (stage with VARIANTS)
# Prints only what the programs measured.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/pdb_carry.sh"
CARRY=$ROOT/.cache/benchcarry
OUT=${OUT:-$ROOT/.cache/bench-out}

stage() {
  cmake --build "$ROOT/build" --target pdbridge bench_decode bench_prefill_memory bench_qmat_kernels bench_pool_dispatch bench_read_patterns
  local bins=()
  for b in pdbridge bench_decode bench_prefill_memory bench_qmat_kernels bench_pool_dispatch bench_read_patterns; do bins+=("$ROOT/build/$b"); done
  # VARIANTS='name=path ...': other builds of bench_decode, carried as bench_decode.NAME (side by side)
  local tmpv
  tmpv=$(mktemp -d)
  for v in ${VARIANTS:-}; do cp "${v#*=}" "$tmpv/bench_decode.${v%%=*}" && bins+=("$tmpv/bench_decode.${v%%=*}"); done
  pdb_carry_pack "$CARRY" "${bins[@]}"
  rm -rf "$tmpv"
}

# unpack the staged binaries (there), note the machine
unpack() {
  mkdir -p "$OUT"
  [ -f "$CARRY/benchcarry.tar.xz" ] && tar xJf "$CARRY/benchcarry.tar.xz" -C /tmp && CARRY=/tmp/benchcarry
  export LD_LIBRARY_PATH="$CARRY/lib:${LD_LIBRARY_PATH:-}"
  B=$CARRY/bin
  { lscpu | grep -E "Model name|^CPU\(s\)|Thread|Socket|L3"; free -g | head -2
    echo "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled) defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag)"; } > "$OUT/machine.txt" 2>&1 || true
}

# the decode models, made once per machine: 16 layers (1.21 GB of weights per token, 3.9x a 300 MB
# L3: the roofline model) and the 4 layers of sessions 1-2 (483 MB, 1.5x: partly cache-resident)
decode_model() {
  M=/tmp/pdb-bench
  mkdir -p $M
  for n in ${MODELS:-16 4}; do
    [ -f $M/v2lite$n-mx/model.safetensors ] && continue
    local t0=$SECONDS
    "$B/pdbridge" make-model --preset v2-lite --layers $n --experts 16 --seed 3 --out $M/v2lite$n >/dev/null
    local t1=$SECONDS
    "$B/pdbridge" quantize --model $M/v2lite$n --out $M/v2lite$n-mx >/dev/null 2>&1
    echo "model v2lite$n: make-model $((t1 - t0)) s, quantize $((SECONDS - t1)) s" | tee -a "$OUT/machine.txt"
    rm -rf $M/v2lite$n
  done
}

# decode FLAGS...: bench_decode on both models at 16, 8, 4 and 1 threads
decode() {
  for n in 16 4; do
    for t in 16 8 4 1; do
      echo "== v2lite$n threads $t"; "$B/bench_decode" $M/v2lite$n-mx $([ $t = 1 ] && echo 48 || echo 128) $t "$@"
    done
  done
}

run() {
  unpack
  decode_model
  decode > "$OUT/decode.txt" 2>&1
  { echo "== bench_qmat_kernels 7"; "$B/bench_qmat_kernels" 7; echo "== bench_pool_dispatch 16"; "$B/bench_pool_dispatch" 16; } \
    > "$OUT/kernels.txt" 2>&1 || true
  cat "$OUT/kernels.txt"
  if [ "${PDB_BENCH_DECODE_ONLY:-0}" = 1 ]; then cat "$OUT/machine.txt" "$OUT/decode.txt"; return; fi
  "$B/pdbridge" make-model --preset tiny --seed 5 --out $M/tiny >/dev/null
  "$B/pdbridge" quantize --model $M/tiny --out $M/tiny-dec --scheme none >/dev/null 2>&1
  timeout 330 "$B/bench_prefill_memory" $M/tiny $M/tiny-dec 8192 32768 65536 > "$OUT/prefill_memory.txt" 2>&1 || echo "(stopped at the time limit)" >> "$OUT/prefill_memory.txt"
  cat "$OUT/machine.txt" "$OUT/decode.txt" "$OUT/prefill_memory.txt"
}

diag() {
  unpack
  cat "$OUT/machine.txt"
  decode_model
  "$B/bench_qmat_kernels" 5 2>&1 | tee "$OUT/kernels.txt"
  decode --classes --phases 2>&1 | tee "$OUT/diag.txt"
}

# each ARGS...: the 16-layer model only, one bench_decode per argument (appended to OUT/each.txt)
each() {
  unpack
  MODELS=16 decode_model
  for a in "$@"; do
    echo "== v2lite16 $a"
    bin=$B/bench_decode
    case "$a" in *:\ *) bin=$B/bench_decode.${a%%:*}; a=${a#*: } ;; esac
    # shellcheck disable=SC2086
    "$bin" $M/v2lite16-mx $a
  done 2>&1 | tee -a "$OUT/each.txt" | grep -E "^==|^threads|^decode|^paired|^pages|^dispatches|^bandwidth|ms +[0-9.]+%|of the probe"
}

case "${1:-}" in
  stage) stage ;;
  run) run ;;
  diag) diag ;;
  each) shift; each "$@" ;;
  *) echo "usage: $0 stage|run|diag|each ARGS..." >&2; exit 2 ;;
esac
