#!/bin/bash
# The host-MPI baseline of the dma-buf plan (vkcompute-mpi/DESIGN.md, "A
# dma-buf transport: the plan"): 64 MiB MPI_Send/MPI_Recv and MPI_Allreduce on 2
# and 4 ranks over pml ob1 and pml ucx, each beside an emulation of the
# staged path (memcpy, MPI, memcpy), and a 64 MiB memcpy; three runs.
# Needs Open MPI's mpicc (libopenmpi-dev, which `scripts/setup.sh`
# installs). Builds into a temporary folder; prints everything.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
mpicc -O2 -o "$build/bench" "$here/bench.c"
cc -O2 -o "$build/memcpy" "$here/memcpy.c"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
B=$((64 << 20)); IT=${IT:-10}
for rep in 1 2 3; do
  for np in 2 4; do
    for pml in ob1 ucx; do
      extra=""; [ "$pml" = ucx ] && extra="--mca pml_ucx_tls any --mca pml_ucx_devices any"
      cmd="mpirun --oversubscribe -np $np --mca pml $pml $extra $build/bench $B $IT"
      echo "# run $rep $(date +%T) loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
      echo "\$ $cmd"
      timeout 120 $cmd 2>&1 || echo "# exit $?"
    done
  done
  echo "# run $rep memcpy"
  "$build/memcpy" "$B" 10
done
