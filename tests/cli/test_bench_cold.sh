#!/usr/bin/env bash
# test_bench_cold: `pdbridge bench-cold` against real servers on loopback: decode-server + CPU
# prefill-server + front, and a native decoder, on a one-layer random DeepSeek-V2 with the real
# tokenizer (preset small, --layers 1; decoder on unquantized weights), block 128, a ~1,500-token
# prompt. Checks: --help exits 0 and names every CSV column; the CSV gets its header once and a
# row per request: a `bridged` row with verdict complete and a `native` row, both with positive
# times to first token and totals, positive peak RSS of every server measured (the front row:
# front, decoder, prefill; the native row: its decoder), the needle column 0 or 1; a second run
# appends without a second header; a dead --front URL exits 1 naming the URL, and so does a dead
# --native URL; a bad option exits 2; with --native the native row's answer_equal says whether its
# answer's bytes equal the bridged one's (1 here: bridged = native on this model); --save-prompt
# writes exactly the prompt sent; --prompt-only needs no server, is deterministic per seed, keeps
# a prompt the top-level files can fill free of package files, and reaches 1,048,576 tokens by
# reading the packages' files too (it stopped at ~902K with the top level alone). No timing is
# asserted beyond "positive".
set -euo pipefail
source "$(dirname "$0")/../common/pdb_e2e.sh"
pdb_e2e_init benchcold
fail() { pdb_e2e_fail "$@"; }
start() { pdb_e2e_start "$@"; }
TOK=.cache/tokenizer/deepseek_v3/tokenizer.json  # installed by scripts/setup.sh
[ -f "$TOK" ] || { echo "skip: $TOK missing (scripts/setup.sh fetches it)"; exit 77; }

# --help and usage errors first (no servers needed)
"$BIN" bench-cold --help >"$T/help.txt" || fail "bench-cold --help exited $?"
for c in mode verdict prompt_tokens ttft_s total_s decode_tok_s bytes engine_ms transfer_ms write_ms \
         front_peak_rss_bytes decoder_peak_rss_bytes prefill_peak_rss_bytes needle; do
    grep -q "$c" "$T/help.txt" || fail "--help does not document the column $c"
done
set +e; "$BIN" bench-cold --front http://127.0.0.1:1 --tokens 100 --bogus 2>"$T/bad.txt"; rc=$?; set -e
[ "$rc" = 2 ] && grep -q -- "--bogus" "$T/bad.txt" || fail "a bad option: exit $rc, $(cat "$T/bad.txt")"
set +e; "$BIN" bench-cold --front http://127.0.0.1:1 --tokens 1500 --csv "$T/dead.csv" 2>"$T/dead.txt"; rc=$?; set -e
[ "$rc" = 1 ] && grep -q "http://127.0.0.1:1" "$T/dead.txt" || fail "a dead --front: exit $rc, $(cat "$T/dead.txt")"
[ ! -e "$T/dead.csv" ] || fail "a dead --front wrote a CSV"
echo "ok   --help exits 0 and documents the columns; a bad option exits 2; a dead --front exits 1 naming the URL"

# --prompt-only: no server; the same seed gives the same bytes; a small prompt uses top-level files only;
# a 2^20-token target is reached (top level, then the packages)
"$BIN" bench-cold --prompt-only --tokens 3000 --seed 5 --save-prompt "$T/p1.txt" >"$T/po.txt" 2>"$T/po.err" || fail "--prompt-only: $(cat "$T/po.err")"
"$BIN" bench-cold --prompt-only --tokens 3000 --seed 5 --save-prompt "$T/p2.txt" >/dev/null 2>&1 || fail "--prompt-only again"
cmp -s "$T/p1.txt" "$T/p2.txt" || fail "--prompt-only: the same seed gave different prompts"
grep -q "^prompt [0-9]* bytes, [0-9]* tokens of files (target 3000, seed 5)" "$T/po.txt" || fail "--prompt-only output: $(cat "$T/po.txt")"
! grep -q "^# ---- file [^ ]*/" "$T/p1.txt" || fail "a 3000-token prompt read a package's file: $(grep '^# ---- file' "$T/p1.txt" | head -3)"
set +e; "$BIN" bench-cold --prompt-only --tokens 3000 2>"$T/pobad.txt"; rc=$?; set -e
[ "$rc" = 2 ] && grep -q -- "--save-prompt" "$T/pobad.txt" || fail "--prompt-only without --save-prompt: exit $rc, $(cat "$T/pobad.txt")"
"$BIN" bench-cold --prompt-only --tokens 1048576 --seed 7 --save-prompt "$T/p1m.txt" >"$T/po1m.txt" 2>"$T/po1m.err" || fail "1M prompt: $(cat "$T/po1m.err")"
got=$(sed -n 's/^prompt [0-9]* bytes, \([0-9]*\) tokens of files.*/\1/p' "$T/po1m.txt")
[ "${got:-0}" -ge 1048576 ] || fail "a 1,048,576-token target gave ${got:-?} tokens: $(cat "$T/po1m.txt" "$T/po1m.err")"
grep -q "^# ---- file [^ ]*/" "$T/p1m.txt" || fail "the 1M prompt has no package file"
echo "ok   --prompt-only: deterministic, top-level files only at 3000 tokens, $got tokens (packages too) for 1,048,576"

pdb_e2e_model deepseek_v2 small 5 --layers 1 --tokenizer "$TOK"
BS=128
pdb_e2e_decoders $BS
start pre "$BIN" prefill-server --model "$T/hf" --decoder-model "$T/dec" --port 0 --backend cpu --threads 1
PRE=$URL
start front "$BIN" front --decoder "$DEC" --prefill "$PRE" --decoder-model "$T/dec" --cache-dir "$T/cache" --port 0 \
    --block-size $BS
FRONT=$URL

set +e; "$BIN" bench-cold --front "$FRONT" --native http://127.0.0.1:1 --tokens 1500 2>"$T/deadn.txt"; rc=$?; set -e
[ "$rc" = 1 ] && grep -q "native.*http://127.0.0.1:1" "$T/deadn.txt" || fail "a dead --native: exit $rc, $(cat "$T/deadn.txt")"
echo "ok   a dead --native exits 1 naming the URL (before any request)"

"$BIN" bench-cold --front "$FRONT" --native "$NATIVE" --tokens 1500 --seed 3 --max-tokens 8 --csv "$T/out.csv" \
    --ignore-eos --save-prompt "$T/sent.txt" >"$T/run.txt" 2>"$T/run.err" || fail "bench-cold: $(cat "$T/run.err")"
grep -q "^answer: bridged [0-9]* bytes fnv64 [0-9a-f]\{16\}, native [0-9]* bytes fnv64 [0-9a-f]\{16\}: equal$" "$T/run.txt" \
    || fail "no equal-answer line: $(cat "$T/run.txt")"
"$BIN" bench-cold --prompt-only --tokens 1500 --seed 3 --save-prompt "$T/built.txt" >/dev/null 2>&1 || fail "--prompt-only 1500"
cmp -s "$T/sent.txt" "$T/built.txt" || fail "--save-prompt's file differs from --prompt-only's for the same seed"
cat "$T/run.txt"
grep -q "first token after" "$T/run.err" || fail "no progress on stderr: $(cat "$T/run.err")"
grep -q "^time to first token: bridged .* / native " "$T/run.txt" || fail "no ratio line: $(cat "$T/run.txt")"

cat >"$T/check.py" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
want = int(sys.argv[2])
assert len(rows) == want, "%d rows, want %d" % (len(rows), want)
assert sum(1 for l in open(sys.argv[1]) if l.startswith("time_utc,")) == 1, "the header must appear once"
for r in rows:
    for k in ("ttft_s", "total_s"):
        assert float(r[k]) > 0, "%s %s = %s" % (r["mode"], k, r[k])
    assert r["needle"] in ("0", "1"), "needle = %r" % r["needle"]
    assert int(r["prompt_tokens"]) > 1200, "prompt_tokens %s for ~1500 asked" % r["prompt_tokens"]
    assert r["mode"] != "bridged" or r["verdict"] == "complete", "a bridged row must be complete: %s" % r
fr = [r for r in rows if r["mode"] == "bridged"]
na = [r for r in rows if r["mode"] == "native"]
assert fr and na, "modes: %s" % [r["mode"] for r in rows]
b = fr[0]
assert int(b["cached_tokens"]) == (int(b["prompt_tokens"]) - 1) // 128 * 128, "cached %s of %s" % (b["cached_tokens"], b["prompt_tokens"])
assert int(b["blocks_written"]) > 0 and b["blocks_written"] == b["blocks_requested"], b
for k in ("bytes", "engine_ms", "front_peak_rss_bytes", "decoder_peak_rss_bytes", "prefill_peak_rss_bytes"):
    assert float(b[k]) > 0, "bridged %s = %r" % (k, b[k])
n = na[0]
assert n["verdict"] == "native" and int(n["cached_tokens"]) == 0, n
assert float(n["decoder_peak_rss_bytes"]) > 0 and n["front_peak_rss_bytes"] == "" and n["bytes"] == "", n
assert n["prompt_tokens"] == b["prompt_tokens"], "the same prompt: %s vs %s" % (n["prompt_tokens"], b["prompt_tokens"])
assert n["answer_equal"] == "1" and b["answer_equal"] == "", "answer_equal: native %r, bridged %r" % (n["answer_equal"], b["answer_equal"])
assert int(b["answer_bytes"]) > 0 and len(b["answer_fnv64"]) == 16 and b["answer_fnv64"] == n["answer_fnv64"], (b, n)
print("ok   CSV: bridged row (complete, %s/%s cached, TTFT %s s, peak RSS front %s decoder %s prefill %s) and native row "
      "(TTFT %s s, decoder peak %s), needle %s/%s" % (b["cached_tokens"], b["prompt_tokens"], b["ttft_s"], b["front_peak_rss_bytes"],
      b["decoder_peak_rss_bytes"], b["prefill_peak_rss_bytes"], n["ttft_s"], n["decoder_peak_rss_bytes"], b["needle"], n["needle"]))
PY
python3 "$T/check.py" "$T/out.csv" 2 || fail "CSV: $(cat "$T/out.csv")"

# a second run (another seed: a cold prompt again) appends its row under the same header
"$BIN" bench-cold --front "$FRONT" --tokens 1500 --seed 4 --max-tokens 4 --chat --csv "$T/out.csv" >"$T/run2.txt" 2>"$T/run2.err" \
    || fail "bench-cold --chat: $(cat "$T/run2.err")"
python3 "$T/check.py" "$T/out.csv" 3 >/dev/null || fail "CSV after a second run: $(cat "$T/out.csv")"
python3 -c "import csv,sys; r=list(csv.DictReader(open(sys.argv[1])))[-1]; sys.exit(0 if r['endpoint']=='chat' and r['mode']=='bridged' else 1)" \
    "$T/out.csv" || fail "the chat row: $(tail -1 "$T/out.csv")"
echo "ok   a second run (--chat, another seed) appends a bridged row under the one header"
