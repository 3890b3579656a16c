#!/usr/bin/env bash
# behaviour_snapshot: what a behaviour-preserving change must leave unchanged, written to OUT:
# for each fixture (V2 and V4, MX and unquantized decoders, V4 in both cache semantics) the
# decoder's logit hash (build/pdb_logit_hash: 64-token prefill + 24 greedy steps, at 1 and 2
# threads) and the blocks a CPU-bridged cold prompt wrote into the decoder's store (the prefill
# segments' bytes, through the decoder's block writer). Compare two snapshots with
#   tools/behaviour_snapshot.sh --compare OLD NEW
# (hash files must be equal; verify-blocks must say every block is identical, tensor by tensor).
# usage: tools/behaviour_snapshot.sh OUT   |   tools/behaviour_snapshot.sh --compare OLD NEW
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/build/pdbridge"; LH="$PWD/build/pdb_logit_hash"
if [ "${1:-}" = "--compare" ]; then
    old=$2 new=$3 bad=0
    for d in "$old"/*/; do
        f=$(basename "$d")
        if diff -q "$old/$f/hash.txt" "$new/$f/hash.txt" >/dev/null; then echo "ok   $f logit hashes equal: $(grep -h 'logit hash' "$old/$f/hash.txt" | sort -u | tr '\n' ' ')"
        else echo "FAIL $f logit hashes differ"; diff "$old/$f/hash.txt" "$new/$f/hash.txt" || true; bad=1; fi
        if out=$("$BIN" verify-blocks "$old/$f/cache" "$new/$f/cache" 2>&1); then echo "ok   $f blocks: $(echo "$out" | tail -1)"
        else echo "FAIL $f blocks: $(echo "$out" | tail -3)"; bad=1; fi
    done
    exit $bad
fi
OUT=${1:?usage: behaviour_snapshot.sh OUT}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
source tests/common/pdb_e2e.sh
pdb_e2e_init snapshot
BS=128
snap() { # name arch preset-or-golden scheme semantics
    local name=$1 arch=$2 src=$3 scheme=$4 sem=$5 hf="$T/$1-hf" dec="$T/$1-dec"
    if [ -d "$src" ]; then hf=$src; else "$BIN" make-model --arch "$arch" --preset "$src" --seed 7 --out "$hf" >/dev/null; fi
    local qa=(--model "$hf" --out "$dec" --scheme "$scheme")
    [ "$arch" = deepseek_v4 ] && qa+=(--v4-semantics "$sem")
    "$BIN" quantize "${qa[@]}" >/dev/null 2>&1
    rm -rf "${OUT:?}/$name"; mkdir -p "$OUT/$name"
    { "$LH" "$dec" --threads 1; "$LH" "$dec" --threads 2 --chunk 23; } >"$OUT/$name/hash.txt"
    pdb_e2e_start "$name-dec" "$BIN" decode-server --model "$dec" --cache-dir "$T/$name-cache" --port 0 --block-size $BS --threads 2
    local D=$URL
    pdb_e2e_start "$name-pre" "$BIN" prefill-server --model "$hf" --decoder-model "$dec" --port 0 --backend cpu --threads 2 --chunk 45
    local P=$URL
    pdb_e2e_start "$name-front" "$BIN" front --decoder "$D" --prefill "$P" --decoder-model "$dec" --cache-dir "$T/$name-cache" \
        --port 0 --block-size $BS --min-bridge-tokens 256 --min-tail 128
    local F=$URL
    python3 - "$F" "$hf/config.json" <<'PY' >"$OUT/$name/verdict.txt"
import json, sys, urllib.request, urllib.error
cfg = json.load(open(sys.argv[2]))
ids = [(i * 7919 + 13) % min(1000, cfg["vocab_size"]) for i in range(min(600, cfg["max_position_embeddings"] - 8))]
rq = urllib.request.Request(sys.argv[1] + "/v1/completions", headers={"Content-Type": "application/json", "X-PD-Bridge-Mode": "force"},
    data=json.dumps({"prompt": ids, "max_tokens": 4, "temperature": 0, "return_token_ids": True, "ignore_eos": True}).encode())
try:
    with urllib.request.urlopen(rq, timeout=600) as r:
        d = json.loads(r.read()); print(r.headers.get("X-PD-Bridge", "").split(";")[0], d["choices"][0]["token_ids"])
except urllib.error.HTTPError as e:
    sys.exit("request failed: %d %s" % (e.code, e.read().decode()))
PY
    cp -r "$T/$name-cache" "$OUT/$name/cache"
    echo "$name: $(cat "$OUT/$name/verdict.txt"); $(grep -c 'logit hash' "$OUT/$name/hash.txt") hashes; $(find "$OUT/$name/cache" -name '*.pdbblk' | wc -l) blocks"
}
snap v2-tiny-mx deepseek_v2 tiny mx -
snap v2-small-none deepseek_v2 small none -
snap v2-golden-b-mx deepseek_v2 tests/golden/v2/b_qlora_default_rope mx -
snap v4-tiny-official-mx deepseek_v4 tiny mx official
snap v4-tiny-exact-none deepseek_v4 tiny none exact
snap v4-golden-b-mx deepseek_v4 tests/golden/v4/b_hc2_flash_like mx official
