#!/usr/bin/env bash
# Builds and runs v4_attn_emu (see its first comment) on the test's small shapes; prints one line each.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); src=$here/../../../src/cuda/pdb_cuda_v4_attn.cu
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 - "$src" "$tmp/kern.inc" <<'PY'
import sys
s = open(sys.argv[1]).read()
a, b = s.index('typedef struct v4_klist'), s.index('static int max_optin_smem')
c, d = s.index('enum { TC_Q'), s.index('int pdb_cuda_v4_attention_tc_fits')
open(sys.argv[2], 'w').write(s[a:b] + '\n' + s[c:d])
PY
g++ -std=c++20 -O1 -fno-strict-aliasing -w -pthread -I"$tmp" -o "$tmp/emu" "$here/v4_attn_emu.cpp"
for a in "0 4 64 8 0 0 0 5 40" "0 16 128 8 0 0 13 20 41" "0 80 64 8 0 0 2 6 37" "1 4 64 8 4 0 0 9 40" \
         "1 16 128 8 16 0 7 30 40" "1 16 64 8 13 0 1 3 39" "2 4 64 8 0 4 0 17 40" "2 16 128 8 0 8 5 100 40"; do
  "$tmp/emu" $a
done
