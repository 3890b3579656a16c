#!/usr/bin/env python3
"""pdb_layering_check: the build's layering, checked on the sources.

Reads the table of allowed dependencies from ROOT/CMakeLists.txt (the set(PDB_DEPS_<comp> ...)
lines, the one source of truth, and set(PDB_OWN_<comp> ...): headers of <comp> that only <comp>
and cli may include), scans every #include "..." of ROOT/src/**/*.{c,h,cu,cuh}, resolves each to
the component owning the header (every file under src/<comp>/, subfolders included, belongs to
<comp>) and prints one line per include the table does not allow:
    src/<file>:<line>: #include "<header>": <why>
Invariants: an include is resolved as the compiler resolves it (the including file's folder
first, then the header's unique owner in src/); an include of no file of src/ (a system or
test header) is not ours and passes; a header name found in two components is a violation
(which one the compiler takes depends on include order); a folder of src/ without a PDB_DEPS_
line is a violation. Exit 0: no violation; 1: violations (listed); 2: the table cannot be read.
Usage: pdb_layering_check.py [ROOT]   (ROOT: the repository root; default: two levels up)
"""
import os
import re
import sys

SRC_EXT = (".c", ".h", ".cu", ".cuh")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def read_table(cmake_path):
    text = open(cmake_path, encoding="utf-8").read()
    text = re.sub(r"#[^\n]*", "", text)  # CMake comments (the table's copy in prose included)
    deps = {m.group(1): m.group(2).split() for m in re.finditer(r"\bset\(\s*PDB_DEPS_(\w+)([^)]*)\)", text)}
    own = {m.group(1): set(m.group(2).split()) for m in re.finditer(r"\bset\(\s*PDB_OWN_(\w+)([^)]*)\)", text)}
    return deps, own


def closure(deps, c, seen=None):
    """Every component c depends on, directly or through others."""
    seen = set() if seen is None else seen
    for d in deps.get(c, []):
        if d not in seen:
            seen.add(d)
            closure(deps, d, seen)
    return seen


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    src = os.path.join(root, "src")
    deps, own = read_table(os.path.join(root, "CMakeLists.txt"))
    if not deps:
        print(f"layering: no set(PDB_DEPS_<comp> ...) in {root}/CMakeLists.txt", file=sys.stderr)
        return 2
    bad = []
    files = []  # (path relative to root, component)
    for comp in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, comp)):
            continue
        if comp not in deps:
            bad.append(f"src/{comp}/: a component folder without set(PDB_DEPS_{comp} ...) in CMakeLists.txt")
        for dirpath, dirnames, names in os.walk(os.path.join(src, comp)):
            dirnames.sort()
            for n in sorted(names):
                files.append((os.path.relpath(os.path.join(dirpath, n), root), comp))
    owner_of = dict(files)
    n_inc = 0
    for rel, comp in files:
        if not rel.endswith(SRC_EXT):
            continue
        allowed = set(deps.get(comp, [])) | {comp}
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                n_inc += 1
                local = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
                if local in owner_of:
                    owners = {owner_of[local]}
                else:
                    owners = {c for p, c in files if p.endswith("/" + inc)}
                if not owners:
                    continue  # not a file of src/: a system or test header
                where = f'{rel}:{lineno}: #include "{inc}"'
                if len(owners) > 1:
                    bad.append(f"{where}: a header of several components ({', '.join(sorted(owners))}); "
                               f"which one is included depends on the include order")
                    continue
                o = owners.pop()
                if o not in allowed:
                    if comp in closure(deps, o):
                        why = f"upward: {o} depends on {comp}"
                    elif o in closure(deps, comp):
                        why = f"{o} is only a dependency of {comp}'s dependencies, not in PDB_DEPS_{comp}"
                    else:
                        why = f"sideways: neither of {comp} and {o} depends on the other"
                    bad.append(f"{where}: a header of {o}, which {comp} may not include ({why}; "
                               f"{comp} may include: {' '.join(deps.get(comp, [])) or 'nothing'})")
                elif o != comp and comp != "cli" and os.path.basename(inc) in own.get(o, set()):
                    bad.append(f"{where}: a header of {o} that only {o} and cli may include (PDB_OWN_{o})")
    for b in bad:
        print(b)
    if bad:
        print(f"layering: {len(bad)} violation(s) of the table in CMakeLists.txt", file=sys.stderr)
        return 1
    print(f"layering: {len(files)} files, {n_inc} includes, all within the table of CMakeLists.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
