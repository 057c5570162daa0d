#!/usr/bin/env bash
# Decode speed and compression cost of KV policies at a given context depth:
# one `kvfold bench` per (depth, spec): prefill DEPTH random ids, compress with
# the spec, decode N tokens. Prints one markdown row per run (and keeps the
# JSON lines in OUT.jsonl when OUT is given).
#
# usage: bench/kv_sweep.sh KVFOLD MODEL "DEPTHS" N_DECODE THREADS SPEC... [> table.md]
#   e.g. bench/kv_sweep.sh build/kvfold models/smollm2-135m-instruct-q4_1.gguf "4096 8192" 32 2 full snapkv:budget=0.2
set -euo pipefail
kvfold=$1 model=$2 depths=$3 n=$4 threads=$5
shift 5
out=${OUT:-}
echo "| depth | kv spec | decode ms/token | KV after decode | KV peak | prefill ms | compress ms | compress / prefill |"
echo "|---|---|---|---|---|---|---|---|"
for d in $depths; do
  for spec in "$@"; do
    json=$("$kvfold" bench -m "$model" -p 0 -d "$d" -n "$n" -r 1 --no-warmup -t "$threads" --kv "$spec" --json)
    [ -n "$out" ] && echo "$json" >> "$out.jsonl"
    python3 - "$d" "$spec" "$json" <<'PY'
import json, sys
d, spec, o = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
t = o["tests"][0]
mib = 1 << 20
share = 100 * t["compress_ms"] / t["prefill_ms"] if t["prefill_ms"] else 0
print(f"| {d} | `{spec}` | {t['decode_ms_per_token']:.2f} | {t['kv_bytes'] / mib:.1f} MiB | {t['kv_peak_bytes'] / mib:.1f} MiB "
      f"| {t['prefill_ms']:.0f} | {t['compress_ms']:.1f} | {share:.2f}% |")
PY
  done
done
