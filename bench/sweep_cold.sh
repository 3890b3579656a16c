#!/usr/bin/env bash
# sweep_cold.sh: `pdbridge bench-cold` over prompt sizes, bridged and native, with FRESH servers
# per size (so each server's peak RSS is that prompt's), then PNG plots drawn by gnuplot.
#
#   bench/sweep_cold.sh [--sizes "2000 4000 8000"] [--arch deepseek_v2|deepseek_v4] [--preset NAME]
#                       [--models DIR] [--out DIR] [--block-size N] [--threads N] [--seed S]
#                       [--max-tokens K] [--ignore-eos] [--timeout-s T] [--logx] [--replot]
#                       [--backend cpu|cuda] [--make-args "ARGS"] [--no-plot]
#
# Per size: a decoder, a native decoder (empty cache), a prefill server (CPU backend) and a front
# start on port 0 (their "listening on" line gives the URL); one `bench-cold --native` measures
# the cold prompt through the front and on the native decoder, a second `bench-cold` with the
# same --seed sends the same prompt again through the front: its row (verdict `skipped warm`,
# mode `front`) is the warm mount's time to first token. Then the four servers are stopped.
# bench-cold never labels a row whose verdict is not `complete` bridged (mode `front`); this
# script plots and tabulates a bridged TTFT and a ratio only from `bridged` rows.
# Models (make-model --seed 1, then quantize --scheme none for the decoder) are generated once
# under --models (default .cache/sweep) and reused when present, as `pdbridge up` does.
# Output in --out (default bench/results/sweep_cold; its CSVs are rewritten):
#   bench_cold.csv   every bench-cold row, as bench-cold wrote them (3 per size)
#   sweep.csv        one line per size: the table below, numbers only (empty: not measured)
#   ttft.png ratio.png prefill_rss.png overhead.png warm_ttft.png   the plots (640x400)
# --replot redraws the PNGs and the table from an existing --out's sweep.csv, measuring nothing.
# --ignore-eos: every request generates K tokens (the bridged and native answers compared over all K);
# --timeout-s: bench-cold's per-request limit (default 14400: a 1M-token native prefill on a CPU);
# --logx: the plots' x axis (prompt tokens) in log scale (for sweeps from 8K to 1M).
# --backend: the prefill server's engine (cuda on the GPU machine: the decoders stay on its CPUs);
# --make-args: extra make-model options for the checkpoint (e.g. "--layers 4 --experts 64 --vocab 129280"),
# which then lives under its own directory name; --no-plot: the table and CSVs only (no gnuplot needed).
# sweep.csv's columns past warm_cached_tokens (empty in sweeps made before them): the bridged row's
# blocks written/requested, the prefill engine's ms (the verdict's engine_ms), the bridged and
# native total seconds, answer_equal (bench-cold: the native answer's bytes equal the bridged one's)
# and overhead = bridged TTFT / the engine's own time for the same prompt (overhead.png).
# Progress goes to stderr, the table to stdout. Needs build/pdbridge (PDB_BIN overrides) and gnuplot.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tests/common/pdb_e2e.sh

SIZES="2000 4000 8000" ARCH=deepseek_v2 PRESET="" MODELS=.cache/sweep OUT=bench/results/sweep_cold
BS=512 THREADS="" SEED=7 MAXTOK=16 REPLOT=0 IGNORE_EOS=() TIMEOUT=14400 LOGX=0 BACKEND=cpu MAKE_ARGS="" NOPLOT=0
BIN="${PDB_BIN:-build/pdbridge}"

# Print a progress line on stderr.
say() { echo "sweep: $*" >&2; }

# Print an error on stderr and exit 1.
die() { echo "sweep_cold.sh: $*" >&2; exit 1; }

# Parse the options into the globals above; --help prints the header comment.
parse_args() {
    while [ $# -gt 0 ]; do
        case "$1" in
            -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
            --replot) REPLOT=1; shift; continue ;;
            --ignore-eos) IGNORE_EOS=(--ignore-eos); shift; continue ;;
            --logx) LOGX=1; shift; continue ;;
            --no-plot) NOPLOT=1; shift; continue ;;
        esac
        [ $# -ge 2 ] || die "$1 needs a value"
        case "$1" in
            --sizes) SIZES="$2" ;; --arch) ARCH="$2" ;; --preset) PRESET="$2" ;; --models) MODELS="$2" ;;
            --out) OUT="$2" ;; --block-size) BS="$2" ;; --threads) THREADS="$2" ;; --seed) SEED="$2" ;;
            --max-tokens) MAXTOK="$2" ;; --timeout-s) TIMEOUT="$2" ;;
            --backend) BACKEND="$2" ;; --make-args) MAKE_ARGS="$2" ;;
            *) die "bad option '$1' (--help lists them)" ;;
        esac
        shift 2
    done
    case "$ARCH" in deepseek_v2) : "${PRESET:=small}" ;; deepseek_v4) : "${PRESET:=tiny}" ;; *) die "--arch deepseek_v2 or deepseek_v4" ;; esac
}

# Refuse to start without the binary or gnuplot, saying how to get each.
check_tools() {
    [ -x "$BIN" ] || die "$BIN is missing: build it first (cmake -S . -B build -G Ninja && cmake --build build --target pdbridge)"
    [ "$NOPLOT" = 1 ] || command -v gnuplot >/dev/null || die "gnuplot is missing: install it (Debian: apt-get install -y gnuplot-nox)"
}

# Generate the model and its decoder copy under $MODELS once; sets HF and DEC.
prepare_models() {
    local tag=${MAKE_ARGS// /}
    HF="$MODELS/$ARCH-$PRESET${tag:+-$tag}" DEC="$MODELS/$ARCH-$PRESET${tag:+-$tag}-dec-none"
    local vocab=() extra
    read -r -a extra <<<"$MAKE_ARGS"
    [ "$ARCH" = deepseek_v4 ] && vocab=(--vocab 129280)   # the real tokenizer's vocabulary, as `up` does
    mkdir -p "$MODELS"
    if [ ! -f "$HF/model.safetensors" ]; then
        say "writing a random $ARCH checkpoint (preset $PRESET, seed 1) to $HF"
        "$BIN" make-model --arch "$ARCH" --preset "$PRESET" --seed 1 --out "$HF" "${vocab[@]}" "${extra[@]}" >&2
    fi
    if [ ! -f "$DEC/pdbridge_decoder.json" ]; then
        say "writing the decoder's checkpoint (scheme none) to $DEC"
        "$BIN" quantize --model "$HF" --out "$DEC" --scheme none >&2
    fi
}

# Servers start and stop through tests/common/pdb_e2e.sh (pdb_e2e_start: log in $T/NAME.log,
# wait for "listening on", sets URL; pdb_e2e_stop_all), with T the sweep's work directory.
start() { pdb_e2e_start "$@"; }
stop_all() { pdb_e2e_stop_all; }

# A column of a bench-cold CSV row (FILE, row number counting from 1 after the header, COLUMN).
col() {
    awk -F, -v r="$2" -v c="$3" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i; next }
                                 NR == r + 1 { print (k ? $k : "") }' "$1"
}

# Measure one size N with fresh servers and append its line to sweep.csv.
run_size() {
    local n=$1 t=()
    [ -n "$THREADS" ] && t=(--threads "$THREADS")
    rm -rf "$W/cache" "$W/cache-n" "$W"/*.csv
    start decoder "$BIN" decode-server --model "$DEC" --cache-dir "$W/cache" --port 0 --block-size "$BS" "${t[@]}"; local dec=$URL
    start native "$BIN" decode-server --model "$DEC" --cache-dir "$W/cache-n" --port 0 --block-size "$BS" "${t[@]}"; local nat=$URL
    start prefill "$BIN" prefill-server --model "$HF" --decoder-model "$DEC" --port 0 --backend "$BACKEND" "${t[@]}"; local pre=$URL
    start front "$BIN" front --decoder "$dec" --prefill "$pre" --decoder-model "$DEC" --cache-dir "$W/cache" --port 0 --block-size "$BS"
    local fr=$URL
    say "$n tokens: cold prompt, bridged then native"
    "$BIN" bench-cold --front "$fr" --native "$nat" --tokens "$n" --seed "$SEED" --max-tokens "$MAXTOK" --csv "$W/cold.csv" \
        --timeout-s "$TIMEOUT" "${IGNORE_EOS[@]}" >&2
    say "$n tokens: the same prompt again through the front (warm)"
    "$BIN" bench-cold --front "$fr" --tokens "$n" --seed "$SEED" --max-tokens "$MAXTOK" --csv "$W/warm.csv" \
        --timeout-s "$TIMEOUT" "${IGNORE_EOS[@]}" >&2
    stop_all
    [ -s "$OUT/bench_cold.csv" ] || head -1 "$W/cold.csv" >"$OUT/bench_cold.csv"
    tail -n +2 "$W/cold.csv" >>"$OUT/bench_cold.csv"; tail -n +2 "$W/warm.csv" >>"$OUT/bench_cold.csv"
    local mode ttft nttft ratio="" bttft="" rss eng over=""
    mode=$(col "$W/cold.csv" 1 mode) ttft=$(col "$W/cold.csv" 1 ttft_s) nttft=$(col "$W/cold.csv" 2 ttft_s)
    if [ "$mode" = bridged ]; then   # only a `complete` bridge is a bridged TTFT and a ratio
        bttft=$ttft ratio=$(awk -v b="$bttft" -v a="$nttft" 'BEGIN { if (a > 0) printf "%.3f", b / a }')
    fi
    rss=$(awk -v b="$(col "$W/cold.csv" 1 prefill_peak_rss_bytes)" 'BEGIN { if (b != "") printf "%.1f", b / 1e6 }')
    eng=$(col "$W/cold.csv" 1 engine_ms)
    [ -n "$bttft" ] && [ -n "$eng" ] && over=$(awk -v b="$bttft" -v e="$eng" 'BEGIN { if (e > 0) printf "%.4f", b / (e / 1000) }')
    echo "$n,$(col "$W/cold.csv" 1 prompt_tokens),$nttft,$bttft,$ratio,$(col "$W/cold.csv" 1 verdict),$rss,$(col "$W/warm.csv" 1 ttft_s),$(col "$W/warm.csv" 1 verdict),$(col "$W/warm.csv" 1 cached_tokens),$(col "$W/cold.csv" 1 blocks_written),$(col "$W/cold.csv" 1 blocks_requested),$eng,$(col "$W/cold.csv" 1 total_s),$(col "$W/cold.csv" 2 total_s),$(col "$W/cold.csv" 2 answer_equal),$over" >>"$OUT/sweep.csv"
}

# Draw the four PNGs from sweep.csv (an empty field is a missing point, not a zero).
plot() {
    gnuplot <<EOF
set terminal pngcairo size 640,400 font ",10"
set datafile separator ","
set key top left; set grid; set xlabel "prompt tokens"; set format x "%.0f"
$([ "$LOGX" = 1 ] && echo 'set logscale x 2; set format x "2^{%L}"')
set output "$OUT/ttft.png"; set title "Time to first token, cold prompt ($ARCH $PRESET, block $BS)" noenhanced; set ylabel "seconds"
plot "$OUT/sweep.csv" every ::1 using 2:3 with linespoints title "native (decoder alone)", \
     "" every ::1 using 2:4 with linespoints title "bridged (verdict complete)"
set output "$OUT/ratio.png"; set title "Bridged / native time to first token"; set ylabel "ratio"; set yrange [0:*]
plot "$OUT/sweep.csv" every ::1 using 2:5 with linespoints title "bridged TTFT / native TTFT", 1 with lines dt 2 title "1.0"
set output "$OUT/prefill_rss.png"; set title "Prefill server peak RSS (fresh server per prompt)"; set ylabel "MB (10^6 bytes)"
plot "$OUT/sweep.csv" every ::1 using 2:7 with linespoints title "prefill peak RSS"
set output "$OUT/overhead.png"; set title "Bridge overhead: bridged TTFT / the prefill engine's own time (same prompt, one run)"
set ylabel "ratio"; set yrange [0.9:*]
plot "$OUT/sweep.csv" every ::1 using 2:17 with linespoints title "bridged TTFT / engine time", 1.03 with lines dt 2 title "1.03"
set yrange [*:*]
set output "$OUT/warm_ttft.png"; set title "Warm follow-up: the same prompt again (blocks mounted, the uncached tail computed)"
set ylabel "seconds"; set offsets 0, 0, graph 0.1, 0
plot "$OUT/sweep.csv" every ::1 using 2:(strcol(9) eq "skipped warm" ? \$8 : NaN) with linespoints title "warm TTFT (verdict skipped warm)", \
     "" every ::1 using 2:8:(sprintf("tail %d", \$2 - \$10)) with labels offset 0,1 notitle
EOF
}

# Print the table from sweep.csv on stdout (tail: the warm request's uncached tokens, computed by the decoder).
table() {
    local f='%8s %8s %9s %10s %6s %-9s %11s %7s %5s %-13s %9s %10s %8s %6s\n'
    printf "$f" size tokens "native s" "bridged s" ratio verdict "prefill MB" "warm s" tail "warm verdict" blocks "engine s" overhead answer
    tail -n +2 "$OUT/sweep.csv" | while IFS=, read -r n p nt bt r v rss wt wv wc bw br em bts nts ae ov; do
        printf "$f" "$n" "$p" "${nt:--}" "${bt:--}" "${r:--}" "$v" "${rss:--}" "${wt:--}" "$([ -n "$wc" ] && echo $((p - wc)) || echo -)" "$wv" \
            "$([ -n "$bw" ] && echo "$bw/$br" || echo -)" "$([ -n "$em" ] && awk -v e="$em" 'BEGIN { printf "%.3f", e / 1000 }' || echo -)" \
            "${ov:--}" "$(case "$ae" in 1) echo equal ;; 0) echo DIFFER ;; *) echo - ;; esac)"
    done
}

main() {
    parse_args "$@"
    check_tools
    if [ "$REPLOT" = 1 ]; then plot; table; return; fi
    prepare_models
    mkdir -p "$OUT"
    W=$(mktemp -d /tmp/sweep-cold-XXXXXX)
    T=$W
    trap 'stop_all; rm -rf "$W"' EXIT
    rm -f "$OUT/bench_cold.csv"
    echo "tokens_target,prompt_tokens,native_ttft_s,bridged_ttft_s,ratio,verdict,prefill_peak_rss_mb,warm_ttft_s,warm_verdict,warm_cached_tokens,blocks_written,blocks_requested,engine_ms,bridged_total_s,native_total_s,answer_equal,overhead" >"$OUT/sweep.csv"
    for n in $SIZES; do run_size "$n"; done
    if [ "$NOPLOT" = 1 ]; then say "CSVs in $OUT (no plots: --no-plot)"; else plot; say "CSV and plots in $OUT"; fi
    table
}

main "$@"
