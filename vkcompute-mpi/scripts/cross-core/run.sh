#!/bin/bash
# The staged send/recv against the hand-over of data between the VM's two
# cores (BENCHMARKS.md, vkcompute-mpi): for each of RUNS runs (default 10),
# the cross-core rate of `probe.c` (GB/s) before and after, and the
# staged send/recv of 64 MiB on 2 and 4 ranks as mpi_bench prints it
# (device over host MPI in the same run). Run from the repository root
# after `cargo build --release -p vkcompute-mpi --example mpi_bench`
# (the environment of `.setup/env.sh`). Needs a C compiler.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
cc -O2 -pthread -o "$build/probe" "$here/probe.c"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bench=${BENCH:-target/release/examples/mpi_bench}
B=$((64 << 20))
ratio() {
  # The last staged line and the host line after it: device busbw over
  # host's ("?" where the run printed none).
  { grep '^{"case":"sendrecv' || true; } | { grep -A1 '"path":"staged"' || true; } |
    tail -n 2 | sed -n 's/.*"busbw":\([0-9.]*\).*/\1/p' | paste -sd' ' |
    awk '{ if (NF == 2) printf "%.2f", $1 / $2; else printf "?" }'
}
for run in $(seq 1 "${RUNS:-10}"); do
  line="probe $("$build/probe")"
  for np in 2 4; do
    out=$(mpirun --oversubscribe --timeout 120 -np "$np" "$bench" --min-bytes $B \
      --max-bytes $B --iters 20 --staging --cases sendrecv 2>&1) || true
    line="$line, $np ranks $(echo "$out" | ratio)"
  done
  echo "run $run: $line, probe $("$build/probe")"
done
