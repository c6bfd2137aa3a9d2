#!/usr/bin/env bash
# The GPU check: vkcompute's integration tests, examples, benchmark and
# MPI ranks on this machine's default Vulkan device, and one report file
# with the device, its driver, each step's result and every figure.
#
#   scripts/gpu-check.sh [--quick] [REPORT]        build here with cargo, then run
#   scripts/gpu-check.sh pack [--quick] DIR        build and gather the binaries in DIR
#   scripts/gpu-check.sh run [--quick] DIR REPORT  run from DIR: no cargo, no source tree
#
# `pack` is for a machine without Rust (a lent GPU machine): it builds
# release binaries here (profile `gpu-check`: release, stripped), packs
# them into DIR/bin.tar.xz with a MANIFEST, and where `apt-get download`
# works adds Debian's Vulkan loader and validation layer to DIR/debs. `run`
# installs nothing: it unpacks those packages into a temporary folder, and
# only where the machine lacks the loader or the layer. A step that needs
# what the machine lacks (`mpirun`, the validation layer) is reported as
# skipped; a step that would pass the time budget (about 9 minutes, 4 in
# quick mode) is too.
#
# `--quick` (what `make test` runs, on lavapipe): the binaries `make test`
# has already built (debug; the benchmark in release), two test binaries,
# two examples, two benchmark cases, and the MPI benchmark on 2 ranks.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cargo_sh="$root/scripts/cargo.sh"
# The test binaries whose tests the quick mode runs.
QUICK_TESTS="copies views"
QUICK_EXAMPLES="quickstart tour"
# Test binaries that read the source tree at the path they were built in
# (checks of the sources, not of the device): run only where it exists.
SOURCE_TESTS="architecture kernel_model shipped_spirv"
# vkcompute-mpi's test binaries (they link Open MPI; `ranks`, `faults` and
# `threads` start their own mpirun): run in the MPI step.
MPI_TESTS="ranks faults threads shipped_spirv vkcompute_mpi"

die() { echo "gpu-check: $*" >&2; exit 2; }

usage() {
    sed -n '5,7p' "$0" | sed 's/^# *//' >&2
    exit 2
}

# The executables of a cargo build's JSON messages, one "KIND PATH" a line
# (KIND: test for test harness binaries, example, bin).
executables() {
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    exe = m.get("executable")
    if m.get("reason") != "compiler-artifact" or not exe:
        continue
    kind = m["target"]["kind"][0]
    if m["profile"]["test"]:
        kind = "test"
    print(kind, exe)
'
}

# The target's name: the file name without cargo's hash.
target_name() {
    basename "$1" | sed -E 's/-[0-9a-f]{16}$//'
}

pack() {
    local quick=$1 dir=$2
    rm -rf "$dir"
    mkdir -p "$dir/bin/tests" "$dir/bin/examples"
    local list
    list=$(mktemp)
    if [ "$quick" = 1 ]; then
        # What `make test` built: the tests with all features, the
        # examples with default features, the benchmark in release, and
        # vkcompute-mpi's examples with all features.
        local tests=() examples=()
        for t in $QUICK_TESTS; do tests+=(--test "$t"); done
        for e in $QUICK_EXAMPLES; do examples+=(--example "$e"); done
        "$cargo_sh" test -q --all-features --no-run "${tests[@]}" \
            --message-format=json | executables >>"$list" || return 1
        "$cargo_sh" build -q "${examples[@]}" --message-format=json | executables >>"$list" || return 1
        "$cargo_sh" build -q --release --example bench --message-format=json | executables >>"$list" || return 1
        "$cargo_sh" build -q -p vkcompute-mpi --all-features --example mpi_bench \
            --message-format=json | executables >>"$list" || return 1
    else
        local profile=(--config 'profile.gpu-check.inherits="release"'
            --config 'profile.gpu-check.strip=true'
            --config 'profile.gpu-check.debug=false' --profile gpu-check)
        "$cargo_sh" test -q --workspace --all-features --no-run "${profile[@]}" \
            --message-format=json | executables >>"$list" || return 1
        "$cargo_sh" build -q --workspace --all-features --examples --bins "${profile[@]}" \
            --message-format=json | executables >>"$list" || return 1
    fi
    local kind exe name
    while read -r kind exe; do
        name=$(target_name "$exe")
        case $kind in
            test) dest="$dir/bin/tests/$name" ;;
            *) dest="$dir/bin/examples/$name" ;;
        esac
        if [ "$quick" = 1 ]; then
            ln -sf "$exe" "$dest"
        else
            cp "$exe" "$dest"
        fi
    done <"$list"
    rm -f "$list"
    {
        echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
        echo "packed: $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -n)"
        echo "rustc: $(rustc -V 2>/dev/null)"
        echo "profile: $([ "$quick" = 1 ] && echo 'dev (tests, examples), release (bench)' || echo 'gpu-check (release, stripped)')"
        echo "sources: $root"
    } >"$dir/MANIFEST"
    if [ "$quick" = 0 ]; then
        # Debian's loader and validation layer, for a machine without them.
        mkdir -p "$dir/debs"
        if (cd "$dir/debs" && apt-get download libvulkan1 vulkan-validationlayers >/dev/null 2>&1); then
            echo "debs: $(cd "$dir/debs" && ls | tr '\n' ' ')" >>"$dir/MANIFEST"
        else
            echo "debs: none (apt-get download failed here)" >>"$dir/MANIFEST"
            rmdir "$dir/debs" 2>/dev/null
        fi
        tar -C "$dir" -cf - bin | xz -T2 -9 >"$dir/bin.tar.xz" || return 1
        rm -rf "$dir/bin"
        echo "gpu-check: packed $(du -sh "$dir" | cut -f1) into $dir"
    fi
}

# ---- run -----------------------------------------------------------------

now() { date +%s; }

# Appends to the report.
say() { printf '%s\n' "$*" >>"$report"; }

# A step's result line, and for a failure the end of its log.
result() {
    local status=$1 what=$2 secs=$3 log=${4:-}
    say "$status $what (${secs} s)"
    case $status in
        PASS) passed=$((passed + 1)) ;;
        FAIL) failed=$((failed + 1))
            if [ -n "$log" ] && [ -f "$log" ]; then
                say "    --- last lines of its output:"
                tail -n 40 "$log" | sed 's/^/    /' >>"$report"
            fi ;;
        SKIP) skipped=$((skipped + 1)) ;;
    esac
}

# Seconds left of the budget.
left() { echo $((deadline - $(now))); }

# Runs a command with a time limit (and the budget's), logging to LOG;
# records PASS/FAIL under WHAT.
step() {
    local what=$1 log=$2 limit=$3
    shift 3
    local rest
    rest=$(left)
    if [ "$rest" -lt 10 ]; then
        result SKIP "$what: out of time" 0
        return 1
    fi
    [ "$limit" -gt "$rest" ] && limit=$rest
    local t0
    t0=$(now)
    if (cd "$work" && timeout -k 10 "$limit" "$@") >"$log" 2>&1; then
        result PASS "$what" $(($(now) - t0))
        return 0
    fi
    local rc=$? secs=$(($(now) - t0))
    # timeout's 124, or a command (mpirun) that exits its own way when stopped.
    if [ $rc = 124 ] || [ "$secs" -ge "$limit" ]; then
        what="$what: stopped at its limit of $limit s"
    fi
    result FAIL "$what" "$secs" "$log"
    return 1
}

has_layer() {
    local d add=${VK_ADD_LAYER_PATH:-} layers=${VK_LAYER_PATH:-}
    for d in ${add//:/ } ${layers//:/ } /usr/share/vulkan/explicit_layer.d \
        /etc/vulkan/explicit_layer.d /usr/local/share/vulkan/explicit_layer.d; do
        [ -f "$d/VkLayer_khronos_validation.json" ] && return 0
    done
    return 1
}

run() {
    local quick=$1 dir=$2
    report=$3
    [ -d "$dir" ] || die "no such folder: $dir"
    dir=$(cd "$dir" && pwd)
    case $report in /*) ;; *) report=$PWD/$report ;; esac
    local start
    start=$(now)
    deadline=$((start + $([ "$quick" = 1 ] && echo 240 || echo 560)))
    passed=0 failed=0 skipped=0
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/logs" "$(dirname "$report")"
    : >"$report"
    local bin=$dir/bin
    if [ -f "$dir/bin.tar.xz" ]; then
        tar -C "$work" -xJf "$dir/bin.tar.xz" || die "cannot unpack $dir/bin.tar.xz"
        bin=$work/bin
    fi

    # The driver: the NVIDIA ICD where the loader's default paths miss it.
    local nvidia_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] && [ -f "$nvidia_icd" ]; then
        export VK_DRIVER_FILES=$nvidia_icd
    fi
    # The loader and the layer from the carried packages, where missing.
    local carried=""
    if [ -d "$dir/debs" ] && { ! ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1 ' || ! has_layer; }; then
        local deb
        for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$work/root" || die "cannot unpack $deb"; done
        export LD_LIBRARY_PATH="$work/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        export VK_ADD_LAYER_PATH="$work/root/usr/share/vulkan/explicit_layer.d${VK_ADD_LAYER_PATH:+:$VK_ADD_LAYER_PATH}"
        carried=" (loader and layer from $dir/debs, unpacked in a temporary folder)"
    fi
    export VKCOMPUTE_PIPELINE_CACHE=off RUST_TEST_THREADS=1
    local jobs=$(($(nproc) / 4))
    [ "$jobs" -lt 1 ] && jobs=1
    [ "$jobs" -gt 4 ] && jobs=4
    local validate=""
    has_layer && validate=1

    say "vkcompute gpu-check report ($([ "$quick" = 1 ] && echo quick || echo full))"
    say "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    sed 's/^/binaries: /' "$dir/MANIFEST" >>"$report" 2>/dev/null
    say "machine: $(uname -srm), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
    if command -v nvidia-smi >/dev/null; then
        say "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -4 | tr '\n' ';')"
    fi
    say "vulkan: VK_DRIVER_FILES=${VK_DRIVER_FILES:-${VK_ICD_FILENAMES:-(default)}}$carried; validation layer: $([ -n "$validate" ] && echo found || echo 'not found')"
    say ""
    say "== devices (examples/quickstart)"
    if [ -x "$bin/examples/quickstart" ] && (cd "$work" && timeout 60 "$bin/examples/quickstart") >"$work/logs/devices.log" 2>&1; then
        grep -E '^(found|using)' "$work/logs/devices.log" >>"$report"
    else
        say "no device opened:"
        tail -n 20 "$work/logs/devices.log" 2>/dev/null | sed 's/^/    /' >>"$report"
    fi
    say ""

    say "== tests (each binary, RUST_TEST_THREADS=1, validation on; $jobs at a time)"
    local t name sources names=()
    sources=$(sed -n 's/^sources: //p' "$dir/MANIFEST" 2>/dev/null)
    for t in "$bin"/tests/*; do
        [ -e "$t" ] || continue
        name=$(basename "$t")
        if [ "$quick" = 1 ] && ! [[ " $QUICK_TESTS " == *" $name "* ]]; then continue; fi
        [[ " $MPI_TESTS " == *" $name "* ]] && continue
        if [[ " $SOURCE_TESTS " == *" $name "* ]] && [ ! -d "$sources/src" ]; then
            result SKIP "test $name: reads the sources at $sources, absent here" 0
        elif [ -z "$validate" ]; then
            result SKIP "test $name: no validation layer (the tests need it)" 0
        else
            names+=("$name")
        fi
    done
    # Several binaries at once (each runs its tests one by one); each
    # writes its log, exit status and time.
    local limit running=0
    for name in "${names[@]}"; do
        limit=$(left)
        [ "$limit" -gt 300 ] && limit=300
        if [ "$limit" -lt 10 ]; then
            echo skipped >"$work/logs/test-$name.rc"
            continue
        fi
        local args=()
        # The library's unit tests: one of them reads the sources.
        [ "$name" = vkcompute ] && [ ! -d "$sources/src" ] && args=(--skip shipped_spirv)
        (
            t0=$(now)
            cd "$work" && VKCOMPUTE_LEAK_CYCLES=40000 timeout -k 10 "$limit" "$bin/tests/$name" \
                "${args[@]}" >"$work/logs/test-$name.log" 2>&1
            echo "$? $(($(now) - t0)) $limit" >"$work/logs/test-$name.rc"
        ) &
        running=$((running + 1))
        if [ "$running" -ge "$jobs" ]; then
            wait -n
            running=$((running - 1))
        fi
    done
    wait
    local rc secs lim
    for name in "${names[@]}"; do
        read -r rc secs lim <"$work/logs/test-$name.rc"
        case $rc in
            skipped) result SKIP "test $name: out of time" 0 ;;
            0) result PASS "test $name" "$secs"
                grep -E '^test result:' "$work/logs/test-$name.log" | sed 's/^/    /' >>"$report" ;;
            124) result FAIL "test $name: timed out after $lim s" "$secs" "$work/logs/test-$name.log" ;;
            *) result FAIL "test $name" "$secs" "$work/logs/test-$name.log" ;;
        esac
    done
    say ""

    say "== examples${validate:+ (VKCOMPUTE_VALIDATION=abort)}"
    local e
    for e in "$bin"/examples/*; do
        e=$(basename "$e")
        # The benchmarks and the MPI programs have steps of their own.
        case $e in bench | mpi_bench | train) continue ;; esac
        step "example $e" "$work/logs/example-$e.log" 120 \
            env ${validate:+VKCOMPUTE_VALIDATION=abort} "$bin/examples/$e"
    done
    say ""

    say "== benchmark (JSON lines: every figure)"
    if [ -x "$bin/examples/bench" ]; then
        local path flags
        for path in direct staging; do
            flags=()
            [ $path = staging ] && flags=(--staging)
            if [ "$quick" = 1 ]; then
                [ $path = staging ] && continue
                local c
                for c in upload dispatch; do
                    step "bench --quick --case $c" "$work/logs/bench-$c.log" 60 \
                        "$bin/examples/bench" --json --quick --case $c
                    grep '^{' "$work/logs/bench-$c.log" >>"$report"
                done
            else
                step "bench ($path)" "$work/logs/bench-$path.log" 240 \
                    "$bin/examples/bench" --json "${flags[@]}"
                grep '^{' "$work/logs/bench-$path.log" >>"$report"
            fi
        done
    else
        result SKIP "bench: not in $dir" 0
    fi
    say ""

    say "== vkcompute-mpi"
    if ! command -v mpirun >/dev/null; then
        result SKIP "MPI: no mpirun on this machine" 0
    elif [ ! -x "$bin/examples/mpi_bench" ]; then
        result SKIP "MPI: mpi_bench not in $dir" 0
    else
        local mpirun=(mpirun --oversubscribe --timeout 240)
        [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        if [ "$quick" = 1 ]; then
            step "mpi_bench --quick, 2 ranks" "$work/logs/mpi-quick.log" 120 \
                "${mpirun[@]}" -np 2 "$bin/examples/mpi_bench" --quick
            grep -E '^(\{|mpi_bench:)' "$work/logs/mpi-quick.log" >>"$report"
        else
            if [ -n "$validate" ]; then
                [ -x "$bin/tests/vkcompute_mpi" ] && step "vkcompute-mpi unit tests" \
                    "$work/logs/mpi-unit.log" 120 "$bin/tests/vkcompute_mpi"
                [ -x "$bin/tests/ranks" ] && step "vkcompute-mpi tests/ranks, 2 and 4 ranks" \
                    "$work/logs/ranks.log" 300 env VKCOMPUTE_MPI_RANKS="2 4" "$bin/tests/ranks"
            else
                result SKIP "vkcompute-mpi tests: no validation layer" 0
            fi
            local np p
            for np in 2 4; do
                for p in "" --staging; do
                    step "mpi_bench 64 MiB, $np ranks ${p:-(default path)}" "$work/logs/mpi-$np$p.log" 180 \
                        "${mpirun[@]}" -np $np "$bin/examples/mpi_bench" \
                        --min-bytes 67108864 --max-bytes 67108864 --iters 20 $p
                    grep -E '^(\{|mpi_bench:)' "$work/logs/mpi-$np$p.log" >>"$report"
                done
            done
            [ -x "$bin/examples/train" ] && step "train, 4 ranks" "$work/logs/train.log" 120 \
                "${mpirun[@]}" -np 4 "$bin/examples/train"
        fi
    fi
    say ""
    say "== $passed passed, $failed failed, $skipped skipped, in $(($(now) - start)) s"
    cat "$report"
    [ "$failed" = 0 ]
}

# ---- command line ----------------------------------------------------------

quick=0
cmd=build
case ${1:-} in
    pack | run) cmd=$1; shift ;;
    -h | --help) usage ;;
esac
if [ "${1:-}" = --quick ]; then quick=1; shift; fi
case $cmd in
    pack)
        [ $# = 1 ] || usage
        pack $quick "$1" || die "pack failed"
        ;;
    run)
        [ $# = 2 ] || usage
        run $quick "$1" "$2"
        ;;
    build)
        [ $# -le 1 ] || usage
        report=${1:-$root/target/gpu-check/report.txt}
        dir=$root/target/gpu-check/$([ $quick = 1 ] && echo quick || echo full)
        pack $quick "$dir" || die "pack failed"
        run $quick "$dir" "$report"
        ;;
esac
