#!/usr/bin/env bash
# KVzap's scorers for the models under models/ (`make scorers`): each model's
# MODEL.kvzap beside it, fitted by `kvfold calibrate` on text every machine
# with this project has -- Python's own documentation (pydoc's topics), the
# GNU and Apache licences Debian ships, and this project's docs -- never the
# RULER or needle generators' text, which stays held out for evaluation.
# A model whose scorer is there already is skipped (delete it to refit).
#
#   scripts/scorers.sh KVFOLD [MODEL...]   (default: every .gguf under models/)
#
# The fits use calibrate's defaults (256 spans of 512 tokens, 8 held out);
# the 1.5B takes about half an hour on 2 cores.
set -euo pipefail
kvfold=${1:?usage: scripts/scorers.sh KVFOLD [MODEL...]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
corpus=$root/build/kvzap-corpus
mkdir -p "$corpus"
python3 -c 'import pydoc_data.topics as t; print("\n\n".join(t.topics[k] for k in sorted(t.topics)))' \
    > "$corpus/python-topics.txt"
files=("$corpus/python-topics.txt")
for f in /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/GFDL-1.3 /usr/share/common-licenses/Apache-2.0; do
    [ -f "$f" ] && files+=("$f")
done
files+=("$root"/docs/ARCHITECTURE.md "$root"/docs/METHODS.md "$root"/README.md)
args=()
for f in "${files[@]}"; do args+=(--corpus "$f"); done
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
    for m in "$root"/models/*.gguf; do
        case $m in *mmproj*) continue ;; esac
        models+=("$m")
    done
fi
for m in "${models[@]}"; do
    out=${m%.gguf}.kvzap
    if [ -f "$out" ]; then
        echo "scorers: $out is there"
        continue
    fi
    echo "scorers: $out"
    "$kvfold" calibrate -m "$m" "${args[@]}" -o "$out.part"
    mv "$out.part" "$out"
done
