# Thin wrapper over CMake so that a fresh machine needs only `make quickstart` / `make test`.
BUILD   ?= build
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build test quickstart test-asan fuzz fuzz-smoke format clean

all: build

deps:
	@bash scripts/setup-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > /dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The suite runs JOBS tests at once, each with as many OpenMP threads as the machine has cores:
# threads that spin at a barrier while their partner waits for a core (libgomp's default) made a
# loaded step 1.4-1.9x slower in wall time than threads that sleep there (bench_grpo_train at
# load 4 on 2 cores: 77-109 s against 56 s). Only the tests' scheduling: results are the same.
TEST_ENV ?= OMP_WAIT_POLICY=passive

test: build
	@bash tests/run_python_tests.sh check . $(BUILD) || true
	cd $(BUILD) && $(TEST_ENV) ctest --output-on-failure -j $(JOBS)

# Fine-tunes the embedded tiny model (models/tiny-arith) on a small arithmetic set.
quickstart: build
	$(BUILD)/rlhf train examples/quickstart.yaml

# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer.
test-asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DRLHF_SANITIZE=ON > /dev/null
	@cmake --build build-asan -j $(JOBS)
	cd build-asan && $(TEST_ENV) ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		ctest --output-on-failure -j $(JOBS)

# libFuzzer targets for every parser (fuzz/), built with clang under ASan + UBSan into build-fuzz,
# each run FUZZ_SECONDS on its seed corpus; any crash, leak, UB or timeout fails.
FUZZ_SECONDS ?= 60
fuzz: deps
	@cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Release -DRLHF_FUZZ=ON > /dev/null
	@cmake --build build-fuzz -j $(JOBS) --target fuzz_all
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/fuzz.sh build-fuzz

fuzz-smoke:
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=10

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) build-asan build-fuzz
