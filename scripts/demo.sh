#!/usr/bin/env bash
# Asks the model one question through its chat template and shows the answer
# and the speed.  usage: scripts/demo.sh KVFOLD_BINARY MODEL
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 KVFOLD_BINARY MODEL" >&2
    exit 1
fi
bin=$1
model=$2
question="What is the capital of France? Answer in one sentence."
log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "model:    $model"
echo "question: $question"
printf "answer:   "
# Greedy decoding: the answer streams to stdout, the timing line goes to stderr.
if ! "$bin" generate -m "$model" --chat -p "$question" -n 64 2>"$log"; then
    cat "$log" >&2
    exit 1
fi
echo "speed:    $(sed -n 's/^kvfold: //p' "$log" | tail -n 1)"
