# Thin wrapper: install missing Debian packages, configure, build, run, test.
#   make run    builds and runs `rayaccel discover` on this host
#   make test   builds and runs the whole suite through ctest
#   make asan   the suite under AddressSanitizer + UndefinedBehaviorSanitizer (hwloc's
#               libpciaccess component is left out there: it leaks at exit, not ours)
#   make tsan   the suite under ThreadSanitizer (without the fault zoo: TSan takes over the
#               signals and allocator that those tests provoke on purpose; nor UCX's
#               transport tests, nor the doc examples, which run transfers: UCX's memory
#               hooks crash under TSan)
#   make asan-transport  the transport, isolation and registry tests alone under ASan+UBSan,
#               and the C99 host of host.h (what CI runs on every change; quicker than the
#               whole suite)
#   make fuzz   every libFuzzer target (tests/fuzz) for FUZZ_SECONDS (300) each, with clang
BUILD_DIR ?= build
CMAKE_ARGS ?=
JOBS ?= $(shell nproc)

DEB_PACKAGES := cmake ninja-build g++ pkg-config libabsl-dev libspdlog-dev libgtest-dev \
                libgmock-dev libbenchmark-dev libhwloc-dev libhwloc-plugins hwloc-nox \
                libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc \
                libucx-dev ucx-utils iproute2 systemd python3-yaml libcpp-httplib-dev \
                libmicrohttpd-dev libgnutls28-dev nlohmann-json3-dev libcli11-dev \
                libfabric-dev libfabric-bin \
                python3-prometheus-client chromium chromium-driver python3-selenium curl \
                pybind11-dev python3-pybind11 python3-dev python3-venv python3-pytest python3-numpy \
                python3-grpcio python3-protobuf libssl-dev python3-torch python3-scipy dpkg-dev \
                python3-requests python3-cryptography python3-six python3-attr

# libFuzzer needs clang and its runtime; only `make fuzz` installs them.
FUZZ_DEB_PACKAGES := clang-14 libclang-rt-14-dev
FUZZ_SECONDS ?= 300

.PHONY: all deps configure build run test asan asan-transport tsan bench fuzz bazel clean format

all: build

deps:
	@missing=$$(for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
	  echo "Installing Debian packages:" $$missing; \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends $$missing; \
	fi

configure: deps
	@[ -f $(BUILD_DIR)/build.ninja ] || cmake -S . -B $(BUILD_DIR) -G Ninja $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# What rayaccel sees on this host; when it gives Ray no accelerator, a line saying so and a
# simulated example node, clearly marked, with the commands to run on real hardware.
run: build
	@"$(BUILD_DIR)/bin/rayaccel" discover
	@if [ "$$("$(BUILD_DIR)/bin/rayaccel" resources --json 2>/dev/null)" = "{}" ]; then \
	  echo; \
	  echo "No accelerator resources for Ray on this host (plugin status above)."; \
	  echo "A SIMULATED example node (examples/dgx-h100.json), to show what rayaccel reports:"; \
	  echo; \
	  "$(BUILD_DIR)/bin/rayaccel" discover --plugin-path "$(BUILD_DIR)/lib/rayaccel/plugins" \
	    --plugin sim --config sim.spec=examples/dgx-h100.json --no-host-topology && \
	  echo && \
	  echo "On a node with accelerators: $(BUILD_DIR)/bin/rayaccel discover, topo, ray-start-args;" && \
	  echo "to report one: $(BUILD_DIR)/bin/rayaccel capture --out node.json (docs/capture.md)"; \
	fi

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

asan: deps
	cmake --preset asan && cmake --build --preset asan -j $(JOBS) && ctest --preset asan -j $(JOBS)

# intercept_tls_get_addr=0: LeakSanitizer's record of dynamic TLS blocks (taken from
# __tls_get_addr) goes wrong with glibc 2.36 in a process that loads the CUDA plugin and the
# fake driver, and its scan at exit then crashes on a bogus block ("DTLS 9 at 0x16d-...").
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:handle_segv=0:intercept_tls_get_addr=0 \
            LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizers/lsan.supp \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 RAYACCEL_NO_DLCLOSE=1 \
            HWLOC_PLUGINS_BLACKLIST=hwloc_pci

asan-transport: deps
	cmake --preset asan && cmake --build build-asan -j $(JOBS) --target rayaccel_transport_tests \
	  rayaccel_host_c_user
	$(ASAN_ENV) tests/sanitizers/sharded.sh $(JOBS) build-asan/bin/rayaccel_transport_tests
	$(ASAN_ENV) build-asan/bin/rayaccel_host_c_user build-asan/lib/rayaccel/plugins \
	  examples/dgx-h100.json $(CURDIR)/build-asan/bin/rayaccel-plugin-host

tsan: deps
	cmake --preset tsan && cmake --build --preset tsan -j $(JOBS) && ctest --preset tsan -j $(JOBS)

# Every fuzz target (tests/fuzz) for FUZZ_SECONDS each, from the seed corpus; CI runs it
# briefly as a regression check (FUZZ_SECONDS=10), this default is a search.
fuzz: deps
	@missing=$$(for p in $(FUZZ_DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	cmake --preset fuzz && cmake --build --preset fuzz -j $(JOBS)
	tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

# The Bazel build (BUILD.bazel), offline on the system's libraries with Debian's Bazel 4, and
# its outputs checked (tests/bazel/build_and_check.sh); needs the CMake build for the suite.
bazel: build
	@dpkg-query -W -f='$${Status}\n' bazel-bootstrap 2>/dev/null | grep -q '^install ok installed' || { \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends bazel-bootstrap; }
	tests/bazel/build_and_check.sh $(BUILD_DIR)

bench: build
	$(BUILD_DIR)/bin/rayaccel_bench_discovery
	$(BUILD_DIR)/bin/rayaccel_bench_allocation
	$(BUILD_DIR)/bin/rayaccel_bench_agent
	bench/agent_rss.sh $(BUILD_DIR)
	bench/compare_lstopo.sh $(BUILD_DIR)

format:
	git ls-files '*.h' '*.cc' '*.c' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR) build-asan build-tsan
