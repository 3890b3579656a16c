#!/usr/bin/env bash
# qmat_ab: the decode kernels of an older pdb_qmat.c (git revision OLD, default main) against the
# working tree's, in one process (bench/ab/qmat_ab.c: alternating timings, one thread, outputs
# compared bit for bit). Builds into $OUT (default build/qmat_ab): OLD's pdb_qmat.c with its
# global symbols renamed old_* (objcopy), the tree's pdb_qmat.c and pdb_qmat_avx2.c, the rest of
# the core library from $BUILD (default build, built first). x86-64 only (the kernels compared are).
# usage: bench/qmat_ab.sh [--old REV] [--reps N] [CASE ...]
#   CASE = ROWS:COLS:FORMAT:PASSES[:T[:ISA]] (FORMAT 1 bf16, 2 MXFP8, 3 MXFP4; ISA 1 AVX2, 2 AVX-512);
#   default cases: V4-Flash-like shapes L2-resident and streamed, MXFP8 and MXFP4, T = 1 and 2.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--help" ]; then sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
old=main reps=15
while [ $# -gt 0 ]; do
    case $1 in
    --old) old=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    *) break ;;
    esac
done
BUILD=${BUILD:-build} OUT=${OUT:-build/qmat_ab}
[ -f "$BUILD/libpdb_core.a" ] || { echo "qmat_ab: $BUILD/libpdb_core.a missing: build the tree first" >&2; exit 1; }
mkdir -p "$OUT"
I="-Isrc/core" F="-O2 -g -std=gnu11"
git show "$old:src/core/pdb_qmat.c" > "$OUT/old_qmat.c"
gcc $F $I -c "$OUT/old_qmat.c" -o "$OUT/old.o"
nm --defined-only -g "$OUT/old.o" | awk '{print $3, "old_" $3}' > "$OUT/syms"
objcopy --redefine-syms="$OUT/syms" "$OUT/old.o" "$OUT/old_renamed.o"
gcc $F $I -c src/core/pdb_qmat.c -o "$OUT/new.o"
gcc $F $I -c src/core/pdb_qmat_avx2.c -o "$OUT/new_avx2.o"
gcc $F $I -o "$OUT/qmat_ab" bench/ab/qmat_ab.c "$OUT/old_renamed.o" "$OUT/new.o" "$OUT/new_avx2.o" "$BUILD/libpdb_core.a" -lm -lpthread
cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
    cases=(256:4096:2:50 256:4096:2:50:2 8192:4096:2:1 256:4096:3:100 256:4096:3:100:2 16384:4096:3:1 256:2048:3:100 256:4096:1:50)
fi
echo "qmat_ab: old = $old ($(git rev-parse --short "$old")), new = the working tree ($(git rev-parse --short HEAD)$(git diff --quiet -- src/core || echo ' + changes')); load: $(cut -d' ' -f1-3 /proc/loadavg)"
st=0
for c in "${cases[@]}"; do
    IFS=: read -r rows cols fmt passes t isa <<< "$c"
    "$OUT/qmat_ab" "$rows" "$cols" "$fmt" "$passes" "${t:-1}" "$reps" ${isa:+$isa} || st=1
done
exit $st
