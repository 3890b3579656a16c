#!/usr/bin/env bash
# test_verify_e2e: the exactness tools end to end (issue 6). A text prompt and a chat prompt are
# bridged through real servers on loopback (decode-server + CPU prefill-server + front; random
# "small" DeepSeek-V2 with the real tokenizer, decoder on unquantized weights) into one cache
# dir; a second decoder prefills the same prompts natively into another. Asserts: verify-blocks
# on the two dirs says every block identical (exit 0, "N/N identical" with the expected N);
# diff-state (completion and --chat) against the bridged dir finds every block bit-identical
# (exit 0); one flipped float in a copy makes verify-blocks exit 1 and report exactly 1
# differing element at 1 ulp; an MX-quantized decoder's native block against the unquantized
# one is reported as different (exit 1, with a count and ulps); diff-state with a decoder whose
# fingerprint has no blocks in the dir exits non-zero; pool-validate passes on the CPU and, for
# --backend cuda, passes on a GPU or refuses clearly (exit 3) without one; usage errors exit 2.
set -euo pipefail
source "$(dirname "$0")/../common/pdb_e2e.sh"
pdb_e2e_init verify
source "$(dirname "$0")/../common/pdb_verify_e2e.sh"
fail() { pdb_e2e_fail "$@"; }
start() { pdb_e2e_start "$@"; }

BS=128
pdb_verify_models --arch deepseek_v2 --preset small --seed 11
start native "$BIN" decode-server --model "$T/dec" --cache-dir "$T/cache-native" --port 0 --block-size $BS --threads 1
NATIVE=$URL
start mxnative "$BIN" decode-server --model "$T/mx" --cache-dir "$T/cache-mx" --port 0 --block-size $BS --threads 1
MXNATIVE=$URL
start dec "$BIN" decode-server --model "$T/dec" --cache-dir "$T/cache-bridged" --port 0 --block-size $BS --threads 1
DEC=$URL
start pre "$BIN" prefill-server --model "$T/hf" --decoder-model "$T/dec" --port 0 --backend cpu --threads 1 --chunk 100
PRE=$URL
start front "$BIN" front --decoder "$DEC" --prefill "$PRE" --decoder-model "$T/dec" --cache-dir "$T/cache-bridged" --port 0 \
    --block-size $BS --min-bridge-tokens 256 --min-tail 128
FRONT=$URL

# The prompts as files (their exact bytes are the prompt), then one request each to the front
# (must be bridged) and to the native decoders.
python3 tests/common/pdb_e2e_text.py prompts "$T" 7 520 400
NBLK=0
for kind in text chat; do
    pdb_verify_prompt $kind; f=$PF
    R=$(python3 tests/common/pdb_e2e_text.py ask "$FRONT" $kind "$f" auto) || fail "front request ($kind)"
    [ "$(j "$R" "d['verdict'].split(';')[0]")" = complete ] || fail "$kind prompt was not bridged: $R"
    n=$(j "$R" "d['prompt'] // $BS")
    [ "$n" -ge 2 ] || fail "$kind prompt too short for the test: $R"
    NBLK=$((NBLK + n))
    python3 tests/common/pdb_e2e_text.py ask "$NATIVE" $kind "$f" off >/dev/null || fail "native request ($kind)"
    python3 tests/common/pdb_e2e_text.py ask "$MXNATIVE" $kind "$f" off >/dev/null || fail "mx native request ($kind)"
    ok "$kind prompt bridged ($(j "$R" "d['verdict'].split(';')[0]"), $n blocks, $(j "$R" "d['prompt']") tokens)"
done
# the native decoders publish their blocks when their prefill ends: wait until all are there
pdb_verify_wait_blocks $NBLK "$T/cache-native" "$T/cache-mx"
[ "$(find "$T/cache-bridged" -name '*.pdbblk' | wc -l)" -eq $NBLK ] || fail "bridged dir holds $(find "$T/cache-bridged" -name '*.pdbblk' | wc -l) blocks, want $NBLK"

# 1. bridged dir == native dir, tensor by tensor
pdb_verify_identical "$T/cache-bridged" "$T/cache-native" $NBLK
echo "$OUT" | sed 's/^/     /'
[ "$(echo "$OUT" | grep -c '  identical (2 tensors')" -eq $NBLK ] || fail "verify-blocks: not one 'identical' line per block"
ok "verify-blocks: $NBLK/$NBLK bridged blocks identical to the decoder's own"
run "$BIN" verify-blocks "$T/cache-bridged" "$T/cache-native" --strict-meta
[ $RC -eq 0 ] || grep -q "created_at" <<<"$OUT" || fail "--strict-meta: a difference other than created_at: $OUT"
ok "verify-blocks --strict-meta: exit $RC (only created_at may differ)"

# 2. diff-state: the decoder's native state vs the mounted bridged blocks
for kind in text chat; do
    pdb_verify_prompt $kind
    run "$BIN" diff-state --model "$T/dec" --prompt-file "$PF" --cache-dir "$T/cache-bridged" $FLAG --threads 1
    echo "$OUT" | tail -2 | sed 's/^/     /'
    [ $RC -eq 0 ] || fail "diff-state ($kind): exit $RC: $OUT"
    grep -Eq "^blocks: ([0-9]+)/\1 found" <<<"$OUT" || fail "diff-state ($kind): not every block found"
    grep -q "worst |d| 0, worst rel 0" <<<"$OUT" || fail "diff-state ($kind): nonzero delta"
    ok "diff-state ($kind): every block of the prompt found and bit-identical"
done
run "$BIN" diff-state --model "$T/mx" --prompt-file "$T/prompt.txt" --cache-dir "$T/cache-bridged" --threads 1
[ $RC -eq 1 ] || fail "diff-state with a decoder that has no blocks here: exit $RC (want 1): $OUT"
grep -q "nothing was proven" <<<"$OUT" || fail "diff-state with no blocks: no explanation: $OUT"
ok "diff-state: a decoder with another fingerprint finds no block -> exit 1"
mkdir "$T/not-a-store"
run "$BIN" diff-state --model "$T/dec" --prompt-file "$T/prompt.txt" --cache-dir "$T/not-a-store"
[ $RC -eq 3 ] && grep -q "not-a-store: no store.json" <<<"$OUT" || fail "diff-state on a non-store dir: exit $RC: $OUT"
[ -z "$(ls -A "$T/not-a-store")" ] || fail "diff-state wrote into a non-store dir"
ok "diff-state: a directory without store.json is refused (exit 3), nothing written"

# 3. negative: one float flipped by one ulp in a copy (the file still parses)
cp -r "$T/cache-native" "$T/cache-flip"
VICTIM=$(find "$T/cache-flip" -name '*.pdbblk' | sort | head -1)
python3 - "$VICTIM" <<'PY'
import json, struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
pool = [k for k in h if k not in ("__metadata__", "tokens")][0]
off = 8 + n + h[pool]["data_offsets"][0] + 4 * 1000   # element 1000 of the pool
b[off] ^= 1                                           # lowest mantissa bit: exactly 1 ulp
open(p, "wb").write(b)
PY
run "$BIN" verify-blocks "$T/cache-flip" "$T/cache-native"
echo "$OUT" | grep -A1 DIFFERS | sed 's/^/     /'
[ $RC -eq 1 ] || fail "verify-blocks after a flipped float: exit $RC (want 1)"
grep -q "^$((NBLK - 1))/$NBLK identical" <<<"$OUT" || fail "flip: summary should be $((NBLK - 1))/$NBLK: $OUT"
grep -Eq "latent: values differ, 1/[0-9]+ elements differ .* worst 1 ulps \(F32\) = 1.52588e-05 bf16 ulps, 100.000000% within 1 bf16 ulp" <<<"$OUT" \
    || fail "flip: the difference count/ulps are not reported: $OUT"
ok "verify-blocks: one flipped float -> exit 1, 1 element at 1 ulp reported"
run "$BIN" verify-blocks "$VICTIM" "${VICTIM/cache-flip/cache-native}"
[ $RC -eq 1 ] && grep -q "^0/1 identical" <<<"$OUT" || fail "verify-blocks on two files: exit $RC: $OUT"
rm "$VICTIM"
run "$BIN" verify-blocks "$T/cache-flip" "$T/cache-native"
[ $RC -eq 1 ] && grep -q "only in B" <<<"$OUT" && grep -q "^$((NBLK - 1))/$NBLK identical (0 only in A, 1 only in B)" <<<"$OUT" \
    || fail "a block present on one side only: exit $RC: $OUT"
ok "verify-blocks: a block on one side only is reported and counts as not identical"

# 4. across precisions: MX decoder's native block 0 vs the unquantized decoder's (same tokens)
HS=$(python3 - "$T" <<'PY'
import glob, json, struct, sys
def first_blocks(d):   # tokens of block 0 -> path, for every prompt in the dir
    out = {}
    for p in glob.glob(d + "/*/*.pdbblk"):
        b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
        if h["__metadata__"]["block_index"] == "0":
            t0, t1 = h["tokens"]["data_offsets"]; out[b[8 + n + t0:8 + n + t1]] = p
    return out
a, b = first_blocks(sys.argv[1] + "/cache-native"), first_blocks(sys.argv[1] + "/cache-mx")
k = sorted(set(a) & set(b))[0]
print(a[k], b[k])
PY
)
run "$BIN" verify-blocks $HS
echo "$OUT" | grep latent | sed 's/^/     /'
[ $RC -eq 1 ] || fail "MX vs unquantized blocks: exit $RC (want 1): $OUT"
grep -Eq "latent: values differ, [0-9]+/[0-9]+ elements differ" <<<"$OUT" || fail "MX vs none: no difference report: $OUT"
grep -q "tokens: " <<<"$OUT" && fail "MX vs none: the tokens should be identical: $OUT"
ok "verify-blocks: MX decoder vs unquantized decoder reported as different, with counts and ulps"

# 5. pool-validate
run "$BIN" pool-validate --decoder-model "$T/dec" --model "$T/hf" --tokens 257 --seed 3 --threads 1
echo "$OUT" | tail -4 | sed 's/^/     /'
[ $RC -eq 0 ] && grep -q "^PASS" <<<"$OUT" || fail "pool-validate cpu: exit $RC: $OUT"
ok "pool-validate cpu: every row identical, whole/chunked/odd-chunked"
run "$BIN" pool-validate --decoder-model "$T/mx" --model "$T/hf" --tokens 64 --threads 1
[ $RC -eq 0 ] || fail "pool-validate cpu (MX decoder weights): exit $RC: $OUT"
pdb_verify_cuda pool-validate --decoder-model "$T/dec" --model "$T/hf" --tokens 300

# 6. usage errors
for args in "verify-blocks $T/nope $T/cache-native" "verify-blocks $T/cache-native $VICTIM.x" "verify-blocks $T/cache-native" \
            "verify-blocks $T/cache-native $HS" "diff-state --model $T/dec" "pool-validate --decoder-model $T/dec --backend tpu"; do
    run "$BIN" $args
    [ $RC -eq 2 ] || fail "'pdbridge $args': exit $RC, want 2: $OUT"
done
for sub in verify-blocks diff-state pool-validate; do grep -q "^exit:" <<<"$("$BIN" $sub --help)" || fail "$sub --help"; done
ok "usage errors exit 2; --help documents the exit codes"
echo "all verify end-to-end checks passed"
