#!/usr/bin/env bash
# The point of kvfold in one table: a needle-in-a-haystack prompt (text and
# pseudo-image segments, a five-digit password hidden in a text segment)
# answered with the full KV cache and with compressed caches: KV memory kept,
# decode speed, and whether the answer still holds the password. The rows are
# chosen where answers survive on the model, plus the rows where they stop
# surviving, to show the limit; then the best of them again with 4-bit keys
# smoothed per channel and rotated 4-bit values (-ctk q4_0s -ctv q4_0h), where
# the bytes column (against the F16 full cache) shows what storage and
# eviction save together; kvzap joins the rows where `make scorers` fitted the
# model's scorer. With Qwen2.5-Coder-1.5B (`make models-large`) one
# prompt of ~1.5K tokens; with SmolLM2-135M two of ~1.1K. About a minute and
# a half on two cores either way.
#   usage: scripts/demo.sh KVFOLD_BINARY MODEL
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 KVFOLD_BINARY MODEL" >&2
    exit 1
fi
bin=$1
model=$2
case $(basename "$model") in
qwen2.5-coder-1.5b*)
    # SnapKV keeps the password at 0.2, KeyDiff at 0.2 and 0.05; H2O's summed attention loses it
    # at 0.2 (docs/RESULTS.md).
    haystack=(--segments 6 --segment-words 200 --grid 16x16 --depths 0.5)
    kv=(--kv snapkv --kv keydiff --kv h2o --budgets 0.2,0.05)
    small=(--kv keydiff --budgets 0.2,0.05)
    about="6 segments (3 text of 200 words, 3 pseudo-images of 16x16 tokens), the password at depth 0.5" ;;
*)
    # A 135M model: KeyDiff keeps the password at 0.2 (one of the two at 0.1); SnapKV only its first digits.
    haystack=(--segments 8 --segment-words 120 --depths 0.3,0.7)
    kv=(--kv keydiff --kv snapkv --budgets 0.2,0.1)
    small=(--kv keydiff --budgets 0.2)
    about="8 segments (4 text of 120 words, 4 pseudo-images of 12x12 tokens), the password at depths 0.3 and 0.7" ;;
esac
# KVzap beside the others where the model's scorer is there (`make scorers`).
if [ -f "${model%.gguf}.kvzap" ]; then
    kv+=(--kv kvzap)
fi
echo "model:  $model"
echo "prompt: $about;"
echo "        the image segments are synthetic (word embeddings), as the model reads only text"
echo
echo "keys and values in f16 (the default):"
"$bin" eval needle -m "$model" "${haystack[@]}" --needle text -t "$(nproc)" "${kv[@]}" 2>/dev/null
echo
echo "smoothed 4-bit keys, rotated 4-bit values (-ctk q4_0s -ctv q4_0h):"
"$bin" eval needle -m "$model" "${haystack[@]}" --needle text -t "$(nproc)" "${small[@]}" -ctk q4_0s -ctv q4_0h \
    2>/dev/null
