# The two commands a new user runs (README): `make demo` and `make test`.
# Everything they need is installed by scripts/setup.sh and scripts/models.sh.
JOBS ?= $(shell nproc)
BUILD ?= build
MODEL ?= models/smollm2-135m-instruct-q4_1.gguf
PREFIX ?= /usr/local

.PHONY: all setup setup-hf models models-large scorers build build-asan build-clang fuzz install python test test-unit demo bench clean

all: build

setup:
	@bash scripts/setup.sh

# The venv of the reference tests against Hugging Face transformers
# (torch + transformers, ~4 GiB with PyTorch's CUDA wheels), and kvpress's
# (transformers 5.2 over the same torch); without them those tests skip.
# Not part of `make test`; CI runs it first.
setup-hf: setup
	@bash scripts/setup-hf.sh
	@bash scripts/setup-kvpress.sh

models: setup
	@bash scripts/models.sh

# The test models plus two larger ones that can answer questions (Qwen2.5-Coder
# 0.5B and 1.5B Instruct, Q4_K_M, ~1.6 GB together); not part of `make test`.
models-large: setup
	@bash scripts/models.sh --large

# KVzap's scorer (MODEL.kvzap, for --kv kvzap) for every model under models/,
# fitted by `kvfold calibrate` on text every machine has (scripts/scorers.sh).
scorers: build
	@bash scripts/scorers.sh $(BUILD)/kvfold

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

build-asan: setup
	@cmake -S . -B $(BUILD)-asan -DKVF_SANITIZE=ON -DKVF_UNIT_ONLY=ON >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS)

# The library and CLI built with clang (no tests): a compile check that the
# code is not GCC-only, and the build to read clang's warnings from.
build-clang: setup
	@cmake -S . -B $(BUILD)-clang -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Release -DKVF_BUILD_TESTS=OFF >/dev/null
	@cmake --build $(BUILD)-clang -j $(JOBS)

# The fuzz harnesses of tests/fuzz/ built with clang, libFuzzer, ASan and
# UBSan, each run for FUZZ_TIME seconds in turn (niced) on a corpus kept in
# $(BUILD)-fuzz/tests/fuzz/corpus/; `make fuzz FUZZ=image FUZZ_TIME=600` runs one.
FUZZ_TIME ?= 60
FUZZ ?= gguf mmproj safetensors image kvspec milebench tokenizer serve
fuzz: setup
	@cmake -S . -B $(BUILD)-fuzz -DCMAKE_C_COMPILER=clang -DKVF_FUZZ=ON -DKVF_UNIT_ONLY=ON >/dev/null
	@cmake --build $(BUILD)-fuzz -j $(JOBS) --target fuzz_seeds $(addprefix fuzz_,$(FUZZ))
	@bash tests/fuzz/run.sh $(BUILD)-fuzz $(FUZZ_TIME) $(FUZZ)

# include/kvfold.h, libkvfold.a, libkvfold.so.0, the CLI and
# lib/pkgconfig/kvfold.pc under PREFIX (DESTDIR is honoured).
install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

# The Python package (pyproject.toml) built by pip with the project's CMake
# and installed into the test venv, with its `kvfold` command.
python: setup
	@.venv/bin/pip install -q --disable-pip-version-check .

# Unit tests under ASan+UBSan first, then the whole suite (fixtures, real
# models, CLI) on the optimised build; ctest's summary is the last line.
# The clang build (build-clang) is compiled, not tested. The suite runs with
# the OpenBLAS kernels the CLI runs with (where an OpenBLAS older than the
# CPU falls back to pre-AVX2 ones, tools/kvfold/main.c names better ones),
# since the test tools link the library directly: OPENBLAS_CORETYPE as the
# CLI's OpenBLAS reports it, or OpenBLAS's own choice where it reports none.
BLAS_ENV = $$(OPENBLAS_VERBOSE=2 $(BUILD)/kvfold --version 2>&1 | sed -n 's/^Core: \([A-Za-z0-9]*\)$$/OPENBLAS_CORETYPE=\1/p' | tail -n 1)
test: build build-asan build-clang models python
	@blas=$(BLAS_ENV); cd $(BUILD)-asan && env $$blas ctest --output-on-failure -j $(JOBS)
	@blas=$(BLAS_ENV); cd $(BUILD) && env $$blas ctest --output-on-failure -j $(JOBS)

# The demo runs on Qwen2.5-Coder-1.5B when `make models-large` fetched it. It
# builds only the CLI, with the build's progress lines (stdout, ~200 of them
# through the sub-makes) dropped, so that it prints the models line, its
# header and its table; compiler and make errors go to stderr and stop it.
DEMO_MODEL ?= $(or $(wildcard models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf),$(MODEL))
demo: models
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target kvfold_cli >/dev/null
	@bash scripts/demo.sh $(BUILD)/kvfold $(DEMO_MODEL)

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-clang $(BUILD)-fuzz build-python
