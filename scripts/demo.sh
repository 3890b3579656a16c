#!/usr/bin/env bash
# The main job (`make run`): `pdbridge up`, the bridge end to end on loopback. It generates
# (once) a small random DeepSeek-V2 with the real tokenizer, starts decoder + prefill (CUDA when
# a GPU is usable, else CPU) + front, bridges a cold prompt of several thousand tokens from the
# Python standard library, sends a warm follow-up, compares with a native decoder and stops
# everything. Extra arguments go to `pdbridge up` (see `build/pdbridge up --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
build/pdbridge info
exec build/pdbridge up "$@"
