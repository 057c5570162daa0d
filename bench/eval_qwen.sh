#!/usr/bin/env bash
# The runs behind the Qwen2.5-Coder-1.5B results of docs/RESULTS.md (the
# model of `make models-large`): needles in text and in pseudo-images at five
# depths of a ~1.5K-token haystack for every evicting preset at budgets 1.0
# to 0.05; the head-wise budget stage on the scoring presets; consistency
# with the full cache; needles in haystacks of ~4K and ~8K tokens for a few
# methods; and the methods that change the prefill itself (reduce stages,
# block-wise) on four prompts; and text needles with the question in the
# prompt compressed and appended after it (kvpress's protocol). Each sample
# is prefilled once and forked per policy, except the prefill part's, which
# prefill on their own.
#   usage: bench/eval_qwen.sh KVFOLD MODEL OUT_DIR [PART...] [-- THREADS]
#   parts: needle adaptive consistency long4k long8k prefill question (default: all)
set -euo pipefail
kvfold=$1 model=$2 out=$3
shift 3
parts=() threads=2
while [ $# -gt 0 ]; do
    if [ "$1" = "--" ]; then threads=$2; shift 2; else parts+=("$1"); shift; fi
done
[ ${#parts[@]} -gt 0 ] || parts=(needle adaptive consistency long4k long8k prefill question)

kv() { local a=(); for p in "$@"; do a+=(--kv "$p"); done; printf '%s\n' "${a[@]}"; }
mapfile -t every < <(kv streaming h2o snapkv pyramidkv roco keydiff knorm random imgrand lookm elastic prefixkv csp \
    "csp:window=32+pool=avg")
mapfile -t adaptive < <(kv snapkv snapkv+budget=adaptive h2o h2o+budget=adaptive keydiff keydiff+budget=adaptive \
    lookm lookm+budget=adaptive)
mapfile -t consistency < <(kv streaming h2o snapkv keydiff lookm elastic prefixkv csp "csp:window=32+pool=avg" \
    snapkv+budget=adaptive)
# The question after compression: every preset and the question-agnostic rules made for it.
mapfile -t question < <(printf '%s\n' "${every[@]}"; kv expected kvzip)
# Long prompts: the methods that keep needles at 1.5K, the seed methods' best forms, and one summed-attention rule.
mapfile -t long < <(kv snapkv snapkv+budget=adaptive keydiff h2o lookm "csp:window=32+pool=avg")
haystack=(--segment-words 200 --grid 16x16 --needle both)

for part in "${parts[@]}"; do
    case $part in
    needle)
        "$kvfold" eval needle -m "$model" -t "$threads" --segments 6 "${haystack[@]}" --depths 0.1,0.3,0.5,0.7,0.9 \
            "${every[@]}" --budgets 1.0,0.5,0.2,0.1,0.05 --out "$out/needle" --plots "$out/needle/plots" ;;
    adaptive)
        "$kvfold" eval needle -m "$model" -t "$threads" --segments 6 "${haystack[@]}" --depths 0.1,0.3,0.5,0.7,0.9 \
            "${adaptive[@]}" --budgets 0.2,0.1,0.05 --out "$out/needle-adaptive" ;;
    consistency)
        "$kvfold" eval consistency -m "$model" -t "$threads" --segments 6 --segment-words 100 --samples 2 -n 32 \
            "${consistency[@]}" --budgets 0.2,0.05 --out "$out/consistency" ;;
    long4k)
        "$kvfold" eval needle -m "$model" -t "$threads" --segments 16 "${haystack[@]}" --depths 0.5 \
            "${long[@]}" --budgets 0.2,0.05 --out "$out/needle-4k" ;;
    long8k)
        "$kvfold" eval needle -m "$model" -t "$threads" --segments 32 "${haystack[@]:0:4}" --needle text \
            --depths 0.5 "${long[@]}" --budgets 0.2,0.05 --out "$out/needle-8k" ;;
    prefill)
        # blockwise's budget is a count: 294 entries is 0.2 of these ~1470-token prompts; question=1
        # scores every block with the question's queries (it runs alone first).
        "$kvfold" eval needle -m "$model" -t "$threads" --segments 6 "${haystack[@]}" --depths 0.3,0.7 \
            --kv lightkv --kv fastv --kv tome --kv blockwise --kv blockwise:question=1 --budgets 294 \
            --out "$out/needle-prefill" ;;
    question)
        for where in with after; do
            "$kvfold" eval needle -m "$model" -t "$threads" --segments 6 "${haystack[@]:0:4}" --needle text \
                --depths 0.1,0.3,0.5,0.7,0.9 "${question[@]}" --budgets 0.2,0.1 --question "$where" \
                --out "$out/question-$where"
        done ;;
    *) echo "eval_qwen.sh: unknown part '$part' (needle adaptive consistency long4k long8k prefill question)" >&2
       exit 1 ;;
    esac
done > /dev/null
