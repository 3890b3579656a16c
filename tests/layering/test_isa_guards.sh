#!/usr/bin/env bash
# test_isa_guards: nothing in src/, bench/ or tools/ uses x86 intrinsics (or NEON ones) outside a
# guard for its CPU (issue 20: the tree builds for aarch64), checked by pdb_isa_guard_check.py.
# The tree must pass; then the check must fail, naming file and line, on each injected violation
# in a scratch folder: an unguarded #include <immintrin.h>, an intrinsic under a negated guard
# (#if !defined(__x86_64__)), a NEON call in an x86 branch, an x86 target attribute after the
# #else of an x86 guard; and pass a correctly guarded file.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=${PDB_SRC:-$(cd "$here/../.." && pwd)}
check="$here/pdb_isa_guard_check.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

python3 "$check" "$root" || fail "the tree has CPU-specific code outside its guard (lines above)"

mkdir -p "$tmp/src"
cat > "$tmp/src/ok.c" <<'C'
/* _mm_pause() in a comment is fine */
#if defined(__x86_64__)
#include <immintrin.h>
static void a(void) { _mm_pause(); }
#elif defined(__aarch64__)
#include <arm_neon.h>
static float32x4_t b(float32x4_t v) { return vaddq_f32(v, v); }
#else
static void c(void) {}
#endif
C
python3 "$check" "$tmp" src >"$tmp/ok.log" || { cat "$tmp/ok.log"; fail "a guarded file is reported"; }

cat > "$tmp/src/bad.c" <<'C'
#include <immintrin.h>
#if !defined(__x86_64__)
static void a(void) { _mm_pause(); }
#endif
#ifdef __x86_64__
static float32x4_t b(float32x4_t v) { return vaddq_f32(v, v); }
#else
__attribute__((target("avx2"))) static void c(void) {}
#endif
C
rc=0
python3 "$check" "$tmp" src >"$tmp/bad.log" 2>&1 || rc=$?
cat "$tmp/bad.log"
[ "$rc" = 1 ] || fail "the check exits $rc on violations (want 1)"
for want in "bad.c:1: x86 intrinsics header" "bad.c:3: x86 intrinsic" "bad.c:6: NEON vector type" "bad.c:6: NEON intrinsic" \
            "bad.c:8: x86 target attribute"; do
    grep -q "src/$want" "$tmp/bad.log" || fail "not reported: $want"
done
grep -q "ok.c" "$tmp/bad.log" && fail "the guarded file is reported"
echo "test_isa_guards: the tree passes; the 5 injected violations are caught, the guarded file passes"
