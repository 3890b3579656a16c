#!/usr/bin/env bash
# test_bench_decode: the decode benchmark runs end to end on a tiny checkpoint and reports what it
# claims to: both figures of the roofline (conservative and paired rounds), the attention form
# asked for, the weights' residency, fewer pool runs per token with the per-(row, head) tasks than with the stages, the
# stage clock, the step-by-step a/b of two attention forms; bad options get the usage and exit 2; the V4 mode on a tiny
# deepseek_v4 checkpoint (it used to crash, exit 139, then was refused). (A smoke test: the numbers are not judged.)
set -u
source "$(dirname "$0")/../common/pdb_e2e.sh"
pdb_e2e_init bench
BENCH=${PDB_BUILD:-build}/bench_decode

"$BIN" make-model --preset tiny --seed 4 --out "$T/hf" >/dev/null 2>&1 &&
  "$BIN" quantize --model "$T/hf" --out "$T/mx" >/dev/null 2>&1 || { echo "FAIL setup: make-model/quantize"; exit 1; }

# run NAME ARGS...: bench_decode on the tiny model, 8 steps, 2 threads, a 4 MB probe
run() {
  local name=$1; shift
  "$BENCH" "$T/mx" 8 2 --probe-mb 4 "$@" >"$T/$name.out" 2>"$T/$name.err"
  local rc=$?
  [ $rc -eq 0 ] || { pdb_e2e_bad "$name: exit $rc: $(cat "$T/$name.err")"; return 1; }
}
# pool runs per token from a run's output
runs_of() { sed -n 's/^dispatches: \([0-9.]*\) pool runs per token$/\1/p' "$T/$1.out"; }

if run tasks --attn tasks --rounds 2; then
  grep -q "attention tasks (forced)" "$T/tasks.out" && pdb_e2e_ok "tasks: the form is named" || pdb_e2e_bad "tasks: no 'attention tasks (forced)'"
  grep -Eq "^decode: 8 tokens in .* tok/s .* of the roofline" "$T/tasks.out" && pdb_e2e_ok "tasks: conservative figure" || pdb_e2e_bad "tasks: no decode line"
  grep -Eq "^paired rounds: 2 x \(probe, 4 steps\): fraction of the roofline per round median [0-9.]+%" "$T/tasks.out" &&
    pdb_e2e_ok "tasks: paired figure over 2 rounds" || pdb_e2e_bad "tasks: no paired rounds line: $(grep paired "$T/tasks.out")"
  grep -q "no memory roofline" "$T/tasks.out" && pdb_e2e_ok "tasks: a small probe is flagged" || pdb_e2e_bad "tasks: the small probe is not flagged"
fi
if run stages --attn stages; then
  grep -q "attention stages (forced)" "$T/stages.out" && pdb_e2e_ok "stages: the form is named" || pdb_e2e_bad "stages: no 'attention stages (forced)'"
  a=$(runs_of tasks); b=$(runs_of stages)
  if [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { exit !(a + 0 < b + 0) }'; then
    pdb_e2e_ok "pool runs per token: tasks $a < stages $b"
  else
    pdb_e2e_bad "pool runs per token: tasks '$a', stages '$b'"
  fi
fi
for wm in resident mmap; do
  if run "w_$wm" --weights $wm --rounds 1; then
    what=$([ $wm = mmap ] && echo "mmap'd" || echo resident)
    grep -Eq "^pages: weights $what, [0-9]+ of [0-9]+ MB in huge pages; probe" "$T/w_$wm.out" &&
      pdb_e2e_ok "--weights $wm: reported" || pdb_e2e_bad "--weights $wm: no pages line: $(grep pages "$T/w_$wm.out")"
  fi
done
if run trace --trace --rounds 2; then
  grep -Eq "^trace: [0-9]+ dispatches over 4 steps" "$T/trace.out" && grep -Eq "threads busy +[0-9.]+%, waiting to start +[0-9.]+%, done and waiting +[0-9.]+%" "$T/trace.out" &&
    pdb_e2e_ok "--trace: dispatch time split reported" || pdb_e2e_bad "--trace: no report: $(grep -A3 '^trace' "$T/trace.out")"
fi
if run ab --ab split --rounds 2; then
  grep -Eq "^a/b: attention split tasks \(forced\) on odd steps [0-9.]+ tok/s, auto on even steps [0-9.]+ tok/s \(4 and 4 steps\); per round odd/even speed median [0-9.]+" "$T/ab.out" &&
    pdb_e2e_ok "--ab: both forms timed" || pdb_e2e_bad "--ab: no a/b line: $(grep '^a/b' "$T/ab.out")"
  grep -q "attention auto$" "$T/ab.out" && pdb_e2e_ok "--ab: the base form is named" || pdb_e2e_bad "--ab: base form: $(grep '^threads' "$T/ab.out")"
fi
if run phases --context 20 --phases; then
  grep -q "context 20 + 8 steps" "$T/phases.out" && pdb_e2e_ok "phases: the context is used" || pdb_e2e_bad "phases: context not reported"
  grep -Eq "gate/up products \+ SiLU +[0-9.]+ ms" "$T/phases.out" && pdb_e2e_ok "phases: stage clock printed" || pdb_e2e_bad "phases: no stage clock"
fi

for args in "--rounds 0" "--attn sideways" "--ab" "--ab diagonal" "--probe-mb 0" "--context 0" "--weights disk" "--probe-pages tiny" \
            "--ctx 1,x" "--batch 0" "--fill foo" "--prefill 0" "--batch-steps 0" "--fill-base 0"; do
  # shellcheck disable=SC2086
  "$BENCH" "$T/mx" 4 1 $args >"$T/u.out" 2>"$T/u.err"
  rc=$?
  if [ $rc -eq 2 ] && grep -q "^usage: bench_decode" "$T/u.err"; then pdb_e2e_ok "bad option '$args': usage, exit 2"
  else pdb_e2e_bad "bad option '$args': exit $rc, $(head -c 200 "$T/u.err")"; fi
done

# V4 mode on the tiny V4 preset (sliding, CSA with its indexer, HCA, hash routing; window 8, top-4):
# the roofline at a short context and at two longer ones (a synthetic fill from mounted blocks and the
# decoder's own prefill), 1/4/16 sequences per forward bit-identical to each alone, the prefill rate;
# a corrupted reference must be reported (exit 3); V2-only options are refused on V4 and V4 ones on V2.
if "$BIN" make-model --arch deepseek_v4 --preset tiny --seed 4 --out "$T/v4hf" >/dev/null 2>&1 &&
  "$BIN" quantize --model "$T/v4hf" --out "$T/v4mx" >/dev/null 2>&1; then
  v4run() { # NAME ARGS...: the V4 mode, 8 steps, 2 threads, a 4 MB probe
    local name=$1; shift
    "$BENCH" "$T/v4mx" 8 2 --probe-mb 4 --rounds 2 --context 16 "$@" >"$T/$name.out" 2>"$T/$name.err"
  }
  v4run v4 --ctx 256,512 --batch 1,4,16 --batch-steps 2 --prefill 256; rc=$?
  if [ $rc -eq 0 ]; then
    for ctx in 16 256 512; do
      grep -A3 "^decode at context $ctx: positions" "$T/v4.out" |
        grep -Eq "^  roofline: [0-9.]+ GB/s read = [0-9.]+% of the run's best probe .* fraction per round median [0-9.]+%" &&
        pdb_e2e_ok "v4: roofline figure at context $ctx" || pdb_e2e_bad "v4: no roofline at context $ctx: $(grep -A2 "context $ctx:" "$T/v4.out")"
    done
    # the tiny model decoding positions 513..520: 4 layers x 8 window rows; CSA top-4 of 128-130 entries + HCA's
    # (p+1)/16 = 32 entries; all (p+1)/4 = 128, 128, 129 x 4, 130, 130 indexer keys (mean 129) of the one CSA layer
    rows=$(grep -A2 "^decode at context 512" "$T/v4.out" | sed -n 's/^  cache rows read per token, all layers (mean): window \([0-9.]*\), compressed entries attended \([0-9.]*\), indexer keys scored \([0-9.]*\)$/\1 \2 \3/p')
    if [ -n "$rows" ] && awk -v r="$rows" 'BEGIN { split(r, a, " "); exit !(a[1] == 32 && a[2] == 36 && a[3] == 129) }'; then
      pdb_e2e_ok "v4: cache rows at 512 ($rows)"
    else pdb_e2e_bad "v4: cache rows at 512: '$rows'"; fi
    grep -q "^fill 256: synthetic, 2 blocks mounted with pdb_dec_seq_put_block" "$T/v4.out" &&
      pdb_e2e_ok "v4: synthetic fill through put_block" || pdb_e2e_bad "v4: no synthetic fill line"
    for n in " 1" " 4" "16"; do
      grep -Eq "^batch $n: 2 steps of ${n# } sequences in one pdb_dec_forward each: .* tok/s aggregate .*; logits identical to each sequence alone" "$T/v4.out" &&
        pdb_e2e_ok "v4: batch $n identical" || pdb_e2e_bad "v4: batch $n: $(grep "^batch $n" "$T/v4.out")"
    done
    grep -Eq "^prefill: 256 tokens by the decoder's own forward .* = [0-9.]+ tok/s" "$T/v4.out" &&
      pdb_e2e_ok "v4: prefill rate" || pdb_e2e_bad "v4: no prefill line"
    grep -q "^weights read per token, as stored: " "$T/v4.out" && grep -q "stage clocks: none" "$T/v4.out" &&
      pdb_e2e_ok "v4: bytes per token and the clock's scope named" || pdb_e2e_bad "v4: no weights/stage line"
  else pdb_e2e_bad "v4: exit $rc: $(head -c 300 "$T/v4.err")"; fi
  v4run v4fill --ctx 200 --fill prefill --batch none; rc=$?
  [ $rc -eq 0 ] && grep -q "^fill 200: the decoder's own prefill" "$T/v4fill.out" && grep -q "^decode at context 200: positions 201..208" "$T/v4fill.out" &&
    pdb_e2e_ok "v4: --fill prefill at an unaligned context" || pdb_e2e_bad "v4: --fill prefill: exit $rc $(head -c 300 "$T/v4fill.err")"
  v4run v4bad --batch 4 --batch-steps 2 --perturb-check; rc=$?
  [ $rc -eq 3 ] && grep -q "^batch  4: .* logits DIFFER: first at sequence 1, step 1" "$T/v4bad.out" &&
    pdb_e2e_ok "v4: a difference is named, exit 3" || pdb_e2e_bad "v4: --perturb-check: exit $rc, $(grep '^batch' "$T/v4bad.out")"
  v4run v4unal --ctx 200; rc=$?
  [ $rc -eq 2 ] && grep -q "a synthetic fill mounts whole blocks of 128 tokens" "$T/v4unal.err" &&
    pdb_e2e_ok "v4: unaligned synthetic context refused" || pdb_e2e_bad "v4: --ctx 200: exit $rc $(head -c 200 "$T/v4unal.err")"
  for args in "--phases" "--classes" "--attn tasks" "--ab split" "--trace"; do
    # shellcheck disable=SC2086
    "$BENCH" "$T/v4mx" 4 1 --probe-mb 4 $args >"$T/u4.out" 2>"$T/u4.err"; rc=$?
    [ $rc -eq 2 ] && grep -q "is a deepseek_v4 checkpoint; --attn, --ab, --classes, --phases and --trace" "$T/u4.err" &&
      pdb_e2e_ok "v4: '$args' refused, exit 2" || pdb_e2e_bad "v4: '$args': exit $rc, $(head -c 200 "$T/u4.err")"
  done
  "$BENCH" "$T/mx" 4 1 --probe-mb 4 --ctx 256 >"$T/u2.out" 2>"$T/u2.err"; rc=$?
  [ $rc -eq 2 ] && grep -q "is a deepseek_v2 checkpoint; --ctx, --batch" "$T/u2.err" &&
    pdb_e2e_ok "v2: --ctx refused, exit 2" || pdb_e2e_bad "v2: --ctx: exit $rc, $(head -c 200 "$T/u2.err")"
else pdb_e2e_bad "setup: make-model/quantize of deepseek_v4 tiny"; fi

"$BENCH" --help >"$T/h.out" 2>&1 && grep -q "^usage: bench_decode" "$T/h.out" && pdb_e2e_ok "--help: usage, exit 0" || pdb_e2e_bad "--help"

pdb_e2e_finish
