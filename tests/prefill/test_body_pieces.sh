#!/usr/bin/env bash
# test_body_pieces: the prefill server reads a /v1/prefill body as it arrives (pdb_http's body
# sink into pdb_json_ids' reader), whatever the pieces. Each body is posted twice on a raw socket:
# in one send, and in odd-sized pieces (1, 7, 13, 101, 4093 bytes ..., TCP_NODELAY and a pause
# between pieces, so the server receives them apart), with Content-Length and chunked. Checks: a
# good body's stream is the same (every block's digest, END status 0) both ways; every bad body
# (ids past the vocabulary, a sign, a fraction, duplicates, escaped keys, syntax errors on later
# lines, truncation, a body past the server's bound) gets the same status and the same error JSON
# both ways, the errors at the body's own line and column; the server survives all of it.
# PDB_BODY_PIECES_DUMP=FILE writes the answers (to compare two builds: PDB_BIN=other/pdbridge).
set -euo pipefail
source "$(dirname "$0")/../common/pdb_e2e.sh"
pdb_e2e_init body_pieces
C="$(pwd)/tests/prefill/spool_client.py"

pdb_e2e_model deepseek_v2 tiny 45
pdb_e2e_start pre "$BIN" prefill-server --model "$T/hf" --decoder-model "$T/dec" --port 0 --backend cpu --threads 1 --chunk 64
PRE=$URL; PRE_PID=$PID
python3 - "$PRE" "$C" "${PDB_BODY_PIECES_DUMP:-}" <<'PY'
import json, socket, sys, time, urllib.request
sys.path.insert(0, sys.argv[2].rsplit("/", 1)[0])
import spool_client as sc
url = sys.argv[1]
host, port = url.split("//")[1].split(":")
health = json.load(urllib.request.urlopen(url + "/health", timeout=30))
fp, max_body = health["fingerprint"], health["limits"]["max_body"]
SIZES = [1, 7, 13, 101, 4093, 3, 65537]

class Sock(sc.Reader):
    """spool_client's response reader on a request sent whole or in pieces (optionally chunked)."""
    def __init__(self, data, pieces, chunked=False):
        self.s = socket.create_connection((host, int(port)))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = b"POST /v1/prefill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
        head += b"Transfer-Encoding: chunked\r\n\r\n" if chunked else b"Content-Length: %d\r\n\r\n" % len(data)
        self.s.sendall(head)
        at, k = 0, 0
        try:
            while at < len(data):
                n = SIZES[k % len(SIZES)] if pieces else len(data)
                part = data[at:at + n]
                self.s.sendall(b"%x\r\n" % len(part) + part + b"\r\n" if chunked else part)
                at, k = at + n, k + 1
                if pieces:
                    time.sleep(0.002)
            if chunked:
                self.s.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered early (413): the answer is still read below
        self.buf = b""
        lines = self.until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
        self.chunk_left, self.eof = 0, False

    def rest(self):
        if self.headers.get("transfer-encoding") == "chunked":
            out = b""
            try:
                while True:
                    out += self.body(1)
            except EOFError:
                return out
        n = int(self.headers.get("content-length", "0"))
        while len(self.buf) < n:
            self.fill()
        return self.buf[:n]

def answer(data, pieces, chunked=False):
    r = Sock(data, pieces, chunked)
    if r.status == 200:
        out = sc.read_stream(r)
        return {"status": 200, "blocks": out["blocks"], "digests": out["digests"], "end": out["end"]["status"]}
    return {"status": r.status, "json": json.loads(r.rest())}

fails, record = 0, []
def same(name, data, want_status, want=None):
    global fails
    a = answer(data, False)
    record.append({"name": name, "answer": a})
    for chunked in (False, True):
        b = answer(data, True, chunked)
        how = "chunked pieces" if chunked else "pieces"
        if a != b:
            print("FAIL %s: whole %s vs %s %s" % (name, json.dumps(a)[:300], how, json.dumps(b)[:300])); fails += 1; return
    if a["status"] != want_status:
        print("FAIL %s: status %d, expected %d: %s" % (name, a["status"], want_status, json.dumps(a)[:300])); fails += 1; return
    if want and want not in json.dumps(a):
        print("FAIL %s: %r not in %s" % (name, want, json.dumps(a)[:300])); fails += 1; return
    print("ok   %s: %d, the same whole and in pieces%s" % (name, a["status"], "" if a["status"] != 200 else
          " (%d blocks, identical digests)" % len(a["blocks"])))

ids = [(i * 7919 + 3) % 1000 for i in range(700)]
good = ('{"block_size": 128,\n "fingerprint": "%s",\n "token_ids": [%s],\n "first_block": 0}' %
        (fp, ",".join(str(x) + ("\n  " if i % 50 == 49 else " " if i % 3 else "") for i, x in enumerate(ids))))
same("a good body (700 ids over 15 lines)", good.encode(), 200)
tail = ',"block_size":128,"fingerprint":"%s"}' % fp
arr = ",\n".join(str(x) for x in ids[:300])
same("an id past the vocabulary", ('{"token_ids":[1,1000,2]' + tail).encode(), 400, "token_ids[1]")
same("a negative id (declined inside the array)", ('{"token_ids":[' + arr + ',-2]' + tail).encode(), 400, "token_ids[300]")
same("a fraction", ('{"token_ids":[' + arr + ',2.5]' + tail).encode(), 400, "token_ids[300]")
same("token_ids twice", ('{"token_ids":[' + arr + '],"token_ids":"x"' + tail).encode(), 400, "non-empty array")
same("an escaped key", ('{"token_ids":[' + arr + '],"block\\u005fsize":100,"fingerprint":"%s"}' % fp).encode(), 400, "block_size")
same("a syntax error after 300 lines of ids", ('{"token_ids":[' + arr + '],\n "block_size":128 x}').encode(), 400, "line 301 column 19")
same("a syntax error inside the array", ('{"token_ids":[' + arr + ',\n 7 8]' + tail).encode(), 400, "line 301 column 4")
same("a truncated body", ('{"token_ids":[' + arr).encode(), 400, "line 300")
same("an empty array", ('{"token_ids":[ ]' + tail).encode(), 400, "non-empty array")
same("not an object", b'[1,2,3]', 400, "not an object")
same("a bad block_size after a plain array", ('{"token_ids":[1,2],"block_size":100,"fingerprint":"%s"}' % fp).encode(), 400, "block_size")
big = ('{"token_ids":[' + ",".join(["1"] * ((max_body // 2) + 10)) + ']' + tail).encode()
same("a body past the server's bound (%d bytes)" % len(big), big, 413, "request_too_large")
same("a good body again", good.encode(), 200)
if len(sys.argv) > 3 and sys.argv[3]:  # PDB_BODY_PIECES_DUMP: the answers, to compare two builds
    json.dump(record, open(sys.argv[3], "w"), indent=1)
sys.exit(1 if fails else 0)
PY
kill -0 "$PRE_PID" || pdb_e2e_fail "the prefill server died"
pdb_e2e_ok "every body: the same answer whole and in pieces"
if grep -l "ERROR: AddressSanitizer\|runtime error:\|LeakSanitizer" "$T"/*.log 2>/dev/null; then pdb_e2e_fail "sanitizer report in a server log"; fi
echo "all body-pieces checks passed"
