#!/usr/bin/env bash
# Builds and runs v4_attn_emu (see its first comment) on small shapes of the test (1 to 4 key
# tiles, hd 64 / 80 / 128 / 512); prints one line each (the hd 512 one takes minutes).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); src=$here/../../../src/cuda/pdb_cuda_v4_attn.cu
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 - "$src" "$tmp/kern.inc" <<'PY'
import sys
s = open(sys.argv[1]).read()
a, b = s.index('template <class KT> struct v4_klist_t'), s.index('static int max_optin_smem')
c, d = s.index('enum { TC_Q'), s.index('int pdb_cuda_v4_attention_tc_fits')
e, f = s.index('enum { T16_PLD'), s.index('int pdb_cuda_v4_attention_tc16_fits')
open(sys.argv[2], 'w').write(s[a:b] + '\n' + s[c:d] + '\n' + s[e:f])
PY
g++ -std=c++20 -O1 -fno-strict-aliasing -w -pthread -I"$tmp" -o "$tmp/emu" "$here/v4_attn_emu.cpp"
for a in "0 4 64 8 0 0 0 5 6" "0 80 64 8 0 0 2 6 3" "1 16 128 8 16 0 7 30 6" "2 16 80 8 0 4 3 300 3" \
         "1 64 128 40 200 0 3 90 3" "1 80 512 70 150 0 5 200 2"; do
  "$tmp/emu" $a
done
