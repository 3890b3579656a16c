# pdb_e2e.sh: the harness every shell end-to-end test sources: a temp dir, servers started on
# port 0 whose "listening on http://HOST:PORT" line gives their URL, and cleanup of every process
# started. Invariant: a server's log exists before the server starts, so polling it never races
# its creation; every started process is killed on exit.
#   source tests/common/pdb_e2e.sh; pdb_e2e_init TAG      -> $T (temp dir), $BIN
#   pdb_e2e_start NAME CMD...                              -> $URL, $PID (log in $T/NAME.log)
#   pdb_e2e_fail MESSAGE                                   -> prints the logs' tails, exits 1
#   pdb_e2e_stop_all                                       -> stops every process started so far (kill, wait)
#   pdb_e2e_model ARCH PRESET SEED [MAKE-MODEL ARGS]       -> $T/hf, and its decoder copy $T/dec (--scheme none)
#   pdb_e2e_decoders BS                                    -> $NATIVE ($T/cache-native), $DEC ($T/cache): two
#                                                             decode-servers of $T/dec, one thread each
#   pdb_e2e_j JSON EXPR                                    -> prints the python EXPR over d = the parsed JSON
# Counted checks, for tests that report every check and fail at the end:
#   pdb_e2e_ok MESSAGE, pdb_e2e_bad MESSAGE (counts a failure), pdb_e2e_finish (exit 1 if any)
PDB_E2E_PIDS=()
PDB_E2E_FAILS=0

pdb_e2e_ok() { echo "ok   $1"; }
pdb_e2e_bad() { echo "FAIL $1"; PDB_E2E_FAILS=$((PDB_E2E_FAILS + 1)); }
pdb_e2e_finish() {
    echo "$PDB_E2E_FAILS failure(s)"
    [ "$PDB_E2E_FAILS" -eq 0 ] || exit 1
}

pdb_e2e_j() { python3 -c "import json,sys;d=json.loads(sys.argv[1]);print($2)" "$1"; }

pdb_e2e_cleanup() {
    for p in "${PDB_E2E_PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ -n "${T:-}" ] && rm -rf "$T"
}

pdb_e2e_stop_all() {
    for p in "${PDB_E2E_PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    for p in "${PDB_E2E_PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
    PDB_E2E_PIDS=()
}

pdb_e2e_init() {
    cd "${PDB_SRC:-$(dirname "${BASH_SOURCE[0]}")/../..}"
    BIN="${PDB_BIN:-build/pdbridge}"
    BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
    T="$(mktemp -d "/tmp/pdbtest-$1-XXXXXX")"
    trap pdb_e2e_cleanup EXIT
}

pdb_e2e_fail() {
    echo "FAIL: $*" >&2
    for f in "$T"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -15 "$f" >&2; }; done
    exit 1
}

pdb_e2e_start() {
    local name="$1"; shift
    : >"$T/$name.log"
    "$@" >>"$T/$name.log" 2>&1 &
    PID=$!
    PDB_E2E_PIDS+=("$PID")
    URL=""
    for _ in $(seq 1 900); do
        URL=$(sed -n 's|^listening on \(http://[0-9.]*:[0-9]*\).*|\1|p' "$T/$name.log" | head -1)
        [ -n "$URL" ] && return 0
        kill -0 "$PID" 2>/dev/null || pdb_e2e_fail "$name exited: $(cat "$T/$name.log")"
        sleep 0.1
    done
    pdb_e2e_fail "$name did not start within 90 s"
}

pdb_e2e_model() {
    local arch=$1 preset=$2 seed=$3
    shift 3
    "$BIN" make-model --arch "$arch" --preset "$preset" --seed "$seed" --out "$T/hf" "$@" >/dev/null
    "$BIN" quantize --model "$T/hf" --out "$T/dec" --scheme none >/dev/null 2>&1
}

pdb_e2e_decoders() {
    pdb_e2e_start native "$BIN" decode-server --model "$T/dec" --cache-dir "$T/cache-native" --port 0 --block-size "$1" --threads 1
    NATIVE=$URL
    pdb_e2e_start dec "$BIN" decode-server --model "$T/dec" --cache-dir "$T/cache" --port 0 --block-size "$1" --threads 1
    DEC=$URL
}
