#!/usr/bin/env bash
# test_layering: the sources keep the layering of CMakeLists.txt's PDB_DEPS_<comp> table (label
# `layering`): every #include "..." of src/ names a header of the including file's component or
# of one it may depend on. Fails with one line per violation (pdb_layering_check.py).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=${PDB_SRC:-$(cd "$here/../.." && pwd)}
exec python3 "$here/pdb_layering_check.py" "$root"
