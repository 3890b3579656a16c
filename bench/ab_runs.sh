#!/usr/bin/env bash
# ab_runs: one benchmark command of two builds run alternately, ABBA order (old, new, new, old,
# ...), so that a shared machine's load moves both alike; every run's raw output appended to LOG
# with a header naming the build and the load average before it.
# usage: bench/ab_runs.sh OLD_DIR NEW_DIR PAIRS LOG PROGRAM [ARGS...]
#   runs OLD_DIR/PROGRAM ARGS and NEW_DIR/PROGRAM ARGS, 2 x PAIRS runs in all.
# Summaries: grep the log (bench_decode: "^decode at|roofline"; bench_qmat_stream: its table).
set -euo pipefail
if [ $# -lt 5 ]; then sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2; fi
old=$1 new=$2 pairs=$3 log=$4 prog=$5
shift 5
for ((p = 0; p < pairs; p++)); do
    if ((p % 2 == 0)); then order=("$old" "$new"); else order=("$new" "$old"); fi
    for d in "${order[@]}"; do
        tag=new; [ "$d" = "$old" ] && tag=old
        { echo "=== run: $tag ($d/$prog $*) at $(date -u +%H:%M:%S); load: $(cut -d' ' -f1-3 /proc/loadavg)"; "$d/$prog" "$@" 2>&1; } >> "$log"
    done
done
