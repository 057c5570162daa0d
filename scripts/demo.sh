#!/usr/bin/env bash
# The point of kvfold in one table: a needle-in-a-haystack prompt of a few
# thousand tokens (text and pseudo-image segments, a password hidden in the
# middle) answered with the full KV cache and with several compression
# methods at budgets 0.2 and 0.05: KV memory kept, decode speed, and whether
# the answer still holds the password.
#   usage: scripts/demo.sh KVFOLD_BINARY MODEL
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 KVFOLD_BINARY MODEL" >&2
    exit 1
fi
bin=$1
model=$2
echo "model:  $model"
echo "prompt: 16 segments (8 text, 8 pseudo-images of 12x12 tokens), the password hidden halfway;"
echo "        the image segments are synthetic (word embeddings), as the model reads only text"
echo
"$bin" eval needle -m "$model" --segments 16 --depths 0.5 --segment-words 160 -t "$(nproc)" \
    --kv snapkv --kv h2o --kv streaming --kv lookm --kv csp --budgets 0.2,0.05 2>/dev/null
