#!/usr/bin/env bash
# test_limits_e2e: the limits derived from the served window (pdb_limits, docs/limits.md) on
# real processes, tiny DeepSeek-V2 (window 16,384, token-id mode), block size 128 (issue 18
# Must-show 4). Checks: an incoherent configuration is refused at start with a message naming
# the flag, its value and what a full window needs (decoder --max-context above the model's
# window, --max-body and --cache-max-bytes below a full window, prefill --max-tokens below it,
# front --max-context / --max-body); with every server at --max-context 2048, a prompt at the
# window gets 400 context_length_exceeded naming 2048 from the decoder, the front (before any
# bridge: X-PD-Bridge skipped, nothing written to the store) and the prefill server; an absent
# max_tokens whose default does not fit is a 400 (it used to be clamped to the room left); a
# body past the bound gets 413 on the decoder and on the front; a front with the model's
# window learns the decoder's smaller one (max_model_len) and refuses the same prompts; doctor
# passes the coherent deployment and fails the incoherent pair naming both windows.
set -euo pipefail
source "$(dirname "$0")/../common/pdb_e2e.sh"
pdb_e2e_init limits
ok() { pdb_e2e_ok "$@"; }
bad() { pdb_e2e_bad "$@"; }

pdb_e2e_model deepseek_v2 tiny 41
BS=128

# ---- 1. refused at start, naming both numbers ------------------------------------------------
refused() { # refused NAME "GREP1" "GREP2" CMD... : exits non-zero, stderr names both
    local name=$1 g1=$2 g2=$3
    shift 3
    if timeout 120 "$@" >"$T/$name.out" 2>&1; then bad "$name: started (should refuse)"; return; fi
    if grep -q -- "$g1" "$T/$name.out" && grep -q -- "$g2" "$T/$name.out"; then
        ok "$name: refused at start: $(grep -m1 -- "$g1" "$T/$name.out" | cut -c1-230)"
    else
        bad "$name: message lacks '$g1' / '$g2': $(cat "$T/$name.out")"
    fi
}
DS=("$BIN" decode-server --model "$T/dec" --cache-dir "$T/cache-r" --port 0 --block-size $BS --threads 1)
refused dec_ctx "--max-context 20000" "16384" "${DS[@]}" --max-context 20000
refused dec_body "--max-body 1000" "90112" "${DS[@]}" --max-body 1000
# a full window: 127 blocks of 61,440 pool bytes + 512 token bytes + the 4,096-byte header bound
refused dec_cap "--cache-max-bytes 100000" "8388096" "${DS[@]}" --cache-max-bytes 100000
PS=("$BIN" prefill-server --model "$T/hf" --decoder-model "$T/dec" --port 0 --backend cpu --threads 1)
refused pre_tokens "--max-tokens 1900" "16384" "${PS[@]}" --max-tokens 1900
refused pre_ctx "--max-context 20000" "16384" "${PS[@]}" --max-context 20000
FS=("$BIN" front --decoder http://127.0.0.1:1 --prefill http://127.0.0.1:1 --decoder-model "$T/dec" --cache-dir "$T/cache-r"
    --port 0 --block-size $BS)
refused front_ctx "--max-context 20000" "16384" "${FS[@]}" --max-context 20000
refused front_body "--max-body 1000" "90112" "${FS[@]}" --max-body 1000

# ---- 2. a coherent deployment at window 2048 ----------------------------------------------------
W=2048
pdb_e2e_start dec "${DS[@]/cache-r/cache}" --max-context $W
DEC=$URL
pdb_e2e_start pre "${PS[@]}" --chunk 64 --max-context $W --block-size $BS
PRE=$URL
pdb_e2e_start front "$BIN" front --decoder "$DEC" --prefill "$PRE" --decoder-model "$T/dec" --cache-dir "$T/cache" --port 0 \
    --block-size $BS --min-bridge-tokens 256 --min-tail 128 --max-context $W
FRONT=$URL
# the model's window on the front, the decoder's smaller one behind it
pdb_e2e_start front_wide "$BIN" front --decoder "$DEC" --prefill "$PRE" --decoder-model "$T/dec" --cache-dir "$T/cache" --port 0 \
    --block-size $BS --min-bridge-tokens 256 --min-tail 128
FRONT_WIDE=$URL

if "$BIN" doctor --front "$FRONT" >"$T/doctor.txt" 2>&1 && grep -q "all checks passed" "$T/doctor.txt" &&
    grep -q "^ok    served window decoder = front: decoder 2048, front 2048" "$T/doctor.txt"; then
    ok "doctor: the coherent deployment passes (windows 2048 everywhere)"
else
    bad "doctor on the coherent deployment: $(cat "$T/doctor.txt")"
fi
if "$BIN" doctor --front "$FRONT_WIDE" --prefill "$PRE" >"$T/doctor2.txt" 2>&1; then
    bad "doctor passed a front serving 16384 before a decoder serving 2048: $(cat "$T/doctor2.txt")"
elif grep -q "^FAIL  served window decoder = front: decoder 2048, front 16384" "$T/doctor2.txt" && grep -q "fix:" "$T/doctor2.txt"; then
    ok "doctor: the incoherent pair fails naming both windows ($(grep -m1 '^FAIL' "$T/doctor2.txt"))"
else
    bad "doctor output for the incoherent pair: $(cat "$T/doctor2.txt")"
fi

cat >"$T/c.py" <<'PY'
import json, sys, time, urllib.request, urllib.error
def post(url, path, body, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    rq = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    t0 = time.time()
    try:
        with urllib.request.urlopen(rq, timeout=300) as r:
            return r.status, json.loads(r.read()), r.headers.get("X-PD-Bridge", ""), time.time() - t0
    except urllib.error.HTTPError as e:
        b = e.read()
        try: b = json.loads(b)
        except Exception: b = {"raw": b[:200].decode("latin-1")}
        return e.code, b, e.headers.get("X-PD-Bridge", ""), time.time() - t0
def prompt(seed, n):
    x, out = seed, []
    for _ in range(n):
        x = (x * 1103515245 + 12345) % 2**31; out.append(x % 1000)
    return out
dec, front, wide, pre, fp, W, bs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]), int(sys.argv[7])
fails = 0
def check(cond, msg):
    global fails
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond: fails += 1
def err(b): return b.get("error", {}) if isinstance(b, dict) else {}
for name, url in (("decoder", dec), ("front", front), ("front (model's window, decoder's 2048)", wide)):
    st, b, v, secs = post(url, "/v1/completions", {"prompt": prompt(1, W), "max_tokens": 1, "temperature": 0})
    e = err(b)
    check(st == 400 and e.get("code") == "context_length_exceeded" and str(W) in e.get("message", ""),
          "%s: a prompt of %d tokens (the window) -> %d %s: %s" % (name, W, st, e.get("code"), e.get("message")))
    if url != dec:
        check(v.startswith("skipped invalid_request") and secs < 5, "%s: refused before any bridge (X-PD-Bridge: %s, %.2f s)" % (name, v, secs))
    st, b, v, secs = post(url, "/v1/completions", {"prompt": prompt(2, W - 8), "temperature": 0})
    e = err(b)
    check(st == 400 and e.get("param") == "max_tokens" and "default" in e.get("message", ""),
          "%s: %d prompt tokens, max_tokens absent (default 16 does not fit) -> %d: %s" % (name, W - 8, st, e.get("message")))
    big = b'{"prompt": "' + b"a" * (1 << 20) + b'"}'  # past the 1 MiB bound of a 2048-token window
    st, b, v, secs = post(url, "/v1/completions", None, raw=big)
    check(st == 413 and err(b).get("code") == "request_too_large", "%s: a %d-byte body -> %d %s" % (name, len(big), st, err(b).get("code")))
# the prefill server: past its window -> 400 naming it (it was 413)
st, b, v, secs = post(pre, "/v1/prefill", {"token_ids": prompt(3, W + bs), "block_size": bs, "fingerprint": fp})
e = err(b)
check(st == 400 and e.get("code") == "context_length_exceeded" and str(W) in e.get("message", ""),
      "prefill: %d token_ids past its window -> %d %s: %s" % (W + bs, st, e.get("code"), e.get("message")))
st, b, v, secs = post(pre, "/v1/prefill", {"token_ids": prompt(3, 256), "block_size": 256, "fingerprint": fp})
check(st == 400 and err(b).get("param") == "block_size", "prefill --block-size %d: a request for 256 -> %d (%s)" % (bs, st, err(b).get("message")))
# a prompt that fits, max_tokens absent: 16 tokens generated (no clamp, no 400)
st, b, v, secs = post(dec, "/v1/completions", {"prompt": prompt(4, 100), "temperature": 0, "ignore_eos": True})
check(st == 200 and b["usage"]["completion_tokens"] == 16, "decoder: 100 prompt tokens, max_tokens absent -> %d, %s tokens" %
      (st, b.get("usage", {}).get("completion_tokens")))
sys.exit(1 if fails else 0)
PY
FP=$(curl -s "$DEC/health" | python3 -c "import json,sys;print(json.load(sys.stdin)['fingerprint'])")
if python3 "$T/c.py" "$DEC" "$FRONT" "$FRONT_WIDE" "$PRE" "$FP" $W $BS >"$T/c.out" 2>&1; then cat "$T/c.out"; else cat "$T/c.out"; bad "requests (above)"; fi
N=$(find "$T/cache" -name '*.pdbblk' | wc -l)
[ "$N" -eq 0 ] && ok "nothing was bridged for the refused prompts (0 blocks in the store)" || bad "$N blocks were written for refused prompts"
pdb_e2e_finish
