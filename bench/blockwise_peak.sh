#!/usr/bin/env bash
# Peak KV memory, peak RSS and time to first token against the number of
# images (the block-wise prefill paper's Figure 1): N pseudo-images of RxC
# tokens on a text model, prefilled in bulk (full cache), in bulk then
# compressed (SnapKV to the same budget), and block-wise under a fixed budget;
# any other --kv spec too (the reduce presets lightkv, fastv, tome).
#
# usage: bench/blockwise_peak.sh KVFOLD MODEL WORDS_FILE RxC THREADS "COUNTS" SPEC...
#   e.g. bench/blockwise_peak.sh build/kvfold models/smollm2-135m-instruct-q4_1.gguf tests/data/ppl_passage.txt \
#        24x24 2 "1 2 4 8 16" full snapkv:budget=1024 blockwise:budget=1024,block=image
set -euo pipefail
kvfold=$1 model=$2 words=$3 grid=$4 threads=$5 counts=$6
shift 6
tokens=$(( ${grid%x*} * ${grid#*x} ))
echo "| images | tokens | kv spec | TTFT s | KV peak MiB | KV after MiB | peak RSS MiB |"
echo "|---|---|---|---|---|---|---|"
for n in $counts; do
  media=()
  for ((i = 0; i < n; i++)); do media+=(--pseudo-image "$words:$grid"); done
  for spec in "$@"; do
    json=$("$kvfold" bench -m "$model" -p 0 -n 0 "${media[@]}" -b "$tokens" -r 1 --no-warmup -t "$threads" --kv "$spec" --json)
    python3 - "$n" "$spec" "$json" <<'PY'
import json, sys
n, spec, o = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
m, mib = o["multimodal"], 1 << 20
print(f"| {n} | {m['n_tokens']} | `{spec}` | {m['ttft_ms'] / 1e3:.2f} | {m['kv_peak_bytes'] / mib:.1f} | "
      f"{m['kv_bytes'] / mib:.1f} | {o['peak_rss_bytes'] / mib:.0f} |")
PY
  done
done
