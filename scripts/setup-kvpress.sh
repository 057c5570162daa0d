#!/usr/bin/env bash
# Installs NVIDIA's kvpress (PyPI) in .venv-kvpress, idempotently, for the
# side-by-side benchmark (bench/kvpress_side.py) and the conformance test
# (tests/ref/kvpress_check.py). kvpress 0.5 needs transformers < 5.3, older
# than .venv-hf's, so it gets a venv of its own; PyTorch (about 4 GiB with
# PyPI's CUDA wheels) is not downloaded twice: a .pth file puts .venv-hf's
# site-packages after this venv's own, whose transformers shadows the newer
# one. Needs .venv-hf (make setup-hf); without either venv the test skips.
set -euo pipefail
cd "$(dirname "$0")/.."

want='kvpress==0.5.5 transformers==5.2.* wonderwords==2.*'
check='import torch, transformers, kvpress, wonderwords
assert transformers.__version__.startswith("5.2."), transformers.__version__'
[ -x .venv-hf/bin/python ] || { echo "setup-kvpress: .venv-hf is missing (make setup-hf)" >&2; exit 1; }
if [ -x .venv-kvpress/bin/python ] && .venv-kvpress/bin/python -c "$check" 2>/dev/null; then
    exit 0
fi
echo "setup-kvpress: creating .venv-kvpress ($want, PyTorch from .venv-hf)"
python3 -m venv .venv-kvpress
own=$(.venv-kvpress/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
hf=$(.venv-hf/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$(realpath "$hf")" > "$own/zz-venv-hf.pth"
# shellcheck disable=SC2086
.venv-kvpress/bin/pip install -q --disable-pip-version-check $want
.venv-kvpress/bin/python -c "$check"
