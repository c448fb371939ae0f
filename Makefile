# Thin wrapper over CMake + Ninja. Every target installs what it needs first
# (Debian 12, as root), so a fresh machine needs only `make demo` / `make test`.

BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
APT_PACKAGES := cmake ninja-build g++ make git nlohmann-json3-dev libcli11-dev doctest-dev clang-format \
                libsqlite3-dev libssl-dev clang libclang-rt-14-dev libboost-dev python3 curl \
                chromium chromium-driver python3-torch python3-jsonschema libspdlog-dev \
                slurm-wlm munge slurm-wlm-basic-plugins-dev libslurm-dev gcc libc6-dev libyaml-cpp-dev \
                help2man dpkg-dev systemd jq etcd-server etcd-client zlib1g-dev

.PHONY: all deps build demo test package test-package test-sanitize sanitize fuzz format format-check \
        bench bench-recovery clean

all: build

# Installs the Debian packages that are missing (nothing when all are there).
deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# The main job on its embedded default: topo-scheduler with no configuration
# (a fresh state directory under $(BUILD)), a demo topology, a few jobs from two
# tenants, the queue, a placement and the dashboard's address. The daemon
# keeps running; the last lines say how to stop it. `topo demo` is the offline
# placement demo.
demo: build
	scripts/demo.sh $(BUILD)

# Every test, through ctest.
test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The Debian packages, one per component, from the build above (cpack in
# $(BUILD); packaging/CMakeLists.txt): $(BUILD)/packages/toposched-*.deb.
package: build
	cmake --build $(BUILD) --target package -j $(JOBS)

# Builds those packages (cpack), installs them on this machine, runs the
# daemon and an agent from their units' ExecStart, smoke-tests them with the
# installed `topo` and purges everything (tests/package; root; `make test`
# runs it too).
test-package: build
	ctest --test-dir $(BUILD) -L package --output-on-failure

# Unit tests under AddressSanitizer and UndefinedBehaviorSanitizer, and the
# daemon tests (real daemon, TLS, CLI) against the sanitized binaries. Built
# with clang 14 (the main build is GCC 12), so every change also compiles
# warning-free with the second compiler. The agent tests (a daemon and real
# agents on 200-ms heartbeats) run one at a time: two sanitized clusters on
# two cores stall agents past three missed heartbeats, and their nodes go down.
sanitize test-sanitize: deps
	CC=clang CXX=clang++ cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTOPO_SANITIZE=ON
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target core_tests common_tests store_tests \
	  daemon_tests ha_tests cli_tests agent_gpu_tests agent_supervisor_tests agent_core_tests topo-scheduler \
	  topo topo-agent topo-slurm-task
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(ASAN_BUILD) -L 'unit|daemon' -LE '^agent$$' --output-on-failure -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(ASAN_BUILD) -L '^agent$$' --output-on-failure -j 1

# libFuzzer on the parsers of common/ (tests/fuzz): clang, ASan and UBSan in
# its own build directory, FUZZ_SECONDS in all on a copy of the seed corpus
# (kept between runs); a crash, a timeout or a broken round trip fails the
# target and leaves the input as $(FUZZ_BUILD)/crash-* (or timeout-*, oom-*).
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60

fuzz: deps
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DTOPO_FUZZ=ON -DTOPO_WERROR=OFF
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_parsers
	mkdir -p $(FUZZ_BUILD)/corpus && cp tests/fuzz/corpus/* $(FUZZ_BUILD)/corpus/
	UBSAN_OPTIONS=print_stacktrace=1 ./$(FUZZ_BUILD)/tests/fuzz/fuzz_parsers \
	  -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=30 -rss_limit_mb=4096 \
	  -dict=tests/fuzz/fuzz_parsers.dict -artifact_prefix=$(FUZZ_BUILD)/ -print_final_stats=1 \
	  $(FUZZ_BUILD)/corpus

FORMAT_FILES = $(shell git ls-files '*.cpp' '*.hpp' '*.h' '*.c' 2>/dev/null)

format:
	clang-format -i $(FORMAT_FILES)

format-check:
	clang-format --dry-run --Werror $(FORMAT_FILES)

# Placement (workload P) and replay (K, S, F) benchmarks; JSON in bench/results/.
# The full replay of 100,000-job S runs for a long time: `bench_replay --quick`
# is the 10,000-job version quoted in docs/benchmarks.md.
bench: build
	./$(BUILD)/bench/placement/bench_placement
	./$(BUILD)/bench/replay/bench_replay --quick
	./$(BUILD)/bench/api/bench_api

# Recovery (detection, MTTR, lost work over 24 injected faults) and agents held
# at 1 Hz heartbeats, against a real daemon and `topo-agent --simulate`; takes
# about 10 minutes. Not part of `bench`: it starts tens of thousands of loopback
# connections (see docs/benchmarks.md).
bench-recovery: build
	./$(BUILD)/bench/recovery/bench_recovery

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
