# The two commands of the README: `make run` (demo end to end) and `make test` (whole suite).
# Both install missing Debian packages and the real tokenizer first (scripts/setup.sh, idempotent).
BUILD ?= build
JOBS ?= $(shell nproc)
# `make test` also runs the whole suite under ASan+UBSan (gcc, no CUDA) in $(ASAN_BUILD) and the
# fuzz targets (clang + libFuzzer, regression inputs + a deterministic seeded run) in $(FUZZ_BUILD),
# before the normal suite, whose ctest summary ends the output. See docs/fuzzing.md.
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
# `make test` also cross-builds the tree for aarch64 in $(ARM_BUILD) and checks it under qemu-user
# against the x86-64 build (scripts/test_arm64.sh: unit tests, kernel digests, logit hashes).
ARM_BUILD ?= build-arm64
SAN_ENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=0 \
          UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

# ARGS go to `pdbridge up` (e.g. make run ARGS="--tokens 3000"); `make run-v4` is the same demo
# on a tiny DeepSeek-V4 (`pdbridge up --arch deepseek_v4`).
ARGS ?=

.PHONY: all setup build run run-v4 test clean asan fuzz test-arm64

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/build.ninja:
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > $(BUILD).configure.log 2>&1 || (cat $(BUILD).configure.log; exit 1)

build: setup $(BUILD)/build.ninja
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	@bash scripts/demo.sh $(ARGS)

run-v4: build
	@bash scripts/demo.sh --arch deepseek_v4 $(ARGS)

$(ASAN_BUILD)/build.ninja:
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPDB_SANITIZE=ON -DPDB_NO_CUDA=ON > $(ASAN_BUILD).configure.log 2>&1 || (cat $(ASAN_BUILD).configure.log; exit 1)

$(FUZZ_BUILD)/build.ninja:
	@cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DPDB_FUZZ=ON -DPDB_NO_CUDA=ON > $(FUZZ_BUILD).configure.log 2>&1 || (cat $(FUZZ_BUILD).configure.log; exit 1)

asan: setup $(ASAN_BUILD)/build.ninja
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@echo "== sanitizer suite (ASan + UBSan, $(ASAN_BUILD)) =="
	@cd $(ASAN_BUILD) && $(SAN_ENV) ctest --output-on-failure -j $(JOBS)

fuzz: setup $(FUZZ_BUILD)/build.ninja
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target pdb_fuzz
	@echo "== fuzz targets (libFuzzer, $(FUZZ_BUILD)) =="
	@cd $(FUZZ_BUILD) && $(SAN_ENV) ctest --output-on-failure -j $(JOBS) -L fuzz

test-arm64: build
	@BUILD=$(BUILD) ARM_BUILD=$(ARM_BUILD) JOBS=$(JOBS) bash scripts/test_arm64.sh

test: build asan fuzz test-arm64
	@echo "== test suite ($(BUILD)) =="
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD) $(BUILD).configure.log $(ASAN_BUILD) $(ASAN_BUILD).configure.log $(FUZZ_BUILD) $(FUZZ_BUILD).configure.log \
	       $(ARM_BUILD) $(ARM_BUILD).configure.log
