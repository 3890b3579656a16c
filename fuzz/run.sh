#!/usr/bin/env bash
# fuzz/run.sh: runs one libFuzzer target of fuzz/ (built with -DPDB_FUZZ=ON, see docs/fuzzing.md).
#   run.sh short EXE        every file of fuzz/corpus/<name> and fuzz/regressions/<name> once
#                           (a regression test), then a deterministic run of $PDB_FUZZ_RUNS (20000)
#                           executions from seed $PDB_FUZZ_SEED (1): CI gives the same verdict every time
#   run.sh long EXE RUNS    a long run of RUNS executions on a persistent corpus under
#                           $PDB_FUZZ_WORK (default build-fuzz/long); prints libFuzzer's final stats
# Invariants: the source corpus is never written (new inputs go to a temp or work dir); a crash
# fails the run and leaves the input under $PDB_FUZZ_ARTIFACTS (default: a temp dir) to be copied
# into fuzz/regressions/<name>/ once fixed. <name> = the executable's name without "fuzz_".
set -euo pipefail
mode="$1"; exe="$2"
cd "${PDB_SRC:-$(dirname "$0")/..}"
name="$(basename "$exe")"; name="${name#fuzz_}"
corpus="fuzz/corpus/$name"; regress="fuzz/regressions/$name"
[ -d "$corpus" ] || { echo "FAIL: no seed corpus $corpus"; exit 1; }
case "$name" in
    block) maxlen=32768 ;; segment) maxlen=16384 ;; safetensors) maxlen=8192 ;; *) maxlen=4096 ;;
esac
art="${PDB_FUZZ_ARTIFACTS:-$(mktemp -d /tmp/pdbfuzz-art-XXXXXX)}"
mkdir -p "$art"
common=(-max_len=$maxlen -rss_limit_mb=2048 -timeout=20 -artifact_prefix="$art/" -print_final_stats=1)

# 1. regression: each seed and each former crasher once
mapfile -t inputs < <(find "$corpus" "$regress" -type f ! -name '.gitkeep' 2>/dev/null | sort)
[ "${#inputs[@]}" -gt 0 ] || { echo "FAIL: $corpus has no inputs"; exit 1; }
if ! "$exe" "${common[@]}" "${inputs[@]}" >"$art/regress.log" 2>&1; then
    tail -40 "$art/regress.log"; echo "FAIL: $name: a corpus/regression input fails (log above, artifacts in $art)"; exit 1
fi
echo "ok   $name: ${#inputs[@]} corpus/regression inputs pass"

if [ "$mode" = short ]; then
    runs="${PDB_FUZZ_RUNS:-20000}" seed="${PDB_FUZZ_SEED:-1}"
    work="$(mktemp -d /tmp/pdbfuzz-corpus-XXXXXX)"
    trap 'rm -rf "$work"' EXIT
    if ! "$exe" "${common[@]}" -seed="$seed" -runs="$runs" "$work" "$corpus" >"$art/fuzz.log" 2>&1; then
        tail -60 "$art/fuzz.log"; echo "FAIL: $name: the bounded run found a failure; input saved under $art"; exit 1
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$art/fuzz.log" | tail -1)
    [ -n "$execs" ] && [ "$execs" -gt 0 ] || { tail -20 "$art/fuzz.log"; echo "FAIL: $name: no executions reported"; exit 1; }
    echo "ok   $name: $execs executions from seed $seed, no failure"
    [ -n "${PDB_FUZZ_ARTIFACTS:-}" ] || rm -rf "$art"
elif [ "$mode" = long ]; then
    runs="$3"
    work="${PDB_FUZZ_WORK:-build-fuzz/long}/$name"
    mkdir -p "$work"
    t0=$(date +%s)
    if ! "$exe" "${common[@]}" -runs="$runs" "$work" "$corpus" >"$art/long.log" 2>&1; then
        tail -60 "$art/long.log"; echo "FAIL: $name: the long run found a failure; input saved under $art"; exit 1
    fi
    t1=$(date +%s)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$art/long.log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$art/long.log" | tail -1)
    echo "$name: $execs executions in $((t1 - t0)) s, final $cov, corpus $(ls "$work" | wc -l) files, no failure"
else
    echo "usage: run.sh short|long EXE [RUNS]"; exit 2
fi
