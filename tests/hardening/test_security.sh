#!/usr/bin/env bash
# test_security: the security defaults of the three servers (decode-server, prefill-server,
# front) on a random tiny DeepSeek-V2 (CPU, --scheme none, block 128): every server listens on
# 127.0.0.1 by default; with --api-key every endpoint but /health answers 401 (OpenAI-style,
# code invalid_api_key) without or with a wrong key; each server's /metrics reports its own
# resident and peak resident memory (pdb_process_rss_bytes, pdb_process_peak_rss_bytes > 0); the
# front passes its upstream key (a bridge completes, so the prefill server accepted it); request paths and fields cannot name files
# (traversal attempts are 404s); limits answer with clear OpenAI-style errors: request headers
# over 16 KiB -> 431, bodies over the limit -> 413, prompts over the context (--max-context) ->
# 400, token ids outside the vocabulary -> 400, more concurrent bridges than --max-bridges
# -> served natively with the truthful verdict "skipped busy". A client sending good requests
# throughout must get every answer right.
set -euo pipefail
source "$(dirname "$0")/../common/pdb_e2e.sh"
pdb_e2e_init sec
H="$(pwd)/tests/hardening/pdbh.py"
fail() { pdb_e2e_fail "$@"; }
start() { pdb_e2e_start "$@"; }
pdb_e2e_model deepseek_v2 tiny 53
BS=128
KEY="sk-dec-$RANDOM$RANDOM"; FKEY="sk-front-$RANDOM$RANDOM"
# no --host anywhere: the defaults are under test
start native "$BIN" decode-server --model "$T/dec" --cache-dir "$T/cache-native" --port 0 --block-size $BS --threads 1
NATIVE=$URL
start dec "$BIN" decode-server --model "$T/dec" --cache-dir "$T/cache" --port 0 --block-size $BS --threads 1 \
    --api-key "$KEY" --max-body 65536 --max-context 2048
DEC=$URL
start pre "$BIN" prefill-server --model "$T/hf" --decoder-model "$T/dec" --port 0 --backend cpu --parallel 2 --threads 1 \
    --api-key "$KEY" --max-context 1900
PRE=$URL
start front "$BIN" front --decoder "$DEC" --prefill "$PRE" --decoder-model "$T/dec" --cache-dir "$T/cache" --port 0 \
    --block-size $BS --min-bridge-tokens 256 --min-tail 128 --max-bridges 1 --api-key "$FKEY" --upstream-api-key "$KEY"
FRONT=$URL
start front_same "$BIN" front --decoder "$DEC" --prefill "$PRE" --decoder-model "$T/dec" --cache-dir "$T/cache" --port 0 \
    --block-size $BS --min-bridge-tokens 256 --min-tail 128 --api-key "$KEY"
FRONT_SAME=$URL

python3 - "$H" "$NATIVE" "$DEC" "$PRE" "$FRONT" "$FRONT_SAME" "$KEY" "$FKEY" "$BS" <<'PY'
import json, socket, sys, threading, time
sys.path.insert(0, __import__("os").path.dirname(sys.argv[1])); import pdbh
native, dec, pre, front, front_same, key, fkey, bs = sys.argv[2:9] + [int(sys.argv[9])]
failures, passed = [], []
def check(cond, what):
    (passed if cond else failures).append(what)
    print(("ok   " if cond else "FAIL ") + what, flush=True)
def auth(k): return {"Authorization": "Bearer " + k}
def is_openai_error(r, code=None):
    e = (r.get("json") or {}).get("error") if isinstance(r.get("json"), dict) else None
    return isinstance(e, dict) and e.get("message") and e.get("type") and (code is None or e.get("code") == code)

# a good client runs throughout: every answer must be right
stop, good = [False], {"n": 0, "bad": []}
ref_p = pdbh.prompt(77, 40)
ref = pdbh.post(native, pdbh.body(ref_p))["ids"]
def good_client():
    while not stop[0]:
        r = pdbh.post(front, pdbh.body(ref_p), headers=auth(fkey))
        good["n"] += 1
        if r["status"] != 200 or r.get("ids") != ref:
            good["bad"].append(r["status"])
th = threading.Thread(target=good_client); th.start()

# 1. default bind address: 127.0.0.1 (from /proc/net/tcp, independent of what the servers print)
def bound(port):
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(f).read().splitlines()[1:]:
            loc, st = line.split()[1], line.split()[3]
            if st == "0A" and int(loc.split(":")[1], 16) == port:
                return loc.split(":")[0]
    return None
for name, url in (("decode-server", dec), ("prefill-server", pre), ("front", front)):
    addr = bound(int(url.rsplit(":", 1)[1]))
    check(addr == "0100007F", "%s listens on 127.0.0.1 by default (bound %s)" % (name, addr))

# 2. API keys: 401 on every endpoint but /health, without or with a wrong key
eps = {"decode-server": (dec, key, [("POST", "/v1/completions"), ("POST", "/v1/chat/completions"), ("GET", "/v1/models"),
                                      ("GET", "/metrics"), ("GET", "/nope")]),
       "prefill-server": (pre, key, [("POST", "/v1/prefill"), ("GET", "/metrics"), ("GET", "/nope")]),
       "front": (front, fkey, [("POST", "/v1/completions"), ("POST", "/v1/chat/completions"), ("GET", "/v1/models"),
                               ("GET", "/metrics"), ("GET", "/nope")])}
for name, (url, k, lst) in eps.items():
    for m, path in lst:
        for hdr, label in ((None, "no key"), (auth(k + "x"), "wrong key"), ({"Authorization": k}, "key without Bearer")):
            if m == "POST":
                r = pdbh.post(url, {"prompt": [1, 2, 3], "max_tokens": 1}, path=path, headers=hdr)
            else:
                st, txt = pdbh.get(url, path, hdr)
                r = {"status": st, "json": json.loads(txt) if txt.startswith("{") else None}
            check(r["status"] == 401 and is_openai_error(r, "invalid_api_key"), "%s %s %s, %s: 401 invalid_api_key (got %s)" % (name, m, path, label, r["status"]))
    st, _ = pdbh.get(url, "/health")
    check(st == 200, "%s GET /health without a key: 200 (got %s)" % (name, st))
    st, txt = pdbh.get(url, "/metrics", auth(k))
    check(st == 200, "%s GET /metrics with the key: 200 (got %s)" % (name, st))
    for g in ("pdb_process_rss_bytes", "pdb_process_peak_rss_bytes"):  # each server's own memory (VmRSS, VmHWM)
        vals = [float(l.split()[1]) for l in txt.splitlines() if l.split(" ")[0] == g]
        check(len(vals) == 1 and vals[0] > 0, "%s /metrics has %s > 0 (got %s)" % (name, g, vals))

# 3. the front passes its upstream key: a bridge completes (prefill accepted it), the decoder answers
p = pdbh.prompt(11, 700)
r = pdbh.post(front, pdbh.body(p), headers=auth(fkey))
check(r["status"] == 200 and r["verdict"].startswith("complete") and r["ids"] == pdbh.post(native, pdbh.body(p))["ids"],
      "front --upstream-api-key: bridge complete and correct through keyed prefill + decoder (%s)" % r["verdict"][:40])
p = pdbh.prompt(12, 700)
r = pdbh.post(front_same, pdbh.body(p), headers=auth(key))
check(r["status"] == 200 and r["verdict"].startswith("complete"), "front --api-key alone is also sent upstream (%s)" % r["verdict"][:40])
r = pdbh.post(pre, {"token_ids": p[:256], "block_size": bs, "first_block": 0, "fingerprint": "0" * 64}, path="/v1/prefill")
check(r["status"] == 401, "prefill-server refuses /v1/prefill without the key (%s)" % r["status"])

# 4. no request names a file: traversal in paths and fields
for name, url, k in (("decode-server", dec, key), ("front", front, fkey), ("prefill-server", pre, key)):
    for path in ("/../../etc/passwd", "/v1/../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd"):
        st, txt = pdbh.get(url, path, auth(k))
        check(st == 404 and "root:" not in txt, "%s GET %s: 404, no file content (got %s)" % (name, path, st))
for name, url, k in (("decode-server", dec, key), ("front", front, fkey)):
    r = pdbh.post(url, {"prompt": [1, 2], "max_tokens": 1, "model": "../../../../etc/passwd"}, headers=auth(k))
    check(r["status"] == 404 and is_openai_error(r, "model_not_found"), "%s model '../../../../etc/passwd': 404 model_not_found (got %s)" % (name, r["status"]))
r = pdbh.post(pre, {"token_ids": p[:256], "block_size": bs, "first_block": 0, "fingerprint": "../../etc/passwd"}, path="/v1/prefill", headers=auth(key))
check(r["status"] in (400, 409) and is_openai_error(r), "prefill-server fingerprint '../../etc/passwd': %s, OpenAI error" % r["status"])

# 5. limits
def raw(url, head_extra, body=b"", path="/v1/completions"):
    host, port = url.split("//")[1].split(":")
    s = socket.create_connection((host, int(port)), timeout=30)
    req = ("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s\r\n" % (path, head_extra)).encode() + body
    try:
        s.sendall(req)
    except OSError:
        pass
    data = b""
    try:
        while True:
            b = s.recv(65536)
            if not b: break
            data += b
            if b"\r\n\r\n" in data:
                hdr, rest = data.split(b"\r\n\r\n", 1)
                cl = [l for l in hdr.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if cl and len(rest) >= int(cl[0].split(b":")[1]): break
    except OSError:
        pass
    s.close()
    st = int(data.split(b" ")[1]) if data.startswith(b"HTTP/") else -1
    return st, data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else b""
for name, url, k in (("decode-server", dec, key), ("prefill-server", pre, key), ("front", front, fkey)):
    st, _ = raw(url, "Authorization: Bearer %s\r\nX-Big: %s\r\nContent-Length: 2\r\n" % (k, "a" * 20000), b"{}")
    check(st == 431, "%s: 20 KB of request headers -> 431 (got %s)" % (name, st))
    st, b = raw(url, "Authorization: Bearer %s\r\nContent-Length: 209715200\r\n" % k, b"{" * 1000,
                "/v1/prefill" if name == "prefill-server" else "/v1/completions")
    check(st == 413 and b"request_too_large" in b, "%s: a 200 MiB body -> 413 request_too_large (got %s)" % (name, st))
big = json.dumps({"prompt": [1] * 30000, "max_tokens": 1}).encode()
st, b = raw(dec, "Authorization: Bearer %s\r\nContent-Length: %d\r\n" % (key, len(big)), big)
check(st == 413 and b"request_too_large" in b, "decode-server --max-body 65536: a %d-byte body -> 413 (got %s)" % (len(big), st))
r = pdbh.post(dec, pdbh.body(pdbh.prompt(3, 2100)), headers=auth(key))
check(r["status"] == 400 and is_openai_error(r, "context_length_exceeded"), "decode-server --max-context 2048: 2100 tokens -> 400 context_length_exceeded (got %s)" % r["status"])
r = pdbh.post(front, pdbh.body(pdbh.prompt(3, 2100)), headers=auth(fkey))
check(r["status"] == 400 and is_openai_error(r), "front: 2100 tokens over the decoder's context -> 400 (got %s %s)" % (r["status"], r["verdict"][:30]))
fp = json.loads(pdbh.get(pre, "/health")[1]).get("fingerprint")
r = pdbh.post(pre, {"token_ids": pdbh.prompt(4, 2000), "block_size": bs, "first_block": 0, "fingerprint": fp}, path="/v1/prefill", headers=auth(key))
check(r["status"] == 400 and is_openai_error(r, "context_length_exceeded"), "prefill-server --max-context 1900: 2000 tokens -> 400 context_length_exceeded (got %s)" % r["status"])
for name, url, k, path, b in (("decode-server", dec, key, "/v1/completions", {"prompt": [5, 1000, 7], "max_tokens": 1}),
                              ("front", front, fkey, "/v1/completions", {"prompt": [5, 1000, 7], "max_tokens": 1}),
                              ("decode-server", dec, key, "/v1/completions", {"prompt": [5, -3], "max_tokens": 1}),
                              ("prefill-server", pre, key, "/v1/prefill", {"token_ids": [5] * 300 + [1000], "block_size": bs, "first_block": 0, "fingerprint": fp})):
    r = pdbh.post(url, b, path=path, headers=auth(k))
    check(r["status"] == 400 and is_openai_error(r), "%s: token id outside the vocabulary (%s) -> 400 (got %s: %s)" %
          (name, [x for x in (b.get("prompt") or b.get("token_ids")) if x >= 1000 or x < 0], r["status"], (r.get("json") or {}).get("error", {}).get("message", "")[:60]))

# 6. concurrent bridges over --max-bridges 1: the extra one is served natively, "skipped busy", correct
ps = [pdbh.prompt(600 + i, 1500) for i in range(3)]
res = [None] * 3
def go(i): res[i] = pdbh.post(front, pdbh.body(ps[i]), headers=auth(fkey))
ts = [threading.Thread(target=go, args=(i,)) for i in range(3)]
[t.start() for t in ts]; [t.join() for t in ts]
vs = [r["verdict"].split(";")[0] for r in res]
check(all(r["status"] == 200 for r in res) and all(res[i]["ids"] == pdbh.post(native, pdbh.body(ps[i]))["ids"] for i in range(3)),
      "3 concurrent cold prompts with --max-bridges 1: all 200 and correct")
check("skipped busy" in vs and any(v in ("complete",) or v.startswith("partial") for v in vs),
      "the bridge limit is truthful: verdicts %s" % vs)
check(all(not pdbh.verdict_problems(res[i], 1500, bs) for i in range(3)), "verdicts consistent with the decoder's cached tokens")

stop[0] = True; th.join()
check(good["n"] >= 3 and not good["bad"], "a good client throughout: %d requests, all correct (bad: %s)" % (good["n"], good["bad"][:5]))
print("%d checks passed, %d failed" % (len(passed), len(failures)))
sys.exit(1 if failures else 0)
PY
for p in "${PDB_E2E_PIDS[@]}"; do kill -0 "$p" 2>/dev/null || fail "a server died"; done
if grep -l "ERROR: AddressSanitizer\|runtime error:" "$T"/*.log 2>/dev/null; then fail "sanitizer report in a server log"; fi
echo "all security checks passed"
