#!/usr/bin/env bash
# Quality against KV bytes: `kvfold perplexity --kv SPEC` (each chunk's
# first half prefilled and compressed by SPEC, the second half scored token
# by token through the decode path) for every pair of cache types and spec
# given. Bytes are the cache's mean after compression, against the F16 full
# cache's (the first row must be `f16 full`, the reference). Prints one
# markdown row per run.
#
# usage: bench/kv_bytes.sh KVFOLD MODEL TEXT CTX CHUNKS THREADS "TYPES SPEC" ...
#   TYPES: a type or KTYPE/VTYPE (f32 f16 q8_0 q4_0 q4_0h; keys also q4_0s); SPEC: a --kv spec
#   e.g. bench/kv_bytes.sh build/kvfold models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf F 1024 4 2 \
#        "f16 full" "q4_0 full" "q4_0h full" "q8_0/q4_0h keydiff:budget=0.5"
set -euo pipefail
kvfold=$1 model=$2 text=$3 ctx=$4 chunks=$5 threads=$6
shift 6
echo "| -ctk | -ctv | --kv | KV bytes vs F16 full | perplexity | time s |"
echo "|---|---|---|---|---|---|"
ref=""
for run in "$@"; do
  types=${run%% *} spec=${run#* }
  k=${types%/*} v=${types#*/}
  start=$SECONDS
  json=$("$kvfold" perplexity -m "$model" -f "$text" -c "$ctx" --chunks "$chunks" -t "$threads" --kv "$spec" \
         -ctk "$k" -ctv "$v" --json)
  secs=$((SECONDS - start))
  kept=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["kv_memory"]["bytes_kept"])' "$json")
  [ -z "$ref" ] && ref=$kept
  python3 - "$k" "$v" "$spec" "$json" "$ref" "$secs" <<'PY'
import json, sys
k, v, spec, o = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
ref, secs, m = float(sys.argv[5]), float(sys.argv[6]), o["kv_memory"]
print(f"| {k} | {v} | `{spec}` | {m['bytes_kept'] / ref:.3f} | {o['ppl']:.4f} ± {o['ppl_stderr']:.4f} | {secs:.0f} |")
PY
done
