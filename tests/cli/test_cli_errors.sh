#!/usr/bin/env bash
# test_cli_errors: a failing subcommand prints one error line that names the program and the
# subcommand exactly once ("pdbridge make-model: ...", never "pdbridge make-model: make-model: ...")
# and still names the file/field at fault; exit status 1, never a crash.
set -u
source "$(dirname "$0")/../common/pdb_e2e.sh"
pdb_e2e_init clierr

# expect_once NAME SUB NEEDLE... -- CMD: exit 1; exactly one stderr line starting "pdbridge SUB: "
# (log lines carry a timestamp first); "SUB:" occurs once in it; it contains each needle.
expect_once() {
  local name=$1 sub=$2; shift 2; local needles=()
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done; shift
  "$@" >"$T/out" 2>"$T/err" </dev/null; local rc=$?
  if [ $rc -ne 1 ]; then pdb_e2e_bad "$name: exit $rc (want 1): $(cat "$T/err")"; return; fi
  local lines; lines=$(grep -c "^pdbridge $sub: " "$T/err")
  if [ "$lines" -ne 1 ]; then pdb_e2e_bad "$name: $lines lines start 'pdbridge $sub: ' (want 1): $(cat "$T/err")"; return; fi
  local line; line=$(grep "^pdbridge $sub: " "$T/err")
  local n; n=$(grep -oF -- "$sub:" <<<"$line" | wc -l)
  if [ "$n" -ne 1 ]; then pdb_e2e_bad "$name: '$sub:' appears $n times: $line"; return; fi
  for nd in "${needles[@]}"; do
    grep -qF -- "$nd" <<<"$line" || { pdb_e2e_bad "$name: line lacks '$nd': $line"; return; }
  done
  pdb_e2e_ok "$name: $line"
}

touch "$T/file"
mkdir -p "$T/cfgdir/config.json" "$T/badtok"
echo '{bad' >"$T/badtok/tokenizer.json"
"$BIN" make-model --arch deepseek_v2 --preset tiny --seed 1 --out "$T/m" >/dev/null 2>&1 || pdb_e2e_bad "make-model tiny"
python3 - "$T/badids.safetensors" <<'PY'
import json, struct, sys
hdr = json.dumps({"input_ids": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}}).encode(); hdr += b" " * (-len(hdr) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(hdr)) + hdr + struct.pack("<2i", 5, 5000))
PY

# make-model: the library's messages begin with "make-model:"
expect_once "make-model bad preset" make-model "'bogus'" -- "$BIN" make-model --preset bogus --out "$T/x"
expect_once "make-model bad v4 preset" make-model "'bogus'" -- "$BIN" make-model --arch deepseek_v4 --preset bogus --out "$T/x"
expect_once "make-model bad arch" make-model "'gpt2'" -- "$BIN" make-model --arch gpt2 --out "$T/x"
expect_once "make-model bad format" make-model "--format 'fp3'" -- "$BIN" make-model --format fp3 --out "$T/x"
expect_once "make-model --out is a file" make-model "$T/file" -- "$BIN" make-model --preset tiny --out "$T/file"
expect_once "make-model cannot create config.json" make-model "$T/cfgdir/config.json" -- \
  "$BIN" make-model --preset tiny --out "$T/cfgdir"
# quantize: "quantize:"
expect_once "quantize missing --model dir" quantize "$T/nodir/config.json" -- "$BIN" quantize --model "$T/nodir" --out "$T/d"
expect_once "quantize bad scheme" quantize "'zz'" -- "$BIN" quantize --model "$T/m" --out "$T/d" --scheme zz
expect_once "quantize --out under a file" quantize "$T/file" -- "$BIN" quantize --model "$T/m" --out "$T/file/d"
# quantize replaces only its own outputs: a file or someone's directory as --out is refused, intact
echo keep >"$T/keep.txt"; mkdir -p "$T/mine"; echo notes >"$T/mine/notes.txt"
expect_once "quantize --out is a file" quantize "$T/keep.txt" "not a directory" -- "$BIN" quantize --model "$T/m" --out "$T/keep.txt"
expect_once "quantize --out is a foreign directory" quantize "notes.txt" -- "$BIN" quantize --model "$T/m" --out "$T/mine"
[ "$(cat "$T/keep.txt")" = keep ] && [ "$(cat "$T/mine/notes.txt")" = notes ] && pdb_e2e_ok "refused --out left intact" || pdb_e2e_bad "refused --out was modified"
"$BIN" quantize --model "$T/m" --out "$T/q" >/dev/null 2>&1 && "$BIN" quantize --model "$T/m" --out "$T/q" >/dev/null 2>&1 \
  && [ -f "$T/q/pdbridge_decoder.json" ] && pdb_e2e_ok "quantize replaces its own earlier output" || pdb_e2e_bad "quantize over its own output"
# forward: the V2 forward's messages begin with "forward:"
expect_once "forward id outside vocabulary" forward "5000" -- \
  "$BIN" forward --model "$T/m" --ids-file "$T/badids.safetensors" --decode 1 --out "$T/o"
expect_once "forward missing ids file" forward "$T/nope.safetensors" -- \
  "$BIN" forward --model "$T/m" --ids-file "$T/nope.safetensors" --decode 1 --out "$T/o"
# decode-server: a bad tokenizer.json is wrapped as "decode-server: : <message>"
expect_once "decode-server bad tokenizer.json" decode-server "$T/badtok/tokenizer.json" -- \
  "$BIN" decode-server --model "$T/badtok" --cache-dir "$T/c" --port 0
expect_once "decode-server missing model" decode-server "$T/nodir" -- \
  "$BIN" decode-server --model "$T/nodir" --cache-dir "$T/c" --port 0
"$BIN" decode-server --model "$T/m" --cache-dir "$T/c" --port 0 --weights disk >"$T/out" 2>"$T/err" </dev/null
rc=$?; [ $rc -eq 2 ] && grep -q "option '--weights' disk" "$T/err" && grep -q "^usage: pdbridge decode-server" "$T/err" &&
  pdb_e2e_ok "decode-server --weights disk: named, usage, exit 2" || pdb_e2e_bad "decode-server --weights disk: exit $rc: $(head -c 300 "$T/err")"
expect_once "prefill-server missing model" prefill-server "$T/nodir/config.json" -- \
  "$BIN" prefill-server --model "$T/nodir" --decoder-model "$T/nodir" --port 0
expect_once "front missing decoder model" front "$T/nodir" -- \
  "$BIN" front --decoder http://127.0.0.1:9 --prefill http://127.0.0.1:9 --decoder-model "$T/nodir" --cache-dir "$T/c" --port 0
expect_once "tokenize missing model" tokenize "$T/nodir" -- "$BIN" tokenize --model "$T/nodir"

pdb_e2e_finish
