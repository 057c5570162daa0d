# The two commands a new user runs (README): `make demo` and `make test`.
# Everything they need is installed by scripts/setup.sh and scripts/models.sh.
JOBS ?= $(shell nproc)
BUILD ?= build
MODEL ?= models/smollm2-135m-instruct-q4_1.gguf

.PHONY: all setup models build build-asan test test-unit demo bench clean

all: build

setup:
	@bash scripts/setup.sh

models: setup
	@bash scripts/models.sh

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

build-asan: setup
	@cmake -S . -B $(BUILD)-asan -DKVF_SANITIZE=ON -DKVF_UNIT_ONLY=ON >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS)

# Unit tests under ASan+UBSan first, then the whole suite (fixtures, real
# models, CLI) on the optimised build; ctest's summary is the last line.
test: build build-asan models
	@cd $(BUILD)-asan && ctest --output-on-failure -j $(JOBS)
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: build models
	@bash scripts/demo.sh $(BUILD)/kvfold $(MODEL)

clean:
	rm -rf $(BUILD) $(BUILD)-asan
