# Two commands do all of the set-up on a fresh Debian/Ubuntu machine:
#   make demo   installs what is missing, then runs the quickstart example
#   make test   the same set-up, then fmt, clippy and the whole test suite
#               under the Vulkan validation layers
# scripts/setup.sh installs only what is missing and is quick when nothing is.

CARGO := ./scripts/cargo.sh
# Any validation message aborts examples and doctests run by `make test`;
# the integration tests check their own messages through the harness.
# Tests and examples keep no pipeline cache on disk (the user's cache
# directory stays untouched; tests/pipeline_cache.rs uses its own).
STRICT := VKCOMPUTE_VALIDATION=abort VKCOMPUTE_PIPELINE_CACHE=off
# One test at a time within each test binary: the Khronos validation layer
# of Debian 12 (1.3.239) can crash when one thread creates a device while
# another records commands on a different one (a race inside the layer,
# seen in tests/model.rs under load; not a rule vkcompute breaks).
SERIAL := RUST_TEST_THREADS=1

.PHONY: all setup demo test check lint unit bench bench-quick clean spirv downstream matmul mpi-test mpi-spirv gpu-check

all: test

setup:
	@./scripts/setup.sh

demo: setup
	$(CARGO) run --release --example quickstart

lint: setup
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --all-features -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc -q --workspace --all-features --no-deps

# The second driver (Mesa 25's lavapipe, unpacked by setup into
# .setup/mesa25): the integration tests, the examples and the quick
# benchmark run on it too. `$(DRIVER2) command` runs a command on it.
DRIVER2 := ./scripts/driver2.sh
# tests/reliability.rs's leak check (exact counts, so any leak shows) runs
# 25,000 create/use/drop cycles on each driver here (about 16 s against
# 65 s for its default 100,000, which is a long run: CONTRIBUTING.md), to
# keep `make test` under 20 minutes; more than its bound of 20,000
# buffers waiting to be freed, so that bound can fail.
LEAK := VKCOMPUTE_LEAK_CYCLES=25000

unit: setup
	$(STRICT) $(SERIAL) $(LEAK) $(CARGO) test --all-features
	$(CARGO) test -p vkcompute-build
	$(CARGO) test -p vkcompute-spirv --all-features
	@echo "== the library's and integration tests on the second driver"
	$(STRICT) $(SERIAL) $(LEAK) $(DRIVER2) $(CARGO) test --all-features --tests

EXAMPLES := quickstart tour saxpy reduce embedding trace

# The packaged crate, as a new user gets it: default features, no shader
# toolchain in the environment, a fresh target directory (timed).
downstream: setup
	$(STRICT) ./scripts/downstream.sh

# vkcompute-mpi (the workspace's MPI crate): its unit tests (the planner's
# choices among them), tests/architecture.rs (its layers), the check of its
# checked-in SPIR-V (feature shader-compiler), and tests/ranks/, which runs
# itself under `mpirun --oversubscribe --timeout 300 -np N` for N = 2, 3
# and 4 (one validated lavapipe context per rank, both memory paths) and
# fails if any rank fails (feature test-counters: the counters it checks).
# VKCOMPUTE_MPI_RANKS="2 3 4" picks the rank counts. tests/faults.rs
# (ranks that stall, die or come late), tests/threads.rs (threads on
# communicators) and tests/large.rs (2^31 bytes on every path, 2 ranks;
# VKCOMPUTE_MPI_HUGE: vkcompute-mpi/README.md) launch their own mpirun
# runs the same way.
# tests/ranks/ again on the second driver, with 4 ranks, without the
# 64 MiB checks (VKCOMPUTE_MPI_LARGE=0: sizes are the first driver's
# business; the second is there for what drivers do differently, and
# `make test` must stay under 20 minutes). Then a smoke run
# of the benchmark (built by the tests, debug, under the validation layer)
# on 2 ranks (every case), and the training example on 4.
MPIRUN := OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe --timeout 120
mpi-test: setup
	$(STRICT) $(CARGO) test -p vkcompute-mpi --all-features
	@echo "== vkcompute-mpi's ranks on the second driver (4 ranks)"
	$(STRICT) VKCOMPUTE_MPI_RANKS=4 VKCOMPUTE_MPI_LARGE=0 $(DRIVER2) $(CARGO) test -p vkcompute-mpi --all-features --test ranks
	$(STRICT) $(MPIRUN) -np 2 $${CARGO_TARGET_DIR:-target}/debug/examples/mpi_bench --quick
	$(STRICT) $(MPIRUN) -np 4 $${CARGO_TARGET_DIR:-target}/debug/examples/train

# Recompiles vkcompute-mpi/shaders/*.comp into vkcompute-mpi/shaders/spv/;
# commit the result. `make mpi-test` fails while they differ.
mpi-spirv: setup
	VKCOMPUTE_REFRESH_SPIRV=1 $(CARGO) test -p vkcompute-mpi --all-features --test shipped_spirv

# The examples and the quick benchmark (the default memory path on the
# first driver, the staging path on the second; each driver's integration
# tests cover both), then the GPU check's quick mode on lavapipe (the
# binaries built above), so that the script a GPU machine runs keeps
# working.
test: lint unit downstream mpi-test
	@for d in "" "$(DRIVER2)"; do \
	  for e in $(EXAMPLES); do \
	    echo "== example $$e $${d:+(second driver)}"; \
	    $(STRICT) $$d $(CARGO) run -q --example $$e || exit 1; \
	  done; \
	  echo "== example printf (feature glsl) $${d:+(second driver)}"; \
	  $(STRICT) $$d $(CARGO) run -q --all-features --example printf || exit 1; \
	  echo "== example matmul (own kernel, built by vkcompute-build) $${d:+(second driver)}"; \
	  $(STRICT) $$d $(CARGO) run -q -p matmul || exit 1; \
	  if [ -z "$$d" ]; then \
	    echo "== bench --quick (release), the default path"; \
	    $(CARGO) run -q --release --example bench -- --quick || exit 1; \
	  else \
	    echo "== bench --quick (release), the staging path (second driver)"; \
	    $$d $(CARGO) run -q --release --example bench -- --quick --staging || exit 1; \
	  fi; \
	done
	@echo "== the GPU check, quick mode, on lavapipe"
	./scripts/gpu-check.sh --quick

# Recompiles shaders/*.comp into the shipped SPIR-V (shaders/spv/*.spv),
# validating it; commit the result. `make test` fails while they differ.
spirv: setup
	VKCOMPUTE_REFRESH_SPIRV=1 $(CARGO) test --lib --features shader-compiler -- --exact \
	  shader_build::shipped_spirv::shipped_spirv_matches_the_sources --nocapture

# Your own tiled GLSL kernel, compiled and typed by vkcompute-build.
matmul: setup
	$(CARGO) run --release -p matmul

bench: setup
	$(CARGO) run --release --example bench

# On a machine with a GPU and its Vulkan driver: the integration tests, the
# examples, the benchmark (both paths) and vkcompute-mpi's ranks on it, one
# report (target/gpu-check/report.txt). For a machine without Rust,
# `scripts/gpu-check.sh pack DIR` here and `scripts/gpu-check.sh run DIR
# REPORT` there (CONTRIBUTING.md).
gpu-check: setup
	./scripts/gpu-check.sh

clean:
	cargo clean
	rm -rf .setup
