#!/usr/bin/env python3
"""pdb_isa_guard_check: no CPU-specific code outside a guard for its CPU (issue 20).

Scans every .c/.h under the given folders (default: src, bench, tools of the repository root)
with comments removed, following the preprocessor's #if/#ifdef/#elif/#else/#endif nesting. A line
is x86-guarded when some enclosing branch's condition names __x86_64__, __i386__ or PDB_QMAT_X86
without negating it (pdb_qmat.c defines PDB_QMAT_X86 only under defined(__x86_64__)), and
aarch64-guarded likewise for __aarch64__, __arm__, __ARM_NEON or PDB_QMAT_HAVE_NEON. It reports,
as FILE:LINE: what, every x86 intrinsic header include (immintrin.h and the other *intrin.h,
cpuid.h), _mm*_ intrinsic call, __m128/__m256/__m512 type, __builtin_ia32_* / __builtin_cpu_*
call and target("avx..."/"sse..."/"fma"...) attribute outside an x86 guard, and every arm_neon.h
include, NEON vector type or NEON intrinsic call outside an aarch64 guard. Exit 0 when there are
none, 1 otherwise.
usage: pdb_isa_guard_check.py ROOT [DIR ...]
"""
import os
import re
import sys

X86_GUARD = re.compile(r'(!\s*)?(?:defined\s*\(?\s*)?\b(__x86_64__|__i386__|PDB_QMAT_X86)\b')
ARM_GUARD = re.compile(r'(!\s*)?(?:defined\s*\(?\s*)?\b(__aarch64__|__arm__|__ARM_NEON|PDB_QMAT_HAVE_NEON)\b')


def guards(rx, cond):
    """Whether the condition names one of rx's macros other than negated (!defined(X), !X)."""
    return any(not m.group(1) for m in rx.finditer(cond))
X86_CODE = [
    (re.compile(r'#\s*include\s*<(\w*intrin\.h|cpuid\.h)>'), 'x86 intrinsics header'),
    (re.compile(r'\b_mm(?:256|512)?_\w+\s*\('), 'x86 intrinsic'),
    (re.compile(r'\b__m(?:128|256|512)[a-z]*\b'), 'x86 vector type'),
    (re.compile(r'\b__builtin_(?:ia32_\w+|cpu_supports|cpu_init)\b'), 'x86 builtin'),
    (re.compile(r'\btarget\s*\(\s*"(?:avx|sse|fma|bmi|f16c)'), 'x86 target attribute'),
]
ARM_CODE = [
    (re.compile(r'#\s*include\s*<arm_neon\.h>'), 'NEON header'),
    (re.compile(r'\b(?:float|u?int)(?:8|16|32|64)x\d+(?:x\d)?_t\b'), 'NEON vector type'),
    (re.compile(r'\bv\w+q?_(?:f32|f64|[us](?:8|16|32|64))\s*\('), 'NEON intrinsic'),
]


def strip_comments(text):
    """Comments replaced by spaces (newlines kept, so line numbers stay); strings left alone."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(''.join(c if c == '\n' else ' ' for c in text[i:j]))
            i = j
        elif text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            i = j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"' and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return ''.join(out)


def check_file(path, rel):
    problems = []
    text = strip_comments(open(path, encoding='utf-8', errors='replace').read())
    stack = []  # per #if level: (x86, arm) of the branch we are in
    lines = text.split('\n')
    k = 0
    while k < len(lines):
        line, lineno = lines[k], k + 1
        while line.endswith('\\') and k + 1 < len(lines):  # continued directive
            k += 1
            line = line[:-1] + lines[k]
        k += 1
        d = re.match(r'\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)', line)
        if d:
            kind, cond = d.group(1), d.group(2)
            if kind in ('if', 'ifdef'):
                stack.append((guards(X86_GUARD, cond), guards(ARM_GUARD, cond)))
            elif kind == 'ifndef':
                stack.append((False, False))
            elif kind == 'elif' and stack:
                stack[-1] = (guards(X86_GUARD, cond), guards(ARM_GUARD, cond))
            elif kind == 'else' and stack:
                stack[-1] = (False, False)
            elif kind == 'endif' and stack:
                stack.pop()
            continue
        x86 = any(s[0] for s in stack)
        arm = any(s[1] for s in stack)
        for rx, what in X86_CODE if not x86 else []:
            m = rx.search(line)
            if m:
                problems.append(f'{rel}:{lineno}: {what} outside an x86 guard: {m.group(0).strip()}')
        for rx, what in ARM_CODE if not arm else []:
            m = rx.search(line)
            if m:
                problems.append(f'{rel}:{lineno}: {what} outside an aarch64 guard: {m.group(0).strip()}')
    return problems


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ('-h', '--help'):
        print(__doc__.strip())
        return 0 if len(sys.argv) >= 2 else 2
    root = sys.argv[1]
    dirs = sys.argv[2:] or ['src', 'bench', 'tools']
    problems, files = [], 0
    for d in dirs:
        for base, _, names in os.walk(os.path.join(root, d)):
            for name in sorted(names):
                if name.endswith(('.c', '.h')):
                    path = os.path.join(base, name)
                    files += 1
                    problems += check_file(path, os.path.relpath(path, root))
    for p in problems:
        print(p)
    print(f'pdb_isa_guard_check: {files} files, {len(problems)} CPU-specific lines outside their guard')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
