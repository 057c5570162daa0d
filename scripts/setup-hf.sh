#!/usr/bin/env bash
# Installs the reference venv for the tests against Hugging Face transformers
# (tests/ref/hf_*_check.py): PyTorch, torchvision, transformers, Pillow, numpy and gguf in
# .venv-hf, idempotently. PyPI's torch wheel for Linux pulls CUDA libraries
# (about 4 GiB in all); the tests run it on the CPU. Without this venv those
# tests skip, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

# Pillow 13 chooses the order of the resize passes (tests/ref/hf_gemma3_check.py
# compares pixels exactly), transformers 5 has Gemma3ImageProcessorPil;
# torchvision resizes the frames of Qwen2VLVideoProcessor.
want='torch==2.15.* torchvision==0.29.* transformers==5.24.* pillow==13.* numpy==2.* safetensors gguf==0.17.1'
check='import torch, torchvision, transformers, PIL, numpy, safetensors, gguf
assert torch.__version__.startswith("2.15") and transformers.__version__.startswith("5.24")
assert torchvision.__version__.startswith("0.29") and PIL.__version__.startswith("13.")'
if [ -x .venv-hf/bin/python ] && .venv-hf/bin/python -c "$check" 2>/dev/null; then
    exit 0
fi
echo "setup-hf: creating .venv-hf ($want)"
python3 -m venv .venv-hf
# shellcheck disable=SC2086
.venv-hf/bin/pip install -q --disable-pip-version-check $want
.venv-hf/bin/python -c "$check"
