#!/usr/bin/env bash
# The runs behind docs/RESULTS.md: every KV policy at budgets 1.0 to 0.05 on
# the consistency protocol and the needle in a haystack (text and image
# needles at five depths in haystacks of 4, 8 and 16 segments), synthetic
# data from the default seed. Each sample is prefilled once and forked per
# policy (kvf_session_fork).
#   usage: bench/eval_results.sh KVFOLD MODEL OUT_DIR [THREADS]
set -euo pipefail
kvfold=$1 model=$2 out=$3 threads=${4:-2}
kvs=()
for p in streaming h2o snapkv pyramidkv roco keydiff knorm random imgrand lookm elastic prefixkv csp lightkv fastv tome; do
    kvs+=(--kv "$p")
done
"$kvfold" eval consistency -m "$model" -t "$threads" --segments 6 --segment-words 100 --samples 8 -n 32 \
    "${kvs[@]}" --budgets 1.0,0.5,0.2,0.1,0.05 --out "$out/consistency" --plots "$out/consistency/plots" \
    --kept-map "$out/consistency/kept" > /dev/null
"$kvfold" eval needle -m "$model" -t "$threads" --segments 4,8,16 --segment-words 120 --depths 0.1,0.3,0.5,0.7,0.9 \
    --needle both "${kvs[@]}" --budgets 1.0,0.5,0.2,0.1,0.05 --out "$out/needle" --plots "$out/needle/plots" > /dev/null
