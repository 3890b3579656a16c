#!/usr/bin/env bash
# test_spool_e2e: the prefill spool on real processes (CPU, random tiny DeepSeek-V2, --scheme none,
# block 128). (1) A bridge whose prefill connection is cut once inside block 2 (a TCP proxy)
# resumes naming its transfer and is served from the spool: the engine ran the prompt once (the
# tokens counter grows by one run, a recomputation would double it), the verdict is complete, the
# answer equals a native decoder's, and the final acknowledgement leaves no transfer and no spill
# file. (2) Raw protocol: a spool-served resume has 0 engine tokens and the very bytes of the
# first answer and of a recomputed one (times printed); a spill file with a flipped byte is
# refused and its blocks recomputed (identical bytes); bad requests get 4xx naming the field;
# acknowledging everything deletes the files. (3) A client that stops reading: the engine pauses
# with the spill at most at its bound (--spill-max-mb 1), then the whole stream arrives intact.
set -euo pipefail
source "$(dirname "$0")/../common/pdb_e2e.sh"
pdb_e2e_init spool
H="$(pwd)/tests/hardening/pdbh.py"
C="$(pwd)/tests/prefill/spool_client.py"
ok() { echo "ok   $*"; }
j() { pdb_e2e_j "$@"; }
m() { python3 -c "import sys;sys.path.insert(0,'$(dirname "$C")');import spool_client as c;print(int(c.metric(sys.argv[1],sys.argv[2])))" "$1" "$2"; }

pdb_e2e_model deepseek_v2 tiny 43
BS=128
pdb_e2e_decoders $BS
mkdir -p "$T/spill"
pdb_e2e_start pre "$BIN" prefill-server --model "$T/hf" --decoder-model "$T/dec" --port 0 --backend cpu --threads 1 --chunk 64 \
    --spill-dir "$T/spill" --spill-max-mb 64 --spool-mem-mb 1
PRE=$URL; PRE_PID=$PID
SPILL=$(ls -d "$T"/spill/pdbridge-spool-* 2>/dev/null | head -1)
[ -d "$SPILL" ] || pdb_e2e_fail "no per-server spill directory under $T/spill"
echo pass >"$T/proxy.ctl"
python3 "$H" proxy "${PRE##*:}" "$T/proxy.ctl" >"$T/proxy.port" 2>"$T/proxy.log" &
PDB_E2E_PIDS+=($!)
for _ in $(seq 1 50); do [ -s "$T/proxy.port" ] && break; sleep 0.1; done
PROXY="http://127.0.0.1:$(head -1 "$T/proxy.port")"
pdb_e2e_start front "$BIN" front --decoder "$DEC" --prefill "$PROXY" --cache-dir "$T/cache" --decoder-model "$T/dec" --port 0 \
    --block-size $BS --min-bridge-tokens 256 --min-tail 128
FRONT=$URL

# ---- 1. a cut bridge resumed from the spool ---------------------------------------------------
SEG=$(( 16 + 40 + 3 * BS * 40 * 4 ))   # frame bytes of one segment of this model
echo "cutonce $(( 300 + 2 * SEG + 20000 ))" >"$T/proxy.ctl"; sleep 0.1
TOK0=$(m "$PRE" pdbridge_prefill_tokens_total); SB0=$(m "$PRE" pdbridge_prefill_spool_blocks_total)
R=$(python3 - "$(dirname "$H")" "$FRONT" "$NATIVE" $BS <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1]); import pdbh
front, native, bs = sys.argv[2], sys.argv[3], int(sys.argv[4])
p = pdbh.prompt(200, 1500)
r = pdbh.post(front, pdbh.body(p)); ref = pdbh.post(native, pdbh.body(p))
probs = [] if r["status"] == 200 and r.get("ids") == ref.get("ids") else ["answer differs from native"]
if r["status"] == 200: probs += pdbh.verdict_problems(r, len(p), bs)
print(json.dumps({"verdict": r.get("verdict", ""), "pd": r.get("pd"), "problems": probs}))
PY
)
grep -q "cut at" "$T/proxy.log" 2>/dev/null || true
[ "$(j "$R" "len(d['problems'])")" = 0 ] || pdb_e2e_fail "cut bridge: $(j "$R" "d['problems']") ($R)"
[ "$(j "$R" "d['verdict'].split(';')[0]")" = complete ] || pdb_e2e_fail "cut bridge: verdict $R"
[ "$(j "$R" "d['pd']['resumes']")" = 1 ] || pdb_e2e_fail "cut bridge: expected one resume: $R"
[ "$(j "$R" "d['pd']['spool_blocks']")" -ge 9 ] && grep -q "spool_blocks=" <<<"$R" || pdb_e2e_fail "cut bridge: the verdict does not report the spool's blocks: $R"
TOK=$(( $(m "$PRE" pdbridge_prefill_tokens_total) - TOK0 )); SB=$(( $(m "$PRE" pdbridge_prefill_spool_blocks_total) - SB0 ))
[ "$TOK" = $(( 1500 / BS * BS )) ] || pdb_e2e_fail "cut bridge: the engine ran $TOK tokens (one run is $(( 1500 / BS * BS )); the resume recomputed?)"
[ "$SB" -ge 9 ] || pdb_e2e_fail "cut bridge: only $SB blocks came from the spool (blocks 2..10 expected)"
[ "$(m "$PRE" 'pdbridge_prefill_resumes_total{from="spool"}')" = 1 ] || pdb_e2e_fail "resume not counted as served from the spool"
grep -q "from the prefill server's spool" "$T/front.log" || pdb_e2e_fail "the front did not log the spool-served resume"
for _ in $(seq 1 50); do [ "$(m "$PRE" pdbridge_prefill_spool_transfers)" = 0 ] && break; sleep 0.1; done
[ "$(m "$PRE" pdbridge_prefill_spool_transfers)" = 0 ] || pdb_e2e_fail "the acknowledged transfer is still retained"
[ "$(ls "$SPILL" | wc -l)" = 0 ] || pdb_e2e_fail "spill files left after the final acknowledgement: $(ls "$SPILL")"
ok "connection cut inside block 2: resumed from the spool ($SB blocks from the spool, engine ran $TOK tokens = one run), complete, native answer, transfer released, no spill file"
echo pass >"$T/proxy.ctl"

# ---- 2. raw protocol: spool vs recompute, corruption, bad requests ---------------------------
FP=$(python3 -c "import json,urllib.request;print(json.load(urllib.request.urlopen('$PRE/health'))['fingerprint'])")
N=2000; NB=$(( N / BS ))
python3 - "$(dirname "$H")" "$T" "$FP" $N $BS <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1]); import pdbh
t, fp, n, bs = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
p = pdbh.prompt(777, n)
json.dump({"token_ids": p, "block_size": bs, "first_block": 0, "fingerprint": fp}, open(t + "/full.json", "w"))
json.dump({"token_ids": p, "block_size": bs, "first_block": 2, "fingerprint": fp}, open(t + "/recompute.json", "w"))
json.dump({"token_ids": p[:-1] + [(p[-1] + 1) % 1000], "block_size": bs, "first_block": 2, "fingerprint": fp}, open(t + "/other.json", "w"))
PY
A=$(python3 "$C" prefill "$PRE" "$T/full.json")
XID=$(j "$A" "d['transfer']")
[ "$(j "$A" "d['end']['status']")" = 0 ] && [ "$(j "$A" "len(d['blocks'])")" = $NB ] || pdb_e2e_fail "full answer: $(j "$A" "d['end']")"
[ "$(j "$A" "d['end']['message']['transfer']")" = "$XID" ] || pdb_e2e_fail "END message does not name the transfer $XID"
[ "$(ls "$SPILL" | wc -l)" = $NB ] || pdb_e2e_fail "expected $NB retained spill files, found $(ls "$SPILL" | wc -l)"
python3 -c "import json,sys;d=json.load(open(sys.argv[1]));d['transfer']=sys.argv[2];json.dump(d,open(sys.argv[3],'w'))" "$T/recompute.json" "$XID" "$T/resume.json"
python3 -c "import json,sys;d=json.load(open(sys.argv[1]));d['transfer']=sys.argv[2];json.dump(d,open(sys.argv[3],'w'))" "$T/other.json" "$XID" "$T/mismatch.json"
S=$(python3 "$C" prefill "$PRE" "$T/resume.json")
RC=$(python3 "$C" prefill "$PRE" "$T/recompute.json")
[ "$(j "$S" "d['end']['message']['tokens']")" = 0 ] || pdb_e2e_fail "spool-served resume ran the engine: $(j "$S" "d['end']")"
[ "$(j "$S" "d['end']['message']['spool_blocks']")" = $(( NB - 2 )) ] || pdb_e2e_fail "resume: $(j "$S" "d['end']")"
[ "$(j "$RC" "d['end']['message']['tokens']")" -gt 0 ] || pdb_e2e_fail "recompute ran no tokens: $(j "$RC" "d['end']")"
SAME=$(python3 -c "
import json,sys
a,s,r=(json.loads(x) for x in sys.argv[1:4])
print(all(s['digests'][k]==a['digests'][k]==r['digests'][k] for k in s['digests']) and len(s['digests'])==len(r['digests'])==len(a['digests'])-2)" "$A" "$S" "$RC")
[ "$SAME" = True ] || pdb_e2e_fail "spool-served, first and recomputed segments differ"
ok "raw resume from block 2 of $NB: spool $(j "$S" "d['secs']") s (0 engine tokens) vs recompute $(j "$RC" "d['secs']") s ($(j "$RC" "d['end']['message']['tokens']") tokens); first answer $(j "$A" "d['secs']") s; identical bytes"

F=$(ls "$SPILL"/"$XID"-5.seg)
python3 -c "import sys;f=open(sys.argv[1],'r+b');f.seek(72+1234);b=f.read(1);f.seek(72+1234);f.write(bytes([b[0]^0x04]))" "$F"
C0=$(m "$PRE" pdbridge_prefill_spool_corrupt_total)
K=$(python3 "$C" prefill "$PRE" "$T/resume.json")
[ "$(j "$K" "d['end']['status']")" = 0 ] || pdb_e2e_fail "resume over a corrupt spill file failed: $(j "$K" "d['end']")"
[ "$(m "$PRE" pdbridge_prefill_spool_corrupt_total)" = $((C0 + 1)) ] || pdb_e2e_fail "the corrupt spill file was not detected"
[ "$(j "$K" "d['end']['message']['spool_blocks']")" = $(( NB - 3 )) ] || pdb_e2e_fail "corrupt block 5: expected every other block from the spool: $(j "$K" "d['end']")"
[ "$(j "$K" "d['end']['message']['engine_blocks']")" = 1 ] || pdb_e2e_fail "corrupt block 5: expected it recomputed: $(j "$K" "d['end']")"
[ "$(j "$K" "d['end']['message']['tokens']")" = $(( 6 * BS )) ] || pdb_e2e_fail "corrupt block 5: the engine should run up to block 5 only: $(j "$K" "d['end']")"
SAME=$(python3 -c "
import json,sys
a,k=(json.loads(x) for x in sys.argv[1:3])
print(all(k['digests'][b]==a['digests'][b] for b in k['digests']) and len(k['digests'])==len(a['digests'])-2)" "$A" "$K")
[ "$SAME" = True ] || pdb_e2e_fail "segments after the corrupt spill file differ from the first answer"
ok "a flipped byte in the spill file of block 5: refused by its checksum, block 5 recomputed ($(j "$K" "d['end']['message']['tokens']") tokens run, $(j "$K" "d['secs']") s), the other $(( NB - 3 )) from the spool, identical bytes"

bad() { # bad LABEL WANT_STATUS WANT_PARAM PATH BODY
    local r; r=$(python3 "$C" post "$PRE" "$4" "$5")
    [ "$(j "$r" "d['status']")" = "$2" ] || pdb_e2e_fail "$1: status $(j "$r" "d['status']") (want $2): $r"
    [ "$3" = - ] || [ "$(j "$r" "(d['json'] or {}).get('error',{}).get('param')")" = "$3" ] || pdb_e2e_fail "$1: error does not name $3: $r"
}
bad "ack: not JSON" 400 - /v1/prefill/ack '{"transfer":'
bad "ack: no transfer" 400 transfer /v1/prefill/ack '{"through_block":1}'
bad "ack: transfer not hex" 400 transfer /v1/prefill/ack '{"transfer":"zz","through_block":1}'
bad "ack: negative through_block" 400 through_block /v1/prefill/ack "{\"transfer\":\"$XID\",\"through_block\":-1}"
bad "ack: through_block not an integer" 400 through_block /v1/prefill/ack "{\"transfer\":\"$XID\",\"through_block\":\"2\"}"
bad "ack: unknown transfer" 404 transfer /v1/prefill/ack '{"transfer":"0123456789abcdef0123456789abcdef","through_block":1}'
bad "prefill: transfer not an id" 400 transfer /v1/prefill "{\"transfer\":42,\"token_ids\":[1,2],\"block_size\":128,\"fingerprint\":\"$FP\"}"
bad "prefill: first_block not an integer" 400 first_block /v1/prefill "{\"first_block\":\"x\",\"token_ids\":[1,2],\"block_size\":128,\"fingerprint\":\"$FP\"}"
bad "prefill: transfer of another prompt" 409 transfer /v1/prefill "$(cat "$T/mismatch.json")"
# token_ids: the plain-array path (pdb_json_ids) and the whole-body parse give the same answers
bad "prefill: a token id past the vocabulary (plain array)" 400 token_ids /v1/prefill "{\"token_ids\":[1,1000,2],\"block_size\":128,\"fingerprint\":\"$FP\"}"
bad "prefill: a negative token id (whole parse)" 400 token_ids /v1/prefill "{\"token_ids\":[1,-2],\"block_size\":128,\"fingerprint\":\"$FP\"}"
bad "prefill: empty token_ids" 400 token_ids /v1/prefill "{\"token_ids\":[],\"block_size\":128,\"fingerprint\":\"$FP\"}"
bad "prefill: token_ids twice" 400 token_ids /v1/prefill "{\"token_ids\":[1,2],\"token_ids\":\"x\",\"block_size\":128,\"fingerprint\":\"$FP\"}"
bad "prefill: a plain array but a bad block_size" 400 block_size /v1/prefill "{\"token_ids\":[1,2],\"block_size\":100,\"fingerprint\":\"$FP\"}"
python3 -c "import urllib.request as u;u.urlopen(u.Request('$PRE/v1/prefill/ack'),timeout=10)" 2>/dev/null && pdb_e2e_fail "GET /v1/prefill/ack answered 200"
A2=$(python3 "$C" post "$PRE" /v1/prefill/ack "{\"transfer\":\"$XID\",\"through_block\":10}")
[ "$(j "$A2" "d['status']")" = 200 ] && [ "$(j "$A2" "d['json']['released']")" = 10 ] || pdb_e2e_fail "ack through 10: $A2"
[ "$(ls "$SPILL" | grep -c "^$XID")" = $(( NB - 10 )) ] || pdb_e2e_fail "after ack through 10: $(ls "$SPILL" | grep -c "^$XID") files"
A3=$(python3 "$C" post "$PRE" /v1/prefill/ack "{\"transfer\":\"$XID\",\"through_block\":$NB}")
[ "$(j "$A3" "d['json']['transfer_released']")" = True ] || pdb_e2e_fail "ack everything: $A3"
[ "$(ls "$SPILL" | grep -c "^$XID" || true)" = 0 ] || pdb_e2e_fail "files left after acknowledging everything"
bad "ack: released transfer" 404 transfer /v1/prefill/ack "{\"transfer\":\"$XID\",\"through_block\":1}"
G=$(python3 "$C" prefill "$PRE" "$T/resume.json")   # the transfer is gone: recomputed (a new transfer)
[ "$(j "$G" "d['end']['status']")" = 0 ] && [ "$(j "$G" "d['transfer'] != '$XID'")" = True ] && [ "$(j "$G" "d['end']['message']['tokens']")" -gt 0 ] \
    || pdb_e2e_fail "resume of a released transfer: $(j "$G" "d['end']")"
kill -0 "$PRE_PID" || pdb_e2e_fail "the prefill server died"
ok "bad requests answered 4xx naming the field; acks release files (through 10, then all); a released transfer is recomputed"

# ---- 3. a consumer that stops reading: the spill grows only to its bound ----------------------
"$BIN" make-model --arch deepseek_v2 --preset tiny --seed 44 --layers 24 --out "$T/hf8" >/dev/null
"$BIN" quantize --model "$T/hf8" --out "$T/dec8" --scheme none >/dev/null 2>&1
pdb_e2e_start pre8 "$BIN" prefill-server --model "$T/hf8" --decoder-model "$T/dec8" --port 0 --backend cpu --threads 1 --chunk 128 \
    --spill-dir "$T/spill8" --spill-max-mb 1 --spool-mem-mb 1
PRE8=$URL
FP8=$(python3 -c "import json,urllib.request;print(json.load(urllib.request.urlopen('$PRE8/health'))['fingerprint'])")
python3 -c "
import json,sys
sys.path.insert(0,'$(dirname "$H")');import pdbh
json.dump({'token_ids':pdbh.prompt(99,4352),'block_size':128,'first_block':0,'fingerprint':'$FP8'},open('$T/big.json','w'))"
W=$(python3 "$C" prefill "$PRE8" "$T/big.json" --slow "$PRE8" 1048576)
BOUND=1048576
[ "$(j "$W" "d['end']['status']")" = 0 ] && [ "$(j "$W" "len(d['blocks'])")" = 34 ] || pdb_e2e_fail "slow consumer: stream incomplete: $(j "$W" "d['end']")"
[ "$(j "$W" "d['slow']['pauses'] > 0")" = True ] || pdb_e2e_fail "slow consumer: the engine never paused: $(j "$W" "d['slow']")"
[ "$(j "$W" "d['slow']['peak'] <= $BOUND and d['slow']['max_spill'] <= $BOUND")" = True ] || pdb_e2e_fail "slow consumer: spill beyond the bound: $(j "$W" "d['slow']")"
[ "$(j "$W" "d['slow']['max_spill'] > 0")" = True ] || pdb_e2e_fail "slow consumer: nothing spilled: $(j "$W" "d['slow']")"
PEAK=$(m "$PRE8" pdbridge_prefill_spill_peak_bytes)
[ "$PEAK" -le $BOUND ] || pdb_e2e_fail "spill peak $PEAK over the bound $BOUND"
ok "consumer stopped reading: engine paused with the spill at $(j "$W" "int(d['slow']['max_spill'])") bytes (peak $PEAK <= bound $BOUND), then all 34 blocks (16.7 MB) arrived intact"

if grep -l "ERROR: AddressSanitizer\|runtime error:\|LeakSanitizer" "$T"/*.log 2>/dev/null; then pdb_e2e_fail "sanitizer report in a server log"; fi
echo "all spool end-to-end checks passed"
