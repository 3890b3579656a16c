#!/usr/bin/env python3
# spool_client.py: a stdlib-only client of the prefill stream (docs/protocol.md) for
# test_spool_e2e.sh. It re-implements the PDBF frame format from its description (it trusts
# nothing of the C parser): every SEGMENT's SHA-256 is checked, blocks must come in order.
#   prefill URL BODY_FILE [--slow METRICS_URL BOUND]  -> one JSON line (status, transfer, blocks,
#       per-block digests, END status/message, seconds; with --slow: the spill gauges seen while
#       the client did not read)
#   post URL PATH BODY                                  -> {"status", "json"}
import hashlib, json, socket, struct, sys, time, urllib.error, urllib.request

MAGIC = 0x46424450

def metric(url, name):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        txt = r.read().decode()
    total = 0.0
    for line in txt.splitlines():
        if line.startswith(name) and (len(line) == len(name) or line[len(name)] in " {"):
            total += float(line.split()[-1])
    return total

def post(url, path, body):
    data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    rq = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(rq, timeout=60) as r:
            st, txt = r.status, r.read()
    except urllib.error.HTTPError as e:
        st, txt = e.code, e.read()
    try:
        return {"status": st, "json": json.loads(txt)}
    except ValueError:
        return {"status": st, "json": None, "text": txt[:300].decode("latin-1")}

class Reader:
    """HTTP/1.1 response over a raw socket (chunked body), so the receive buffer can be tiny."""
    def __init__(self, url, body, rcvbuf=None):
        host, port = url.split("//")[1].split(":")
        self.s = socket.socket()
        if rcvbuf:
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.s.connect((host, int(port)))
        data = json.dumps(body).encode()
        self.s.sendall(b"POST /v1/prefill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(data) + data)
        self.buf = b""
        head = self.until(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
        self.chunk_left = 0
        self.eof = False

    def fill(self, n=65536):
        b = self.s.recv(n)
        if not b:
            raise EOFError("connection closed")
        self.buf += b

    def until(self, sep):
        while sep not in self.buf:
            self.fill()
        i = self.buf.index(sep)
        out, self.buf = self.buf[:i], self.buf[i + len(sep):]
        return out

    def body(self, n):
        """n bytes of the (de-chunked) body."""
        out = b""
        while len(out) < n:
            if self.chunk_left == 0:
                size = int(self.until(b"\r\n").split(b";")[0], 16)
                if size == 0:
                    raise EOFError("body ended")
                self.chunk_left = size
            if not self.buf:
                self.fill()
            take = min(n - len(out), self.chunk_left, len(self.buf))
            out += self.buf[:take]
            self.buf = self.buf[take:]
            self.chunk_left -= take
            if self.chunk_left == 0:
                self.until(b"\r\n")
        return out

def read_stream(rd, slow=None):
    out = {"status": rd.status, "transfer": rd.headers.get("x-pd-transfer"), "blocks": [], "digests": {}, "end": None}
    if rd.status != 200:
        return out
    seen_slow = False
    while True:
        magic, typ, plen = struct.unpack("<IIQ", rd.body(16))
        if magic != MAGIC:
            raise ValueError("bad magic")
        if typ == 1:
            out["header"] = json.loads(rd.body(plen))
            nxt = out["header"]["first_block"]
        elif typ == 2:
            blk = struct.unpack("<q", rd.body(8))[0]
            digest = rd.body(32)
            data = rd.body(plen - 40)
            if hashlib.sha256(data).digest() != digest:
                raise ValueError("block %d fails its checksum" % blk)
            if blk != nxt:
                raise ValueError("block %d out of order (expected %d)" % (blk, nxt))
            nxt += 1
            out["blocks"].append(blk)
            out["digests"][str(blk)] = digest.hex()
            if slow and not seen_slow:  # stop reading: the server must pause within its bound
                seen_slow = True
                out["slow"] = slow(out)
        elif typ == 3:
            st, ml = struct.unpack("<iI", rd.body(8))
            msg = rd.body(ml).decode()
            try:
                msg = json.loads(msg)
            except ValueError:
                pass
            out["end"] = {"status": st, "message": msg}
            return out
        else:
            raise ValueError("frame type %d" % typ)

def slow_watch(metrics_url, bound):
    def watch(_):
        seen = {"max_spill": 0, "pauses": 0, "max_files": 0}
        p0 = metric(metrics_url, "pdbridge_prefill_engine_pauses_total")
        t0 = time.time()
        while time.time() - t0 < 120:
            sb = metric(metrics_url, "pdbridge_prefill_spill_bytes")
            seen["max_spill"] = max(seen["max_spill"], sb)
            seen["max_files"] = max(seen["max_files"], metric(metrics_url, "pdbridge_prefill_spill_files"))
            seen["pauses"] = metric(metrics_url, "pdbridge_prefill_engine_pauses_total") - p0
            if seen["pauses"] > 0:
                time.sleep(1.0)  # paused: it must stay within the bound while we keep not reading
                seen["max_spill"] = max(seen["max_spill"], metric(metrics_url, "pdbridge_prefill_spill_bytes"))
                seen["peak"] = metric(metrics_url, "pdbridge_prefill_spill_peak_bytes")
                break
            time.sleep(0.05)
        seen["waited_s"] = round(time.time() - t0, 2)
        return seen
    return watch

if __name__ == "__main__":
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "prefill":
        url, body = a[0], json.load(open(a[1]))  # BODY_JSON: a file
        slow = None
        rcv = None
        if len(a) > 2 and a[2] == "--slow":
            slow, rcv = slow_watch(a[3], float(a[4])), 4096
        t0 = time.time()
        rd = Reader(url, body, rcv)
        out = read_stream(rd, slow)
        out["secs"] = round(time.time() - t0, 3)
        print(json.dumps(out))
    elif cmd == "post":
        print(json.dumps(post(a[0], a[1], a[2])))
