#!/usr/bin/env bash
# bench/prefill_rss.sh: the prefill server's peak resident memory (its /metrics
# pdb_process_peak_rss_bytes, VmHWM) for one /v1/prefill request of N token ids, two builds side by
# side (issue 18 item 1: memory independent of the request body). For each N and round, a fresh
# server of each build (the order alternates by round) gets the same body file (compact JSON,
# ids uniform over the vocabulary, as the front writes them) by curl; the server is stopped after.
# Two modes:
#   parse  first_block = the prompt's full blocks: the server reads and validates the whole body,
#          takes an engine and answers with the header and END only (no engine run), so the peak
#          over the idle server is what the request body and its ids cost;
#   full   first_block = 0: the engine prefills the whole prompt and streams every segment
#          (curl reads them to /dev/null), so the engine's own cache is in the peak too.
# Output: one CSV line per server run on stdout (mode, n, build, round, body bytes, idle peak,
# peak after the request, their difference, seconds), also appended to OUT_DIR/prefill_rss.csv.
# Usage: prefill_rss.sh MODEL DEC_MODEL BEFORE_BIN AFTER_BIN OUT_DIR "N1 N2 .." [ROUNDS (3)] [MODE (parse)]
#   e.g. M = make-model --arch deepseek_v4 --preset v4-long-tiny --seed 1, DEC = quantize --scheme none
set -euo pipefail
M=$1 DEC=$2 BEFORE=$3 AFTER=$4 OUT=$5 SIZES=$6 ROUNDS=${7:-3} MODE=${8:-parse}
BS=2048
mkdir -p "$OUT"
CSV="$OUT/prefill_rss.csv"
[ -s "$CSV" ] || echo "mode,n_tokens,build,round,body_bytes,idle_peak_rss,peak_rss,request_peak_delta,seconds" >"$CSV"
TMP=$(mktemp -d /tmp/prefill_rss-XXXXXX)
SRV=
trap '[ -n "$SRV" ] && kill "$SRV" 2>/dev/null; rm -rf "$TMP"' EXIT
peak() { curl -sf "$1/metrics" | sed -n 's/^pdb_process_peak_rss_bytes \([0-9]*\).*/\1/p'; }
start() { # bin -> URL, SRV
    "$1" prefill-server --model "$M" --decoder-model "$DEC" --port 0 --backend cpu --block-size $BS >"$TMP/srv.log" 2>&1 &
    SRV=$!
    for _ in $(seq 1 600); do
        URL=$(sed -n 's|^listening on \(http://[0-9.]*:[0-9]*\).*|\1|p' "$TMP/srv.log" | head -1)
        [ -n "$URL" ] && return 0
        kill -0 $SRV 2>/dev/null || { cat "$TMP/srv.log" >&2; exit 1; }
        sleep 0.1
    done
    echo "server did not start" >&2; exit 1
}
for n in $SIZES; do
    body="$TMP/body_$n.json"
    start "$AFTER" # the fingerprint and the vocabulary, from the server itself
    python3 - "$URL" "$n" "$BS" "$MODE" "$body" <<'PY'
import json, random, sys, urllib.request
url, n, bs, mode, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
h = json.load(urllib.request.urlopen(url + "/health", timeout=30))
vocab = 129280  # v4-long-tiny: the real tokenizer's vocabulary
rnd = random.Random(n)
ids = ",".join(str(rnd.randrange(vocab)) for _ in range(n))
fb = n // bs if mode == "parse" else 0
open(out, "w").write('{"token_ids":[%s],"block_size":%d,"first_block":%d,"fingerprint":"%s"}' % (ids, bs, fb, h["fingerprint"]))
PY
    kill $SRV; wait $SRV 2>/dev/null || true; SRV=
    bytes=$(stat -c %s "$body")
    for r in $(seq 1 "$ROUNDS"); do
        if [ $((r % 2)) = 1 ]; then order="before after"; else order="after before"; fi
        for b in $order; do
            bin=$BEFORE; [ $b = after ] && bin=$AFTER
            start "$bin"
            idle=$(peak "$URL")
            t0=$(date +%s.%N)
            code=$(curl -s -o "$TMP/resp" -w '%{http_code}' --data-binary @"$body" -H 'Content-Type: application/json' "$URL/v1/prefill")
            t1=$(date +%s.%N)
            [ "$code" = 200 ] || { echo "HTTP $code: $(head -c 300 "$TMP/resp")" >&2; exit 1; }
            p=$(peak "$URL")
            kill $SRV; wait $SRV 2>/dev/null || true; SRV=
            line="$MODE,$n,$b,$r,$bytes,$idle,$p,$((p - idle)),$(python3 -c "print(round($t1-$t0,3))")"
            echo "$line" | tee -a "$CSV"
        done
    done
    rm -f "$body"
done
