#!/usr/bin/env bash
# test_cli_model: `pdbridge make-model` + `pdbridge forward` end to end, and every kind of bad
# model input answered with exit 1 and a message naming the file and tensor/field, never a crash.
set -u
source "$(dirname "$0")/../common/pdb_e2e.sh"
pdb_e2e_init cli

# expect_fail NAME NEEDLE... -- CMD: exit status 1 (not a crash) and stderr containing each needle
expect_fail() {
  local name=$1; shift; local needles=()
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done; shift
  "$@" >"$T/out" 2>"$T/err"; local rc=$?
  if [ $rc -ne 1 ]; then pdb_e2e_bad "$name: exit $rc (want 1): $(cat "$T/err")"; return; fi
  for n in "${needles[@]}"; do
    grep -qF -- "$n" "$T/err" || { pdb_e2e_bad "$name: message lacks '$n': $(cat "$T/err")"; return; }
  done
  pdb_e2e_ok "$name"
}

for sub in tokenize make-model forward generate info; do
  "$BIN" $sub --help >/dev/null 2>&1 && pdb_e2e_ok "$sub --help" || pdb_e2e_bad "$sub --help"
done

"$BIN" make-model --arch deepseek_v2 --preset tiny --seed 3 --out "$T/m" >/dev/null || pdb_e2e_bad "make-model"
python3 - "$T/ids.safetensors" <<'PY'
import json, struct, sys
ids = [(i * 37 + 11) % 1000 for i in range(50)]
hdr = json.dumps({"input_ids": {"dtype": "I32", "shape": [len(ids)], "data_offsets": [0, 4 * len(ids)]}}).encode()
hdr += b" " * (-len(hdr) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(hdr)) + hdr + struct.pack("<%di" % len(ids), *ids))
PY
if "$BIN" forward --model "$T/m" --ids-file "$T/ids.safetensors" --decode 4 --out "$T/out.safetensors" 2>"$T/err"; then
  python3 - "$T/out.safetensors" <<'PY' && pdb_e2e_ok "forward output shapes" || pdb_e2e_bad "forward output shapes"
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
assert h["prefill_logits"]["shape"] == [50, 1000] and h["prefill_logits"]["dtype"] == "F32"
assert h["decode_tokens"]["shape"] == [4] and h["decode_tokens"]["dtype"] == "I32"
assert h["decode_logits"]["shape"] == [4, 1000]
PY
else pdb_e2e_bad "forward: $(cat "$T/err")"; fi

# chunked prefill gives the same greedy continuation
"$BIN" forward --model "$T/m" --ids-file "$T/ids.safetensors" --decode 4 --chunk 7 --out "$T/out7.safetensors" 2>/dev/null
python3 - "$T/out.safetensors" "$T/out7.safetensors" <<'PY' && pdb_e2e_ok "forward --chunk 7 same tokens" || pdb_e2e_bad "forward --chunk 7"
import json, struct, sys
def toks(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])["decode_tokens"]
    s, e = h["data_offsets"]; return b[8 + n + s:8 + n + e]
assert toks(sys.argv[1]) == toks(sys.argv[2])
PY

M=$T/m/model.safetensors
mkbad() { rm -rf "$T/b"; cp -r "$T/m" "$T/b"; }
# truncated file
mkbad; head -c 5000 "$M" > "$T/b/model.safetensors"
expect_fail "truncated safetensors" "model.safetensors" -- "$BIN" forward --model "$T/b" --ids-file "$T/ids.safetensors" --decode 1 --out "$T/x"
# header lying about offsets
mkbad; python3 - "$T/b/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); h["model.norm.weight"]["data_offsets"][1] += 10**9
nh = json.dumps(h).encode(); nh += b" " * (-len(nh) % 8)
open(p, "wb").write(struct.pack("<Q", len(nh)) + nh + b[8 + n:])
PY
expect_fail "offsets past the end" "model.safetensors" "model.norm.weight" -- "$BIN" forward --model "$T/b" --ids-file "$T/ids.safetensors" --decode 1 --out "$T/x"
# missing tensor and wrong shape
for mode in missing shape; do
mkbad; python3 - "$T/b/model.safetensors" $mode <<'PY'
import json, struct, sys
p, mode = sys.argv[1], sys.argv[2]; b = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); name = "model.layers.1.self_attn.kv_b_proj.weight"
if mode == "missing": h["model.layers.1.self_attn.kv_b_proj.weightX"] = h.pop(name)
else: h[name]["shape"] = [h[name]["shape"][1], h[name]["shape"][0]]
nh = json.dumps(h).encode(); nh += b" " * (-len(nh) % 8)
open(p, "wb").write(struct.pack("<Q", len(nh)) + nh + b[8 + n:])
PY
expect_fail "tensor $mode" "model.layers.1.self_attn.kv_b_proj.weight" -- "$BIN" forward --model "$T/b" --ids-file "$T/ids.safetensors" --decode 1 --out "$T/x"
done
# unknown architecture, impossible config values
mkbad; sed -i 's/"deepseek_v2"/"gpt2"/' "$T/b/config.json"
expect_fail "unknown architecture" "config.json" "gpt2" -- "$BIN" forward --model "$T/b" --ids-file "$T/ids.safetensors" --decode 1 --out "$T/x"
mkbad; sed -i 's/"num_attention_heads": [0-9]*/"num_attention_heads": 0/' "$T/b/config.json"
expect_fail "impossible config" "config.json" "num_attention_heads" -- "$BIN" forward --model "$T/b" --ids-file "$T/ids.safetensors" --decode 1 --out "$T/x"
# ids outside the vocabulary, missing ids file
python3 - "$T/badids.safetensors" <<'PY'
import json, struct, sys
hdr = json.dumps({"input_ids": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}}).encode(); hdr += b" " * (-len(hdr) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(hdr)) + hdr + struct.pack("<2i", 5, 5000))
PY
expect_fail "token id outside vocabulary" "5000" -- "$BIN" forward --model "$T/m" --ids-file "$T/badids.safetensors" --decode 1 --out "$T/x"
expect_fail "missing ids file" "nope.safetensors" -- "$BIN" forward --model "$T/m" --ids-file "$T/nope.safetensors" --decode 1 --out "$T/x"

pdb_e2e_finish
