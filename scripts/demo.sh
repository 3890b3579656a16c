#!/usr/bin/env bash
# The main job (`make run`): generate (once) a small random DeepSeek-V2 checkpoint with the real
# DeepSeek tokenizer and run the CPU reference forward on a chat prompt, printing a short greedy
# generation (random weights: the words are nonsense; the point is the path end to end).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/pdbridge
MODEL=.cache/models/v2-small
mkdir -p .cache/models
if [ ! -s "$MODEL/model.safetensors" ] || [ ! -s "$MODEL/tokenizer.json" ]; then
  echo "demo: writing a random DeepSeek-V2 checkpoint (preset small) to $MODEL"
  "$BIN" make-model --arch deepseek_v2 --preset small --seed 1 --out "$MODEL" \
    --tokenizer .cache/tokenizer/deepseek_v3/tokenizer.json
fi
"$BIN" info
PROMPT="Explain in one sentence why prefill is compute-bound and decode is memory-bound."
echo "demo: prompt: $PROMPT"
echo -n "demo: continuation: "
"$BIN" generate --model "$MODEL" --chat --prompt "$PROMPT" -n 24
