# stagger: two commands on a fresh Debian 12 machine, as root:
#   make demo   # install what is missing, build the tools, run the main job
#   make test   # the test suite (installs and builds the rest first)
BUILD_DIR ?= build
MAKEFLAGS += --no-print-directory
JOBS ?= 2
PYTHON ?= /usr/bin/python3
BUILD_TYPE ?= RelWithDebInfo

# UCX on one host: shared memory plus tcp (tcp carries connection set-up).
export UCX_TLS ?= sm,tcp
export UCX_WARN_UNUSED_ENV_VARS ?= n

.PHONY: all deps deps-test configure build demo bench test test-cpp test-python test-install bench-smoke test-sanitize sanitize-build sanitize-run test-sanitize-client test-torch2 test-torch2-if-ready fuzz clean

# Unit tests that also run under AddressSanitizer + UBSan.
SANITIZE_DIR ?= build-asan
SANITIZE_TESTS ?= format_test qos_test transport_test storage_test server_test metrics_test util_test
# The client's threaded tests under the same sanitizers: a target of its own
# (tests/README.md), as building the client under ASan adds about three
# minutes on two cores to make test.
SANITIZE_CLIENT_TESTS ?= client_test async_save_test incremental_test qos_save_test

# What `make demo` builds: the daemon, the CLI and the Python binding.
# Tests and benchmarks are built by `make build` (and so by make test).
TOOL_TARGETS ?= stagger-server stagger_bin _stagger

all: build

# The Debian packages, installed once: a stamp in the build directory
# remembers that the installer ran (again when the script changes).
# `deps` is what building needs; `deps-test` adds the test suite's
# (Ceph's daemons, radosgw, torch, pytest). Removing the build directory
# (make clean) forgets the stamps.
DEPS_STAMP := $(BUILD_DIR)/.deps-build
DEPS_TEST_STAMP := $(BUILD_DIR)/.deps-test
deps: $(DEPS_STAMP)
deps-test: $(DEPS_TEST_STAMP)
$(DEPS_STAMP): scripts/install-deps.sh
	@bash scripts/install-deps.sh
	@mkdir -p $(BUILD_DIR) && touch $@
$(DEPS_TEST_STAMP): scripts/install-deps.sh
	@bash scripts/install-deps.sh --test
	@mkdir -p $(BUILD_DIR) && touch $@

# CMake runs once; later builds regenerate by themselves when a
# CMakeLists.txt changes.
configure: $(BUILD_DIR)/CMakeCache.txt
$(BUILD_DIR)/CMakeCache.txt: $(DEPS_STAMP)
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DPython3_EXECUTABLE=$(PYTHON) > $(BUILD_DIR).configure.log 2>&1 \
	  || (cat $(BUILD_DIR).configure.log; rm -f $@; exit 1)

build: configure
	cmake --build $(BUILD_DIR) -j$(JOBS)

demo: configure
	cmake --build $(BUILD_DIR) -j$(JOBS) --target $(TOOL_TARGETS)
	$(BUILD_DIR)/bin/stagger demo

# Every benchmark once at its default size (bench/README.md).
bench: build
	STAGGER_BIN_DIR=$(CURDIR)/$(BUILD_DIR)/bin bench/run_all.sh

# The suite. The sanitizer build (CPU-bound compiling) runs beside the
# tests at the lowest priority (nice 19): the tests mostly wait on
# processes, disks and sockets, and take the cores whenever they want them;
# the build takes what they leave idle. Its output goes to
# $(SANITIZE_DIR).build.log, printed when it fails; the sanitizer run
# comes last. Ctrl-C or a failing test stops the build too (its own
# session: a process group the recipe's shell signals; sh's kill takes no
# "--").
test: deps-test build
	@echo "test: building $(SANITIZE_DIR)/ at low priority beside the tests ($(SANITIZE_DIR).build.log)"
	@setsid nice -n 19 $(MAKE) sanitize-build > $(SANITIZE_DIR).build.log 2>&1 & bg=$$!; \
	  trap 'kill -TERM -$$bg 2>/dev/null' INT TERM EXIT; \
	  $(MAKE) test-cpp test-python test-torch2-if-ready test-install bench-smoke \
	    || exit 1; \
	  wait $$bg || { cat $(SANITIZE_DIR).build.log; \
	    echo "test: the sanitizer build failed (above)"; exit 1; }; \
	  trap - INT TERM EXIT; \
	  $(MAKE) sanitize-run

test-cpp:
	cd $(BUILD_DIR) && ctest --output-on-failure -j$(JOBS) --timeout 300

# tests/python/test_torch.py needs torch (python3-torch, installed by
# deps); without it those tests are skipped and -rs prints why.
test-python:
	PYTHONPATH=$(BUILD_DIR)/python STAGGER_BIN_DIR=$(CURDIR)/$(BUILD_DIR)/bin \
	  $(PYTHON) -m pytest -q -rs tests/python

# cmake --install into a temporary prefix; examples/cpp_client built
# against it (find_package and pkg-config) and run against the installed
# stagger-server.
test-install:
	bash scripts/test-install.sh $(BUILD_DIR)

# Each benchmark once on a tiny size: they must run and print RESULT lines;
# no timing is asserted.
# bench/rados and bench/s3 start their own Ceph cluster; exit 2 (the
# cluster or radosgw cannot start) is a skip, as in rados_test.
bench-smoke:
	STAGGER_BIN_DIR=$(CURDIR)/$(BUILD_DIR)/bin bench/run_all.sh --smoke
	@for tier in rados s3; do out=$$(mktemp); \
	  STAGGER_BIN_DIR=$(CURDIR)/$(BUILD_DIR)/bin \
	  UCX_TLS=sm,tcp $(PYTHON) bench/$$tier/run.py --smoke >$$out 2>&1; \
	  rc=$$?; if [ $$rc -eq 0 ]; then tail -n 1 $$out; else cat $$out; fi; \
	  rm -f $$out; [ $$rc -eq 0 ] || [ $$rc -eq 2 ] || exit 1; done

test-sanitize: sanitize-build
	@$(MAKE) sanitize-run

sanitize-build: deps-test
	@cmake -S . -B $(SANITIZE_DIR) -DCMAKE_BUILD_TYPE=Debug -DSTAGGER_SANITIZE=ON \
	  -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DCMAKE_C_FLAGS_DEBUG=-g1 \
	  -DPython3_EXECUTABLE=$(PYTHON) > $(SANITIZE_DIR).configure.log 2>&1 \
	  || (cat $(SANITIZE_DIR).configure.log; exit 1)
	cmake --build $(SANITIZE_DIR) -j$(JOBS) --target $(SANITIZE_TESTS)

sanitize-run:
	cd $(SANITIZE_DIR) && ASAN_OPTIONS=detect_leaks=1 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --output-on-failure -j$(JOBS) --timeout 300 \
	  -R '^($(shell echo $(SANITIZE_TESTS) | sed 's/ /|/g'))\.'

# The tests that need torch 2.x (DTensor), in the venv bench/peers'
# script makes from PyPI when missing (about 5 GB); skipped, saying so,
# where PyPI cannot be reached.
test-torch2: build
	@py=$$(sh bench/peers/setup_venv.sh | tail -1); \
	if [ -z "$$py" ]; then echo "test-torch2: skipped (no torch 2.x: PyPI unreachable)"; exit 0; fi; \
	PYTHONPATH=$(BUILD_DIR)/python STAGGER_BIN_DIR=$(CURDIR)/$(BUILD_DIR)/bin \
	  $$py -m pytest -q -rs tests/python/test_dtensor.py

# In make test: the torch 2.x tests where the venv is there already. It is
# a dependency, made once like the Debian packages (.ci/run makes it before
# make test): making it takes about 3 minutes and 5.4 GB, which would take a
# first make test past 15 minutes on two cores.
test-torch2-if-ready:
	@py=$${STAGGER_PEERS_VENV:-$$HOME/.cache/stagger/peers-venv}/bin/python; \
	if [ -x "$$py" ] && "$$py" -c 'import torch, numpy, pytest' 2>/dev/null; then \
	  $(MAKE) --no-print-directory test-torch2; \
	else echo "test-torch2: skipped (no torch 2.x venv; make test-torch2 makes one from PyPI, about 5 GB)"; fi

test-sanitize-client:
	$(MAKE) test-sanitize SANITIZE_TESTS="$(SANITIZE_CLIENT_TESTS)"

# libFuzzer targets (tests/fuzz/README.md), built with clang, ASan and
# UBSan over all of their code, each run for FUZZ_SECONDS from its seed
# corpus; new inputs go to $(FUZZ_DIR)/corpus/<target>, crashes to
# $(FUZZ_DIR)/crash-*.
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= record manifest frame ports
fuzz:
	@bash scripts/install-deps.sh --fuzz
	@CC=clang-14 CXX=clang++-14 cmake -S . -B $(FUZZ_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSTAGGER_FUZZ=ON -DSTAGGER_WITH_CUDA=OFF -DSTAGGER_BUILD_BENCH=OFF \
	  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined" \
	  -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link,address,undefined" \
	  -DPython3_EXECUTABLE=$(PYTHON) > $(FUZZ_DIR).configure.log 2>&1 \
	  || (cat $(FUZZ_DIR).configure.log; exit 1)
	cmake --build $(FUZZ_DIR) -j$(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_DIR)/corpus/$$t && \
	  echo "== fuzz_$$t for $(FUZZ_SECONDS) s" && \
	  (cd $(FUZZ_DIR) && ./tests/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) \
	    -print_final_stats=1 corpus/$$t $(CURDIR)/tests/fuzz/$$t) || exit 1; \
	done

clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR).configure.log $(SANITIZE_DIR) $(SANITIZE_DIR).configure.log \
	  $(FUZZ_DIR) $(FUZZ_DIR).configure.log
