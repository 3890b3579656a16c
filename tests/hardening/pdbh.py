#!/usr/bin/env python3
# pdbh.py: stdlib-only helpers of the hardening shell tests (tests/hardening/test_*.sh): OpenAI
# clients, a fault-injecting TCP proxy, an independent block-file verifier, the verdict truth
# check and the load generator. Invariants: every check returns/prints a verdict that can fail;
# nothing here trusts the C code's own verification (the block verifier re-implements the file
# format of docs/formats/block.md from its byte-level description).
import hashlib, json, os, random, socket, struct, sys, threading, time, urllib.error, urllib.request

def prompt(seed, n, vocab=1000):
    x, out = seed, []
    for _ in range(n):
        x = (x * 1103515245 + 12345) % 2**31
        out.append(x % vocab)
    return out

def body(p, n=8):
    return {"prompt": p, "max_tokens": n, "temperature": 0, "return_token_ids": True, "ignore_eos": True}

def post(url, b, path="/v1/completions", headers=None, timeout=600, raw=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    data = raw if raw is not None else json.dumps(b).encode()
    rq = urllib.request.Request(url + path, data=data, headers=h)
    t0 = time.time()
    try:
        with urllib.request.urlopen(rq, timeout=timeout) as r:
            status, txt, hdrs = r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        status, txt, hdrs = e.code, e.read(), e.headers
    out = {"status": status, "secs": time.time() - t0, "verdict": hdrs.get("X-PD-Bridge", "") if hdrs else ""}
    try:
        out["json"] = json.loads(txt)
    except Exception:
        out["json"] = None
        out["text"] = txt[:300].decode("latin-1")
    d = out["json"]
    if status == 200 and isinstance(d, dict) and "choices" in d:
        out["ids"] = d["choices"][0].get("token_ids")
        out["cached"] = d["usage"]["prompt_tokens_details"]["cached_tokens"]
        out["prompt_tokens"] = d["usage"]["prompt_tokens"]
        out["pd"] = d.get("pd_bridge")
    return out

def get(url, path, headers=None, timeout=30):
    rq = urllib.request.Request(url + path, headers=headers or {})
    try:
        with urllib.request.urlopen(rq, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")

def metric(url, name, headers=None):
    st, txt = get(url, "/metrics", headers)
    total = 0.0
    for line in txt.splitlines():
        if line.startswith(name) and (len(line) == len(name) or line[len(name)] in " {"):
            total += float(line.split()[-1])
    return total

# ---- verdict truth --------------------------------------------------------------------------
def verdict_problems(r, n_tokens, bs):
    """Empty list when the front's verdict is truthful given the decoder's own cached_tokens."""
    p = []
    v = r.get("verdict", "")
    kind = v.split(";")[0].strip()
    cached = r.get("cached")
    bridgeable = (n_tokens - 1) // bs
    pd = r.get("pd") or {}
    if cached is None:
        return ["no usage in the answer: %s" % r]
    if r.get("prompt_tokens") != n_tokens:
        p.append("prompt_tokens %s != %d" % (r.get("prompt_tokens"), n_tokens))
    if pd.get("mounted_tokens") != cached:
        p.append("pd_bridge.mounted_tokens %s != decoder cached %s" % (pd.get("mounted_tokens"), cached))
    if kind == "complete":
        if cached != bridgeable * bs:
            p.append("'complete' but the decoder cached %d of %d bridgeable tokens" % (cached, bridgeable * bs))
    elif kind.startswith("partial"):
        try:
            b, t = kind.split()[1].split("/")
            b, t = int(b), int(t)
        except Exception:
            return ["unparsable partial verdict %r" % kind]
        if b != cached or t != n_tokens:
            p.append("'%s' but the decoder cached %d of %d" % (kind, cached, n_tokens))
        if cached >= bridgeable * bs:
            p.append("'partial' though every bridgeable block was mounted")
        if cached <= pd.get("cached_blocks_before", 0) * bs:
            p.append("'partial' though no bridged block was mounted")
    elif kind.startswith("declined"):
        if cached > pd.get("cached_blocks_before", 0) * bs and pd.get("blocks_written", 0) > 0:
            p.append("'declined' but the decoder mounted %d tokens beyond the %d cached before" %
                     (cached, pd.get("cached_blocks_before", 0) * bs))
    elif kind.startswith("skipped"):
        pass
    else:
        p.append("unknown verdict %r" % v)
    return p

# ---- independent block-file verifier ----------------------------------------------------------
ROOT = hashlib.sha256(b"pdbridge-root-v1").digest()

def verify_block_file(path, fp=None):
    """Problems of one .pdbblk (empty = valid): safetensors framing, metadata, checksum over the
    data area, name = SHA-256(fingerprint || parent || tokens)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        return ["%s: %d bytes" % (path, len(raw))]
    n = struct.unpack("<Q", raw[:8])[0]
    if 8 + n > len(raw) or (8 + n) % 8:
        return ["%s: bad header length %d" % (path, n)]
    try:
        h = json.loads(raw[8:8 + n].decode())
    except Exception as e:
        return ["%s: header is not JSON: %s" % (path, e)]
    m = h.get("__metadata__", {})
    data = raw[8 + n:]
    probs = []
    end = max(v["data_offsets"][1] for k, v in h.items() if k != "__metadata__")
    if end != len(data):
        probs.append("%s: data area %d bytes, tensors end at %d" % (path, len(data), end))
    if hashlib.sha256(data).hexdigest() != m.get("checksum"):
        probs.append("%s: checksum mismatch" % path)
    name = os.path.basename(path)[:64]
    if m.get("block_hash") != name:
        probs.append("%s: block_hash %s" % (path, m.get("block_hash")))
    tok = h.get("tokens")
    if tok:
        a, b = tok["data_offsets"]
        hh = hashlib.sha256(bytes.fromhex(m.get("fingerprint", "")) + bytes.fromhex(m.get("parent_hash", "")) + data[a:b]).hexdigest()
        if hh != name:
            probs.append("%s: tokens + parent do not hash to the name" % path)
    if fp and m.get("fingerprint") != fp:
        probs.append("%s: fingerprint %s" % (path, m.get("fingerprint")))
    if (m.get("block_index") == "0") != (m.get("parent_hash") == ROOT.hex()):
        probs.append("%s: parent/root disagree with block_index" % path)
    return probs

def verify_store(d):
    """(n_blocks, problems): every block file valid, no temp file anywhere."""
    probs, nb = [], 0
    for root, dirs, files in os.walk(d):
        for fn in files:
            p = os.path.join(root, fn)
            if ".tmp" in fn:
                probs.append("temp file left: %s" % p)
            elif fn.endswith(".pdbblk"):
                nb += 1
                probs += verify_block_file(p)
    return nb, probs

# ---- fault-injecting TCP proxy --------------------------------------------------------------
class Proxy:
    """Listens on 127.0.0.1:port, relays to target. mode per connection (set .mode): 'pass',
    ('cut', N): close both sides after N response bytes, ('cutonce', N): the same for the first
    connection only, ('flip', N): XOR response byte N with 1."""
    def __init__(self, target_port):
        self.target = target_port
        self.mode = "pass"
        self.once_done = None
        self.events = []
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(64)
        self.port = self.ls.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            c, _ = self.ls.accept()
            m = self.mode
            if m != "pass" and m[0] == "cutonce":  # cut the first connection only, pass the rest
                if self.once_done == m:
                    m = "pass"
                else:
                    self.once_done, m = m, ("cut", m[1])
            threading.Thread(target=self.conn, args=(c, m), daemon=True).start()

    def conn(self, c, mode):
        try:
            u = socket.create_connection(("127.0.0.1", self.target))
        except OSError:
            c.close()
            return
        def up():
            try:
                while True:
                    b = c.recv(65536)
                    if not b:
                        break
                    u.sendall(b)
            except OSError:
                pass
        threading.Thread(target=up, daemon=True).start()
        sent = 0
        try:
            while True:
                b = u.recv(65536)
                if not b:
                    break
                if mode != "pass" and mode[0] == "cut" and sent + len(b) >= mode[1]:
                    c.sendall(b[:mode[1] - sent])
                    self.events.append("cut at %d" % mode[1])
                    break
                if mode != "pass" and mode[0] == "flip" and sent <= mode[1] < sent + len(b):
                    b = bytearray(b)
                    b[mode[1] - sent] ^= 1
                    b = bytes(b)
                    self.events.append("flipped byte %d" % mode[1])
                c.sendall(b)
                sent += len(b)
        except OSError:
            pass
        for s in (c, u):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p

def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, int(round(q / 100.0 * (len(xs) - 1)))))
    return xs[k]

if __name__ == "__main__":
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "free_port":
        print(free_port())
    elif cmd == "verify_store":
        nb, probs = verify_store(a[0])
        print(json.dumps({"blocks": nb, "problems": probs}))
    elif cmd == "proxy":  # proxy TARGET_PORT CONTROL_FILE: prints its port; mode read from the file per connection
        px = Proxy(int(a[0]))
        print(px.port, flush=True)
        ctl = a[1]
        while True:
            try:
                m = open(ctl).read().split()
                px.mode = "pass" if not m or m[0] == "pass" else (m[0], int(m[1]))
            except OSError:
                px.mode = "pass"
            time.sleep(0.02)

# ---- load ------------------------------------------------------------------------------------
def load(front, native, seconds, clients, bs, out_path):
    """clients threads for `seconds` against the front: cold bridges (fresh 520-700 token prompts),
    warm prompts (4 prompts bridged beforehand) and short prompts (40 tokens). Afterwards every
    answer is compared with the native decoder's. Writes a JSON summary; returns it."""
    warm = [prompt(900000 + i, 640) for i in range(4)]
    for p in warm:
        r = post(front, body(p))
        if r["status"] != 200:
            raise SystemExit("warm-up failed: %s" % r)
    lock = threading.Lock()
    counter = [0]
    results = []
    stop = time.time() + seconds
    def client(k):
        rnd = random.Random(k)
        while time.time() < stop:
            x = rnd.random()
            if x < 0.25:
                with lock:
                    counter[0] += 1
                    seed = 1000 + counter[0]
                kind, p = "cold", prompt(seed, 520 + seed % 181)
            elif x < 0.6:
                kind, p = "warm", warm[rnd.randrange(4)]
            else:
                kind, p = "short", prompt(5000 + rnd.randrange(64), 40)
            try:
                r = post(front, body(p), timeout=300)
            except Exception as e:
                r = {"status": -1, "secs": 0.0, "error": repr(e)}
            r["kind"] = kind
            r["p"] = p
            with lock:
                results.append(r)
    th = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    t0 = time.time()
    [t.start() for t in th]
    [t.join() for t in th]
    wall = time.time() - t0
    # correctness: every distinct prompt against the native decoder
    refs, errors, wrong, untruthful = {}, [], [], []
    for r in results:
        key = tuple(r["p"])
        if r["status"] != 200:
            errors.append({"kind": r["kind"], "status": r["status"], "body": r.get("json") or r.get("text") or r.get("error")})
            continue
        if key not in refs:
            refs[key] = post(native, body(r["p"]))["ids"]
        if r["ids"] != refs[key]:
            wrong.append({"kind": r["kind"], "n": len(r["p"])})
        pr = verdict_problems(r, len(r["p"]), bs)
        if pr:
            untruthful.append(pr)
    lat = {}
    for kind in ("cold", "warm", "short", "all"):
        xs = [r["secs"] * 1e3 for r in results if r["status"] == 200 and (kind == "all" or r["kind"] == kind)]
        lat[kind] = {"n": len(xs), "p50_ms": round(pct(xs, 50), 1), "p95_ms": round(pct(xs, 95), 1), "p99_ms": round(pct(xs, 99), 1)}
    verdicts = {}
    for r in results:
        v = r.get("verdict", "").split(";")[0]
        v = "partial" if v.startswith("partial") else v
        verdicts[v] = verdicts.get(v, 0) + 1
    s = {"clients": clients, "seconds": round(wall, 1), "requests": len(results), "errors": errors[:5], "n_errors": len(errors),
         "n_wrong": len(wrong), "wrong": wrong[:5], "n_untruthful": len(untruthful), "untruthful": untruthful[:5],
         "latency": lat, "verdicts": verdicts, "distinct_prompts": len(refs)}
    with open(out_path, "w") as f:
        json.dump(s, f)
    return s

if __name__ == "__main__" and sys.argv[1] == "load":  # load FRONT NATIVE SECONDS CLIENTS BS OUT
    a = sys.argv[2:]
    print(json.dumps(load(a[0], a[1], float(a[2]), int(a[3]), int(a[4]), a[5])))
