#!/usr/bin/env bash
# test_layering_check: the layering check catches what it must. On a copy of src/ and
# CMakeLists.txt it passes on the clean copy, then fails, naming each, on injected violations:
# an upward include (core including a front header), a sideways one from a new subfolder (store
# including a tokenizer header: subfolders are scanned), an upward one of a header in a new
# subfolder (core including it: subfolder headers are resolved to their component), and the
# front including the decoder's server header (PDB_OWN_decoder); and on nothing else.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=${PDB_SRC:-$(cd "$here/../.." && pwd)}
check="$here/pdb_layering_check.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cp -r "$root/src" "$tmp/src"
cp "$root/CMakeLists.txt" "$tmp/CMakeLists.txt"
python3 "$check" "$tmp" > "$tmp/clean.log" 2>&1 || { cat "$tmp/clean.log"; fail "the clean copy does not pass"; }

printf '#include "pdb_front.h"\n' >> "$tmp/src/core/pdb_status.c"
up_line=$(wc -l < "$tmp/src/core/pdb_status.c")
mkdir -p "$tmp/src/store/extra" "$tmp/src/model/sub"
printf '/* injected */\n#include "pdb_tokenizer.h"\n' > "$tmp/src/store/extra/pdb_injected.c"
printf '/* injected */\n' > "$tmp/src/model/sub/pdb_sub.h"
printf '#include "pdb_sub.h"\n' >> "$tmp/src/core/pdb_hash.h"
sub_line=$(wc -l < "$tmp/src/core/pdb_hash.h")
printf '#include "pdb_dec_server.h"\n' >> "$tmp/src/front/pdb_front_policy.c"
own_line=$(wc -l < "$tmp/src/front/pdb_front_policy.c")

rc=0
python3 "$check" "$tmp" > "$tmp/bad.log" 2>&1 || rc=$?
cat "$tmp/bad.log"
[ "$rc" = 1 ] || fail "the check exited $rc on injected violations (want 1)"
expect() { grep -qF -- "$1" "$tmp/bad.log" || fail "no line: $1"; }
expect "src/core/pdb_status.c:$up_line: #include \"pdb_front.h\": a header of front, which core may not include (upward: front depends on core"
expect "src/store/extra/pdb_injected.c:2: #include \"pdb_tokenizer.h\": a header of tokenizer, which store may not include (sideways: neither of store and tokenizer depends on the other"
expect "src/core/pdb_hash.h:$sub_line: #include \"pdb_sub.h\": a header of model, which core may not include (upward"
expect "src/front/pdb_front_policy.c:$own_line: #include \"pdb_dec_server.h\": a header of decoder that only decoder and cli may include"
n=$(grep -c '^src/' "$tmp/bad.log")
[ "$n" = 4 ] || fail "$n violation lines, want exactly the 4 injected"
echo "layering check: passes the clean copy, names each of the 4 injected violations"
