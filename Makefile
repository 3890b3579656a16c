# The two commands of the README: `make run` (demo end to end) and `make test` (whole suite).
# Both install missing Debian packages and the real tokenizer first (scripts/setup.sh, idempotent).
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all setup build run test clean asan

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/build.ninja:
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > $(BUILD).configure.log 2>&1 || (cat $(BUILD).configure.log; exit 1)

build: setup $(BUILD)/build.ninja
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	@bash scripts/demo.sh

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD) $(BUILD).configure.log
