#!/usr/bin/env bash
# Installs what kvfold needs to build and test, idempotently and quickly when
# everything is already there: Debian packages and a Python venv (numpy, gguf,
# Pillow, rouge, regex, the openai client and pytest, used only by the tests).
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential cmake pkg-config libopenblas-dev libstb-dev libcjson-dev libpcre2-dev
      libcmocka-dev libmicrohttpd-dev libpng-dev libjpeg62-turbo-dev libgif-dev libwebp-dev zlib1g-dev python3-venv clang clang-format libomp-dev haproxy
      wamerican)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import numpy, gguf, PIL, rouge, regex, openai, pytest' 2>/dev/null; then
    echo "setup: creating .venv (numpy, gguf, pillow, rouge, regex, openai, pytest)"
    python3 -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check numpy==2.* gguf==0.17.1 "pillow>=10,<14" rouge==1.0.1 regex==2024.* "openai>=1.50,<3" "pytest>=8,<9"
fi
