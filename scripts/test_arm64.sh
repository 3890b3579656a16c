#!/usr/bin/env bash
# test_arm64: the decoder on aarch64, checked on this x86-64 machine (`make test-arm64`, part of
# `make test`): cross-builds the whole tree for aarch64 (cmake/aarch64-linux-gnu.cmake: Debian's
# gcc-aarch64-linux-gnu and the arm64 multiarch -dev packages that scripts/setup.sh installs) in
# $ARM_BUILD, runs the core, store, tokenizer and decoder unit tests under qemu-aarch64, then
# compares aarch64 with the x86-64 build of THIS run ($BUILD, built first by make):
#   1. the kernel digest (tools/pdb_kernel_digest.c: every fixed-order kernel on seeded data) of
#      every ISA on both CPUs (x86: scalar, AVX2, AVX-512 as present; aarch64: scalar, NEON);
#   2. the decoder's logit hashes (tools/pdb_logit_hash.c: a 64-token prefill and 24 greedy steps,
#      each step's logits hashed) on V2 and V4 fixtures that the x86 binary makes and quantizes
#      here, both ISAs' hashes side by side, then "logits identical to x86" or the first step that
#      differs. Nothing is compared with a stored hash: the models change, the comparison does not.
# Exit 0 only when every test passes and every digest and hash is equal.
# usage: scripts/test_arm64.sh [--help]   (env: BUILD=build ARM_BUILD=build-arm64 JOBS=nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--help" ]; then sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
BUILD=${BUILD:-build} ARM_BUILD=${ARM_BUILD:-build-arm64} JOBS=${JOBS:-$(nproc)}
if [ "$(uname -m)" != x86_64 ]; then # it compares aarch64 with the x86-64 build: an x86-64 host's check
    echo "test-arm64: compares an aarch64 cross build with this host's x86-64 build; this host is $(uname -m): skipped"
    exit 0
fi

missing=()
command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || missing+=(qemu-user)
for pc in jansson libpcre2-8 libmicrohttpd libcurl cmocka libcrypto; do
    [ -f "/usr/lib/aarch64-linux-gnu/pkgconfig/$pc.pc" ] || missing+=("$pc.pc (arm64 -dev package)")
done
[ -f /usr/lib/aarch64-linux-gnu/libopenblas.so ] || missing+=(libopenblas-dev:arm64)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "test-arm64: missing: ${missing[*]}; run: bash scripts/setup.sh (it installs them as root)" >&2
    exit 1
fi
for t in pdbridge pdb_logit_hash pdb_kernel_digest; do
    [ -x "$BUILD/$t" ] || { echo "test-arm64: $BUILD/$t missing: build the x86-64 tree first (make build)" >&2; exit 1; }
done

t0=$(date +%s)
if [ ! -f "$ARM_BUILD/build.ninja" ]; then
    cmake -S . -B "$ARM_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
        -DPDB_NO_CUDA=ON >"$ARM_BUILD.configure.log" 2>&1 || { cat "$ARM_BUILD.configure.log"; exit 1; }
fi
echo "== aarch64 cross build ($ARM_BUILD: the whole tree, the binary with front, decode-server, prefill-server) =="
cmake --build "$ARM_BUILD" -j "$JOBS"
file -b "$ARM_BUILD/pdbridge" | cut -d, -f1,2
t1=$(date +%s)

echo "== aarch64 unit tests under qemu-aarch64: core, store, tokenizer, decoder (and model/test_math: argmax) =="
(cd "$ARM_BUILD" && ctest --output-on-failure -j "$JOBS" -L unit -R '^((core|store|tokenizer|decoder)/|model/test_math$)')
t2=$(date +%s)

QEMU=(qemu-aarch64)
fail=0
echo "== kernel digests (tools/pdb_kernel_digest: every fixed-order kernel, seeded data) =="
x86d=$("$BUILD/pdb_kernel_digest") || { echo "$x86d"; echo "FAIL: the x86-64 ISAs differ among themselves"; fail=1; }
armd=$("${QEMU[@]}" "$ARM_BUILD/pdb_kernel_digest") || { echo "$armd"; echo "FAIL: the aarch64 ISAs differ among themselves"; fail=1; }
printf '%-10s %-18s %s\n' cpu isa digest
echo "$x86d" | awk '{printf "%-10s %-18s %s\n", "x86-64", $3, $4}'
echo "$armd" | awk '{printf "%-10s %-18s %s\n", "aarch64", $3, $4}'
if [ "$(printf '%s\n%s\n' "$x86d" "$armd" | awk '{print $4}' | sort -u | wc -l)" -eq 1 ]; then
    echo "kernel digests identical on x86-64 and aarch64"
else
    echo "FAIL: kernel digests differ between x86-64 and aarch64"; fail=1
fi

echo "== decoder logit hashes: aarch64 (qemu) vs x86-64, same checkpoints, same run =="
T=$(mktemp -d /tmp/pdb-arm64.XXXXXX)
trap 'rm -rf "$T"' EXIT
BIN="$BUILD/pdbridge"
fixture() { # name arch preset scheme [semantics]
    local hf="$T/$1-hf" dec="$T/$1"
    "$BIN" make-model --arch "$2" --preset "$3" --seed 7 --out "$hf" >/dev/null
    local qa=(--model "$hf" --out "$dec" --scheme "$4")
    [ -n "${5:-}" ] && qa+=(--v4-semantics "$5")
    "$BIN" quantize "${qa[@]}" >/dev/null 2>&1 || { echo "test-arm64: quantize $1 failed" >&2; "$BIN" quantize "${qa[@]}"; exit 1; }
}
fixture v2-tiny-mx deepseek_v2 tiny mx
fixture v2-small-none deepseek_v2 small none
fixture v4-tiny-official-mx deepseek_v4 tiny mx official
fixture v4-tiny-exact-none deepseek_v4 tiny none exact
x86isa=$("$BUILD/pdb_kernel_digest" | tail -1 | awk '{print $3}')
printf '%-22s %-26s %-26s %s\n' fixture "x86-64 ($x86isa)" "aarch64 (neon)" verdict
for f in v2-tiny-mx v2-small-none v4-tiny-official-mx v4-tiny-exact-none; do
    "$BUILD/pdb_logit_hash" "$T/$f" --threads 2 --per-step >"$T/$f.x86" 2>"$T/$f.x86.log" || { cat "$T/$f.x86.log"; fail=1; }
    "${QEMU[@]}" "$ARM_BUILD/pdb_logit_hash" "$T/$f" --threads 2 --per-step >"$T/$f.arm" 2>"$T/$f.arm.log" || { cat "$T/$f.arm.log"; fail=1; }
    hx=$(awk '/^logit hash/ {print $3}' "$T/$f.x86") ha=$(awk '/^logit hash/ {print $3}' "$T/$f.arm")
    if [ -n "$hx" ] && [ "$hx" = "$ha" ] && cmp -s "$T/$f.x86" "$T/$f.arm"; then
        verdict="logits identical to x86"
    else
        first=$(paste -d' ' <(grep '^step' "$T/$f.x86") <(grep '^step' "$T/$f.arm") | awk '$3 != $6 {print $2; exit}')
        verdict="DIFFER: first differing step ${first:-?} (step 0 = the prefill's last row)"
        fail=1
    fi
    printf '%-22s %-26s %-26s %s\n' "$f" "${hx:-none}" "${ha:-none}" "$verdict"
done
# one fixture again on aarch64's scalar path: the reference for any other CPU
"${QEMU[@]}" "$ARM_BUILD/pdb_logit_hash" "$T/v2-tiny-mx" --threads 2 --per-step --isa scalar >"$T/scalar.arm" 2>"$T/scalar.arm.log" || cat "$T/scalar.arm.log"
if cmp -s "$T/v2-tiny-mx.x86" "$T/scalar.arm"; then
    echo "v2-tiny-mx on aarch64's scalar path: $(awk '/^logit hash/ {print $3}' "$T/scalar.arm"), logits identical to x86"
else
    echo "FAIL: v2-tiny-mx on aarch64's scalar path differs from x86"; fail=1
fi
t3=$(date +%s)
echo "test-arm64: build $((t1 - t0)) s, unit tests $((t2 - t1)) s, digests and hashes $((t3 - t2)) s"
[ "$fail" = 0 ] && echo "test-arm64: PASS" || echo "test-arm64: FAIL"
exit "$fail"
