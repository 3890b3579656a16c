#!/usr/bin/env bash
# test_dec_server: end-to-end test of `pdbridge decode-server` on loopback (issue 3, "Must show"
# 1, 2, 3, 5, 6): health/models, token-id completions with return_token_ids, greedy determinism,
# a repeated ~300-token prompt hits the prefix cache (256 of 300 tokens with --block-size 128)
# with the same answer, the hit survives a restart, a block file with one flipped byte is not
# used (cached 0, same answer), 8 concurrent streaming clients get the reference answer, every
# bad request gets its 4xx while the server keeps serving, the API key guards every endpoint but
# /health, and the official `openai` npm client works unmodified. Uses curl + python3 (stdlib).
set -euo pipefail
cd "${PDB_SRC:-$(dirname "$0")/../..}"
BIN="${PDB_BIN:-build/pdbridge}"
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
TMP="$(mktemp -d /tmp/pdbtest-decsrv-XXXXXX)"
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$TMP"/srv*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done; exit 1; }

SRV_PID=""; PORT=""
# start_server NAME MODEL CACHE [args...]: starts decode-server on an ephemeral port.
start_server() {
    local name="$1" model="$2" cache="$3"; shift 3
    local log="$TMP/srv-$name.log"
    : >"$log"   # exists before the server opens it: the poll below never races its creation
    "$BIN" decode-server --model "$model" --cache-dir "$cache" --port 0 --threads 2 "$@" >>"$log" 2>&1 &
    SRV_PID=$!
    PIDS+=("$SRV_PID")
    for _ in $(seq 1 600); do
        PORT=$(sed -n 's|^listening on http://[0-9.]*:\([0-9]*\).*|\1|p' "$log" | head -1)
        [ -n "$PORT" ] && return 0
        kill -0 "$SRV_PID" 2>/dev/null || fail "server $name exited: $(cat "$log")"
        sleep 0.1
    done
    fail "server $name did not start"
}
stop_server() {
    kill -INT "$SRV_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$SRV_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$SRV_PID" 2>/dev/null && fail "server did not stop within 10 s of SIGINT"
    local rc=0
    wait "$SRV_PID" 2>/dev/null || rc=$?
    [ "$rc" = 0 ] || fail "server exited with status $rc after SIGINT"
    if grep -qE "runtime error|AddressSanitizer|LeakSanitizer" "$TMP"/srv-*.log; then fail "sanitizer report"; fi
}

PY="$TMP/client.py"
cat >"$PY" <<'EOF'
import http.client, json, sys, threading, time, socket

PORT = int(sys.argv[1]); CMD = sys.argv[2]; ARGS = sys.argv[3:]

def req(method, path, body=None, headers=None, raw=False):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=300)
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    if raw: return r.status, data
    try: return r.status, json.loads(data)
    except ValueError: return r.status, data

def check(cond, what):
    if not cond:
        print("CHECK FAILED:", what, flush=True); sys.exit(1)

def stream(path, body, results, i, close_after=None):
    try:
        c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=300)
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200: results[i] = ("status", r.status); return
        ids, text, finish, done, usage, n = [], "", None, False, None, 0
        buf = b""
        while True:
            line = r.fp.readline()
            if not line: break
            line = line.rstrip(b"\r\n")
            if not line.startswith(b"data: "): continue
            payload = line[6:]
            if payload == b"[DONE]": done = True; break
            ch = json.loads(payload)
            n += 1
            if ch.get("usage"): usage = ch["usage"]
            for cc in ch["choices"]:
                ids += cc.get("token_ids") or []
                text += cc.get("text") or (cc.get("delta") or {}).get("content") or ""
                if cc.get("finish_reason"): finish = cc["finish_reason"]
            if close_after and n >= close_after:
                try: c.sock.shutdown(socket.SHUT_RDWR)
                except (OSError, AttributeError): pass
                c.close(); results[i] = ("closed", n); return
        c.close()
        results[i] = {"ids": ids, "text": text, "finish": finish, "done": done, "usage": usage}
    except Exception as e:
        results[i] = ("error", repr(e))

LONG = [(i * 7919 + 13) % 900 + 3 for i in range(300)]
MT = 24
def long_body(): return {"prompt": LONG, "max_tokens": MT, "temperature": 0, "return_token_ids": True}

if CMD == "basic":
    st, h = req("GET", "/health")
    check(st == 200 and h["status"] == "ok" and len(h["fingerprint"]) == 64, f"health {st} {h}")
    st, m = req("GET", "/v1/models")
    check(st == 200 and m["object"] == "list" and len(m["data"]) == 1, f"models {st} {m}")
    model = m["data"][0]
    check(model["pdbridge"]["fingerprint"] == h["fingerprint"] and model["pdbridge"]["block_size"] == 128, f"models pdbridge {model}")
    body = {"model": model["id"], "prompt": [1, 2, 3, 4, 5, 6, 7], "max_tokens": 10, "temperature": 0, "return_token_ids": True}
    st, a = req("POST", "/v1/completions", body)
    check(st == 200, f"completion {st} {a}")
    ch = a["choices"][0]
    check(a["object"] == "text_completion" and a["id"].startswith("cmpl-"), f"completion shape {a}")
    check(len(ch["token_ids"]) == 10 and ch["finish_reason"] == "length", f"token_ids {ch}")
    check(a["usage"]["prompt_tokens"] == 7 and a["usage"]["completion_tokens"] == 10 and a["usage"]["total_tokens"] == 17, f"usage {a['usage']}")
    check(a["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, "short prompt not cached")
    st, b = req("POST", "/v1/completions", body)
    check(b["choices"][0]["token_ids"] == ch["token_ids"], "greedy determinism")
    st, c = req("POST", "/v1/completions", dict(body, temperature=0.9, seed=123))
    st, d = req("POST", "/v1/completions", dict(body, temperature=0.9, seed=123))
    check(c["choices"][0]["token_ids"] == d["choices"][0]["token_ids"], "seeded sampling determinism")
    b2 = dict(body); del b2["return_token_ids"]
    st, e = req("POST", "/v1/completions", b2)
    check(st == 200 and "token_ids" not in e["choices"][0], "token_ids only when asked")
    # repeated long prompt: first call computes, second hits 2 full blocks of 128
    st, first = req("POST", "/v1/completions", long_body())
    check(st == 200 and first["usage"]["prompt_tokens"] == 300, f"long first {st} {first}")
    check(first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, f"first call uncached {first['usage']}")
    st, second = req("POST", "/v1/completions", long_body())
    check(second["usage"]["prompt_tokens_details"]["cached_tokens"] == 256, f"second call cached 256: {second['usage']}")
    check(second["choices"][0]["token_ids"] == first["choices"][0]["token_ids"], "cached answer == first answer")
    json.dump(first["choices"][0]["token_ids"], open(ARGS[0], "w"))
    print("basic ok: health, models, token ids, determinism, cached_tokens 256 with the same answer")

elif CMD == "cached":
    ref = json.load(open(ARGS[0])); want = int(ARGS[1])
    st, r = req("POST", "/v1/completions", long_body())
    check(st == 200, f"{st} {r}")
    got = r["usage"]["prompt_tokens_details"]["cached_tokens"]
    check(got == want, f"cached_tokens {got}, want {want}")
    check(r["choices"][0]["token_ids"] == ref, "same answer as the first run")
    print(f"cached ok: cached_tokens {got}, same answer")

elif CMD == "concurrent":
    # reference, then 8 concurrent streams of it
    text_mode = ARGS[0] == "1"
    if text_mode:
        path = "/v1/chat/completions"
        body = {"messages": [{"role": "user", "content": "Tell me a story about a lighthouse."}], "max_tokens": 20, "temperature": 0}
    else:
        path = "/v1/completions"
        body = {"prompt": [9, 8, 7, 6, 5, 4, 3, 2, 1], "max_tokens": 40, "temperature": 0, "return_token_ids": True}
    st, ref = req("POST", path, body)
    check(st == 200, f"reference {st} {ref}")
    rc = ref["choices"][0]
    ref_text = rc["message"]["content"] if text_mode else rc["text"]
    res = [None] * 8
    ts = [threading.Thread(target=stream, args=(path, dict(body, stream=True, stream_options={"include_usage": True}), res, i)) for i in range(8)]
    t0 = time.time()
    for t in ts: t.start()
    for t in ts: t.join()
    for i, r in enumerate(res):
        check(isinstance(r, dict), f"stream {i}: {r}")
        check(r["done"] and r["finish"] == rc["finish_reason"], f"stream {i} complete: {r}")
        check(r["text"] == ref_text, f"stream {i} text {r['text']!r} != {ref_text!r}")
        if not text_mode: check(r["ids"] == rc["token_ids"], f"stream {i} ids")
        check(r["usage"] and r["usage"]["completion_tokens"] == ref["usage"]["completion_tokens"], f"stream {i} usage")
    print(f"concurrent ok: 8 streams identical to the reference ({'text' if text_mode else 'token ids'}), {time.time()-t0:.1f}s")

elif CMD == "bad":
    big = json.dumps({"prompt": [1] * 30000})  # > --max-body 65536
    cases = [
        ("malformed JSON", "/v1/completions", b'{"prompt": [1,2', 400, None),
        ("not an object", "/v1/completions", b'[1]', 400, None),
        ("unknown model", "/v1/completions", {"model": "nope", "prompt": [1]}, 404, "model"),
        ("prompt past context", "/v1/completions", {"prompt": [5] * 5000, "max_tokens": 1}, 400, "prompt"),
        ("prompt + max_tokens past context", "/v1/completions", {"prompt": [5] * 4000, "max_tokens": 200}, 400, "max_tokens"),
        ("max_tokens -1", "/v1/completions", {"prompt": [1], "max_tokens": -1}, 400, "max_tokens"),
        ("max_tokens 1e9", "/v1/completions", {"prompt": [1], "max_tokens": 10**9}, 400, "max_tokens"),
        ("invalid UTF-8", "/v1/completions", b'{"prompt": "\xff\xfe"}', 400, None),
        ("body over --max-body", "/v1/completions", big.encode(), 413, None),
        ("token id outside vocab", "/v1/completions", {"prompt": [1, 2, 99999999]}, 400, "prompt"),
        ("negative token id", "/v1/completions", {"prompt": [1, -3]}, 400, "prompt"),
        ("text prompt in token-id mode", "/v1/completions", {"prompt": "hello"}, 400, "prompt"),
        ("chat in token-id mode", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, 400, "messages"),
        ("temperature < 0", "/v1/completions", {"prompt": [1], "temperature": -1}, 400, "temperature"),
        ("top_p 0", "/v1/completions", {"prompt": [1], "top_p": 0}, 400, "top_p"),
        ("stop in token-id mode", "/v1/completions", {"prompt": [1], "stop": "x"}, 400, "stop"),
        ("empty prompt", "/v1/completions", {"prompt": []}, 400, "prompt"),
    ]
    for name, path, body, status, param in cases:
        st, r = req("POST", path, body)
        check(st == status, f"{name}: status {st}, want {status}: {r}")
        check(isinstance(r, dict) and "error" in r and r["error"]["type"] and r["error"]["message"], f"{name}: error object {r}")
        if param: check(r["error"]["param"] == param, f"{name}: param {r['error']['param']}, want {param}")
        st, h = req("GET", "/health")
        check(st == 200, f"server down after {name}")
    st, r = req("POST", "/v1/completions", {"prompt": [1, 2, 99999999]})
    check("99999999" in r["error"]["message"] and "index 2" in r["error"]["message"], f"bad id named: {r}")
    st, r = req("GET", "/v1/completions"); check(st == 405, f"GET completions {st}")
    st, r = req("GET", "/nope"); check(st == 404, f"unknown path {st}")
    # raw garbage on the socket and an oversized header
    s = socket.create_connection(("127.0.0.1", PORT)); s.settimeout(1); s.sendall(b"\x00\x01garbage\r\n\r\n")
    try: s.recv(100)
    except OSError: pass
    s.close()
    st, r = req("GET", "/health", headers={"X-Big": "a" * 100000}); check(st in (400, 413, 431), f"huge header {st}")
    # a client that disconnects mid-stream: its request is cancelled, others unaffected
    res = [None]
    stream("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 2000, "temperature": 0, "stream": True, "ignore_eos": True, "return_token_ids": True}, res, 0, close_after=2)
    check(res[0] and res[0][0] == "closed", f"early close {res[0]}")
    for _ in range(100):
        st, mt = req("GET", "/metrics", raw=True)
        line = [l for l in mt.decode().splitlines() if l.startswith("pdb_dec_requests_cancelled_total")]
        if line and int(line[0].split()[1]) >= 1: break
        time.sleep(0.1)
    else: check(False, "disconnected stream was not cancelled")
    st, h = req("GET", "/health"); check(st == 200, "alive after all bad requests")
    st, mt = req("GET", "/metrics", raw=True)
    mt = mt.decode()
    for name in ["pdb_dec_http_requests_total{endpoint=\"/v1/completions\",status=\"400\"}", "pdb_dec_prompt_tokens_total",
                 "pdb_dec_cached_tokens_total", "pdb_dec_generated_tokens_total", "pdb_dec_requests_running", "pdb_dec_requests_queued",
                 "pdb_dec_store_hits_total", "pdb_dec_store_blocks_written_total"]:
        check(name in mt, f"metric {name} missing")
    print(f"bad ok: {len(cases)} bad requests answered 4xx, server alive, disconnect cancelled, metrics present")

elif CMD == "auth":
    st, _ = req("GET", "/health"); check(st == 200, "health needs no key")
    st, r = req("GET", "/v1/models"); check(st == 401 and r["error"]["code"] == "invalid_api_key", f"no key {st}")
    st, r = req("GET", "/v1/models", headers={"Authorization": "Bearer wrong"}); check(st == 401, "wrong key")
    st, r = req("GET", "/v1/models", headers={"Authorization": "Bearer sekrit"}); check(st == 200, "right key")
    st, r = req("POST", "/v1/completions", {"prompt": [1], "max_tokens": 1}); check(st == 401, "completions need the key")
    print("auth ok")

elif CMD == "text":
    # the real tokenizer: text completion, chat, stop strings (excluded from the text)
    st, a = req("POST", "/v1/completions", {"prompt": "Hello world", "max_tokens": 12, "temperature": 0, "return_token_ids": True})
    check(st == 200 and a["usage"]["prompt_tokens"] >= 2, f"text completion {st} {a}")
    text = a["choices"][0]["text"]
    check(len(text) > 0, "text generated")
    st, c = req("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0})
    check(st == 200 and c["object"] == "chat.completion" and c["choices"][0]["message"]["role"] == "assistant", f"chat {st} {c}")
    # a stop string taken from the middle of the greedy text
    cut = len(text) // 2
    stop = text[cut:cut + 3]
    if stop.strip():
        st, s = req("POST", "/v1/completions", {"prompt": "Hello world", "max_tokens": 12, "temperature": 0, "stop": [stop]})
        got = s["choices"][0]["text"]
        check(s["choices"][0]["finish_reason"] == "stop" and got == text[:text.find(stop)], f"stop {stop!r}: {got!r} vs {text!r}")
        res = [None]
        stream("/v1/completions", {"prompt": "Hello world", "max_tokens": 12, "temperature": 0, "stop": [stop], "stream": True}, res, 0)
        check(res[0]["text"] == got and res[0]["finish"] == "stop", f"streamed stop {res[0]}")
    # tool messages render now (tests/decoder/test_dec_tools.sh); what the template cannot render
    # (an assistant message with both text and calls) is still a 400 naming messages
    st, r = req("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "x",
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]})
    check(st == 400 and r["error"]["param"].startswith("messages"), f"text and calls {st} {r}")
    print("text ok: completion, chat, stop strings (stream and not)")
EOF

# ---- models ----
"$BIN" make-model --preset tiny --seed 1 --out "$TMP/tiny" >/dev/null 2>&1 || fail "make-model tiny"
TOK=.cache/tokenizer/deepseek_v3/tokenizer.json  # installed by scripts/setup.sh
[ -f "$TOK" ] || fail "$TOK is missing: run scripts/setup.sh"
"$BIN" make-model --preset small --seed 1 --out "$TMP/small" --tokenizer "$TOK" >/dev/null 2>&1 || fail "make-model small"
SMALL="$TMP/small"

# ---- token-id mode: cache, restart, corruption, concurrency, bad requests ----
start_server tiny "$TMP/tiny" "$TMP/cache" --block-size 128 --max-body 65536 --max-context 4096
python3 "$PY" "$PORT" basic "$TMP/ref.json" || fail basic
python3 "$PY" "$PORT" concurrent 0 || fail concurrent
python3 "$PY" "$PORT" bad || fail bad
stop_server

start_server tiny2 "$TMP/tiny" "$TMP/cache" --block-size 128 --max-context 4096
python3 "$PY" "$PORT" cached "$TMP/ref.json" 256 || fail "cache after restart"
stop_server

# flip one byte in the tensor data of block 0 of the prompt (found by its metadata)
python3 - "$TMP/cache" <<'EOF' || fail "flip a byte"
import glob, json, struct, sys
done = False
for f in glob.glob(sys.argv[1] + "/*/*.pdbblk"):
    b = bytearray(open(f, "rb").read())
    n = struct.unpack("<Q", b[:8])[0]
    meta = json.loads(b[8:8 + n])["__metadata__"]
    if meta["block_index"] == "0" or meta["block_index"] == 0:
        pos = 8 + n + (len(b) - 8 - n) // 2
        b[pos] ^= 0x01
        open(f, "wb").write(b)
        done = True
if not done: sys.exit("no block 0 found")
EOF
start_server tiny3 "$TMP/tiny" "$TMP/cache" --block-size 128 --max-context 4096
python3 "$PY" "$PORT" cached "$TMP/ref.json" 0 || fail "corrupt block must not be used"
python3 "$PY" "$PORT" cached "$TMP/ref.json" 256 || fail "rewritten block hits again"
stop_server

start_server auth "$TMP/tiny" "$TMP/cache-auth" --block-size 128 --api-key sekrit
python3 "$PY" "$PORT" auth || fail auth
stop_server

# ---- text mode (real tokenizer) and the official openai npm client ----
NODE_MODE=0
NODE_MODEL="$TMP/tiny"
if [ -n "$SMALL" ]; then NODE_MODE=1; NODE_MODEL="$SMALL"; fi
start_server text "$NODE_MODEL" "$TMP/cache-text" --block-size 128
if [ -n "$SMALL" ]; then
    python3 "$PY" "$PORT" text || fail text
    python3 "$PY" "$PORT" concurrent 1 || fail "concurrent text"
fi
NPM_DIR="$PWD/.cache/npm" # installed by scripts/setup.sh; a missing client is a failure, not a skip
[ -f "$NPM_DIR/node_modules/openai/package.json" ] || fail "the openai npm client is missing: run scripts/setup.sh"
OPENAI_MODULE="$NPM_DIR/node_modules/openai" node tests/decoder/openai_client.js "$PORT" "$NODE_MODE" || fail "openai npm client"
stop_server
echo "test_dec_server: all checks passed"
