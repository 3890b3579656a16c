#!/usr/bin/env bash
# test_faults_e2e: faults on real processes during bridges (CPU, random tiny DeepSeek-V2,
# --scheme none, block 128): the prefill server killed at random points (several iterations),
# the prefill connection cut mid-segment and a segment with a flipped byte (a TCP proxy between
# front and prefill), a corrupted block on disk (data and header), disk full while writing blocks
# (a small tmpfs as the cache; reported NOT RUN if it cannot be mounted), a decoder restart during
# a bridge. After each: the answer equals a native decoder's greedy answer, the verdict is
# truthful against the decoder's own cached_tokens (pdbh.verdict_problems), and the store is
# consistent (every .pdbblk verifies with an independent verifier, no temp file; the decoder on
# the same prompt either hits or recomputes, with the same answer).
set -euo pipefail
cd "${PDB_SRC:-$(dirname "$0")/../..}"
BIN="${PDB_BIN:-build/pdbridge}"
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
H="$(pwd)/tests/hardening/pdbh.py"
T="$(mktemp -d /tmp/pdbtest-faults-XXXXXX)"
PIDS=()
MNT=""
cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ -n "$MNT" ] && umount "$MNT" 2>/dev/null || true
    rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$T"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -12 "$f" >&2; }; done; exit 1; }
ok() { echo "ok   $*"; }
NOT_RUN=0

URL=""; PID=""
try_start() { # try_start NAME CMD...: wait for "listening on URL"; 1 if the process exits first
    local name="$1"; shift
    "$@" >>"$T/$name.log" 2>&1 &
    PID=$!; PIDS+=("$PID")
    for _ in $(seq 1 900); do
        URL=$(sed -n 's|^listening on \(http://[0-9.]*:[0-9]*\).*|\1|p' "$T/$name.log" | tail -1)
        [ -n "$URL" ] && return 0
        kill -0 "$PID" 2>/dev/null || return 1
        sleep 0.1
    done
    fail "$name did not start"
}
start() { # start NAME CMD...: try_start or fail
    try_start "$@" || fail "$1 exited: $(tail -5 "$T/$1.log")"
}
start_at() { # start_at NAME PORT CMD...: like start, for a fixed port (restarts); clears the old URL line
    local name="$1" port="$2"; shift 2
    : >"$T/$name.log"
    start "$name" "$@"
    [ "$URL" = "http://127.0.0.1:$port" ] || fail "$name listens on $URL, wanted port $port"
}

"$BIN" make-model --arch deepseek_v2 --preset tiny --seed 43 --out "$T/hf" >/dev/null
"$BIN" quantize --model "$T/hf" --out "$T/dec" --scheme none >/dev/null 2>&1
BS=128
start native "$BIN" decode-server --model "$T/dec" --cache-dir "$T/cache-native" --port 0 --block-size $BS --threads 1
NATIVE=$URL
# The decoder and the prefill server restart on their ports later, so they get fixed ones: a free
# port is picked, then bound by the server; another test may bind it in between (ctest -j), so a
# server that exits at its first start gets another port (up to five tries).
for try in 1 2 3 4 5; do
    PDEC=$(python3 "$H" free_port); : >"$T/dec.log"
    DEC_CMD=("$BIN" decode-server --model "$T/dec" --cache-dir "$T/cache" --port "$PDEC" --block-size $BS --threads 1)
    try_start dec "${DEC_CMD[@]}" && break
    [ "$try" = 5 ] && fail "dec exited at five ports: $(tail -5 "$T/dec.log")"
done
[ "$URL" = "http://127.0.0.1:$PDEC" ] || fail "dec listens on $URL, wanted port $PDEC"
DEC=$URL; DEC_PID=$PID
for try in 1 2 3 4 5; do
    PPRE=$(python3 "$H" free_port); : >"$T/pre.log"
    PRE_CMD=("$BIN" prefill-server --model "$T/hf" --decoder-model "$T/dec" --port "$PPRE" --backend cpu --parallel 2 --threads 1 --chunk 64)
    try_start pre "${PRE_CMD[@]}" && break
    [ "$try" = 5 ] && fail "pre exited at five ports: $(tail -5 "$T/pre.log")"
done
[ "$URL" = "http://127.0.0.1:$PPRE" ] || fail "pre listens on $URL, wanted port $PPRE"
PRE_PID=$PID
FRONT_ARGS=(--decoder-model "$T/dec" --port 0 --block-size $BS --min-bridge-tokens 256 --min-tail 128)
start front "$BIN" front --decoder "$DEC" --prefill "http://127.0.0.1:$PPRE" --cache-dir "$T/cache" "${FRONT_ARGS[@]}"
FRONT=$URL
echo pass >"$T/proxy.ctl"
python3 "$H" proxy "$PPRE" "$T/proxy.ctl" >"$T/proxy.port" 2>"$T/proxy.log" &
PIDS+=($!)
for _ in $(seq 1 50); do [ -s "$T/proxy.port" ] && break; sleep 0.1; done
PROXY="http://127.0.0.1:$(head -1 "$T/proxy.port")"
start front_px "$BIN" front --decoder "$DEC" --prefill "$PROXY" --cache-dir "$T/cache" "${FRONT_ARGS[@]}"
FRONT_PX=$URL

cat >"$T/c.py" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1]); import pdbh
cmd, a = sys.argv[2], sys.argv[3:]
if cmd == "one":  # one FRONT NATIVE DEC SEED N BS: bridged answer vs native; verdict truth; decoder re-run
    front, native, dec, seed, n, bs = a[0], a[1], a[2], int(a[3]), int(a[4]), int(a[5])
    p = pdbh.prompt(seed, n)
    r = pdbh.post(front, pdbh.body(p))
    ref = pdbh.post(native, pdbh.body(p))
    again = pdbh.post(dec, pdbh.body(p))   # the decoder alone on the same prompt: hit or recompute
    probs = []
    if r["status"] != 200: probs.append("front answered %s: %s" % (r["status"], r.get("json") or r.get("text")))
    else:
        if r["ids"] != ref["ids"]: probs.append("answer differs from native")
        probs += pdbh.verdict_problems(r, n, bs)
    if again["status"] != 200 or again["ids"] != ref["ids"]: probs.append("decoder re-run differs from native")
    elif again["cached"] % bs or again["cached"] > (n - 1) // bs * bs: probs.append("decoder re-run cached %s" % again["cached"])
    print(json.dumps({"verdict": r.get("verdict", "").split(";")[0], "cached": r.get("cached"), "again_cached": again.get("cached"),
                      "pd": r.get("pd"), "problems": probs, "secs": round(r["secs"], 2)}))
PY
one() { python3 "$T/c.py" "$(dirname "$H")" one "$@"; }
j() { python3 -c "import json,sys;d=json.loads(sys.argv[1]);print($2)" "$1"; }
check() { # check LABEL RESULT: no problems in the result, store consistent
    local label="$1" r="$2"
    [ "$(j "$r" "len(d['problems'])")" = 0 ] || fail "$label: $(j "$r" "d['problems']") ($r)"
    local s; s=$(python3 "$H" verify_store "$T/cache")
    [ "$(j "$s" "len(d['problems'])")" = 0 ] || fail "$label: store inconsistent: $s"
    ok "$label: '$(j "$r" "d['verdict']")' (decoder cached $(j "$r" "d['cached']"), re-run $(j "$r" "d['again_cached']")), native answer, store: $(j "$s" "d['blocks']") blocks verify, no temp files"
}
dec_corrupt() { python3 -c "import sys;sys.path.insert(0,'$(dirname "$H")');import pdbh;print(int(pdbh.metric('$DEC','pdb_dec_store_corrupt_total')))"; }

# 0. baseline: a clean bridge
check "clean bridge" "$(one "$FRONT" "$NATIVE" "$DEC" 1 1500 $BS)"

# 1. prefill killed at random points (several iterations), restarted on the same port
SEED=${PDB_FAULT_SEED:-$RANDOM}
echo "kill points from seed $SEED"
for it in 1 2 3 4; do
    n=$(( 2000 + it * 300 ))
    before=$(find "$T/cache" -name '*.pdbblk' | wc -l)
    k=$(( (SEED + it * 7919) % 6 ))    # kill after k new blocks appeared (0 = as soon as the request is in)
    one "$FRONT" "$NATIVE" "$DEC" $((100 + it)) $n $BS >"$T/kill$it.json" &
    CL=$!
    for _ in $(seq 1 3000); do
        now=$(find "$T/cache" -name '*.pdbblk' | wc -l)
        if [ "$k" = 0 ]; then sleep 0.0$((SEED % 9 + 1)); break; fi
        [ "$now" -ge $((before + k)) ] && break
        sleep 0.01
    done
    kill -9 "$PRE_PID" 2>/dev/null || true
    wait "$CL" || fail "kill iteration $it: client failed"
    R=$(cat "$T/kill$it.json")
    case "$(j "$R" "d['verdict']")" in complete) [ "$k" -ge $(( (n - 1) / BS )) ] || fail "kill iteration $it: 'complete' although the prefill was killed after $k blocks: $R";; esac
    check "prefill killed after $k new blocks (iteration $it, $n tokens)" "$R"
    start_at pre "$PPRE" "${PRE_CMD[@]}"; PRE_PID=$PID
done

# 2. connection cut mid-segment (inside block 2's data) and 3. a flipped byte in block 2's data.
#    The front resumes a broken transfer from the next block boundary (at most 2 resumes): a
#    single cut is healed (complete, resumes=1); a proxy that cuts or corrupts every connection
#    at the same offset lets 2 blocks through per attempt: 6 of 11 blocks, partial 768/1500.
SEG=$(( 16 + 40 + 3 * BS * 40 * 4 ))   # frame bytes of one segment of this model
echo "cutonce $(( 300 + 2 * SEG + 20000 ))" >"$T/proxy.ctl"; sleep 0.1
R=$(one "$FRONT_PX" "$NATIVE" "$DEC" 200 1500 $BS)
[ "$(j "$R" "d['verdict'].split(';')[0]")" = complete ] || fail "one cut, resumed: verdict $R"
[ "$(j "$R" "d['pd']['resumes']")" = 1 ] || fail "one cut: expected one resume, got $R"
check "connection cut once inside block 2, transfer resumed from block 2" "$R"
echo "cut $(( 300 + 2 * SEG + 20000 ))" >"$T/proxy.ctl"; sleep 0.1
R=$(one "$FRONT_PX" "$NATIVE" "$DEC" 201 1500 $BS)
grep -q "cut at" "$T/proxy.log" 2>/dev/null || true
[ "$(j "$R" "d['pd']['blocks_written']")" = 6 ] || fail "cut every time: expected 3 attempts x 2 blocks written, got $R"
[ "$(j "$R" "d['pd']['resumes']")" = 2 ] || fail "cut every time: expected 2 resumes, got $R"
case "$(j "$R" "d['verdict']")" in "partial 768/1500"*) ;; *) fail "cut mid-segment verdict: $R";; esac
check "connection cut inside block 2 on every attempt" "$R"
echo "flip $(( 300 + 2 * SEG + 20000 ))" >"$T/proxy.ctl"; sleep 0.1
R=$(one "$FRONT_PX" "$NATIVE" "$DEC" 202 1500 $BS)
[ "$(j "$R" "d['pd']['blocks_written']")" = 6 ] || fail "flipped byte every time: expected 3 attempts x 2 blocks, got $R"
case "$(j "$R" "d['verdict']")" in "partial 768/1500"*) ;; *) fail "flipped byte verdict: $R";; esac
check "a flipped byte in block 2 of every attempt (each corrupted segment is refused)" "$R"
echo pass >"$T/proxy.ctl"; sleep 0.1

# 4. corrupted blocks on disk: a data byte (caught by the decoder's checksum at load) and a
#    header byte (caught by the front's lookup); then the prompt is bridged again
one "$FRONT" "$NATIVE" "$DEC" 301 1000 $BS >/dev/null
F=$(python3 - "$T/cache" "$(python3 -c "import sys;sys.path.insert(0,'$(dirname "$H")');import pdbh,json;print(json.dumps(pdbh.prompt(301,1000)))")" <<'PY'
import hashlib, json, os, struct, sys
# find block 1 of the prompt: the file whose tokens are prompt[128:256]
d, p = sys.argv[1], json.loads(sys.argv[2])
want = struct.pack("<128i", *p[128:256])
for root, _, fs in os.walk(d):
    for fn in fs:
        if fn.endswith(".pdbblk"):
            raw = open(os.path.join(root, fn), "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
            h = json.loads(raw[8:8 + n]); a, b = h["tokens"]["data_offsets"]
            if raw[8 + n + a:8 + n + b] == want: print(os.path.join(root, fn))
PY
)
[ -f "$F" ] || fail "block 1 of the corruption prompt not found in the store"
C0=$(dec_corrupt)
python3 -c "import sys;f=open(sys.argv[1],'r+b');f.seek(-1000,2);b=f.read(1);f.seek(-1000,2);f.write(bytes([b[0]^0x40]))" "$F"
R=$(one "$FRONT" "$NATIVE" "$DEC" 301 1000 $BS)
C1=$(dec_corrupt)
[ "$C1" -ge $((C0 + 1)) ] || fail "corrupted data byte: the decoder did not report a corrupt block ($C0 -> $C1): $R"
# the decoder removed the bad file and, having recomputed the prompt, may have written block 1
# again: whatever is at that path now must verify (check's verify_store covers it)
check "a corrupted data byte in block 1 (the decoder refuses it at load and recomputes)" "$R"
R=$(one "$FRONT" "$NATIVE" "$DEC" 301 1000 $BS)
case "$(j "$R" "d['verdict']")" in complete|"skipped warm") ;; *) fail "after the corruption, the prompt again: $R";; esac
check "the same prompt again" "$R"
C0=$(dec_corrupt)
python3 -c "import sys;f=open(sys.argv[1],'r+b');f.seek(30);b=f.read(1);f.seek(30);f.write(bytes([b[0]^0x01]))" "$F"
R=$(one "$FRONT" "$NATIVE" "$DEC" 301 1000 $BS)
[ "$(dec_corrupt)" -ge $((C0 + 1)) ] || fail "corrupted header byte: the decoder did not report a corrupt block: $R"
check "a corrupted header byte in block 1 (the front's index had it verified; the decoder refuses it at load)" "$R"

# 5. decoder restarted during a bridge (same port, same store)
one "$FRONT" "$NATIVE" "$DEC" 401 4000 $BS >"$T/restart.json" &
CL=$!
before=$(find "$T/cache" -name '*.pdbblk' | wc -l)
for _ in $(seq 1 3000); do [ "$(find "$T/cache" -name '*.pdbblk' | wc -l)" -ge $((before + 2)) ] && break; sleep 0.01; done
kill -TERM "$DEC_PID"; wait "$DEC_PID" 2>/dev/null || true
start_at dec "$PDEC" "${DEC_CMD[@]}"; DEC_PID=$PID
wait "$CL" || fail "decoder restart: client failed"
check "decoder restarted during a bridge" "$(cat "$T/restart.json")"

# 6. disk full while writing blocks: a separate decoder + front on a 700 KiB tmpfs (~10 blocks)
MNT="$T/small"; mkdir -p "$MNT"
if mount -t tmpfs -o size=700k tmpfs "$MNT" 2>"$T/mount.err"; then
    start dec_small "$BIN" decode-server --model "$T/dec" --cache-dir "$MNT/cache" --port 0 --block-size $BS --threads 1
    DEC_S=$URL
    start front_small "$BIN" front --decoder "$DEC_S" --prefill "http://127.0.0.1:$PPRE" --cache-dir "$MNT/cache" "${FRONT_ARGS[@]}"
    R=$(one "$URL" "$NATIVE" "$DEC_S" 501 3000 $BS)
    [ "$(j "$R" "d['pd']['blocks_written'] < d['pd']['blocks_requested']")" = True ] || fail "disk full: every block was written? $R"
    case "$(j "$R" "d['verdict']")" in complete) fail "disk full: verdict complete: $R";; esac
    grep -q "No space left" "$T/front_small.log" || fail "disk full: the front never saw ENOSPC"
    S=$(python3 "$H" verify_store "$MNT/cache")
    [ "$(j "$S" "len(d['problems'])")" = 0 ] || fail "disk full: store inconsistent: $S"
    [ "$(j "$R" "len(d['problems'])")" = 0 ] || fail "disk full: $(j "$R" "d['problems']")"
    ok "disk full while writing blocks: '$(j "$R" "d['verdict']")', $(j "$R" "d['pd']['blocks_written']")/$(j "$R" "d['pd']['blocks_requested']") blocks written, native answer, store: $(j "$S" "d['blocks']") blocks verify, no temp files"
else
    NOT_RUN=1
    echo "NOT RUN: disk full while writing blocks (cannot mount a tmpfs: $(cat "$T/mount.err")); not counted as passing"
fi

for p in "$DEC_PID" "$PRE_PID"; do kill -0 "$p" 2>/dev/null || fail "a server died: $p"; done
if grep -l "ERROR: AddressSanitizer\|runtime error:\|LeakSanitizer" "$T"/*.log 2>/dev/null; then fail "sanitizer report in a server log"; fi
if [ $NOT_RUN = 1 ]; then
    echo "every other fault check passed; the disk-full check did NOT RUN: reporting the test as skipped (exit 77)"
    exit 77   # ctest SKIP_RETURN_CODE: shown as skipped, never as passed
fi
echo "all fault end-to-end checks passed"
