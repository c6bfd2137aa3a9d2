#!/usr/bin/env bash
# Builds and runs a crate that depends on the *packaged* vkcompute with
# default features, the way a new user would: `cargo package`, unpack the
# .crate, build tests/downstream against it in a fresh target directory with
# no shader toolchain in the environment (SHADERC_LIB_DIR, VULKAN_SDK unset),
# and run it. Prints the clean build's time. Run by `make test`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work="$root/target/downstream"
cd "$root"

rm -rf "$work"
mkdir -p "$work"
# shellcheck source=scripts/packaged.sh
source "$root/scripts/packaged.sh"
# With the kernel model it depends on (vkcompute-spirv), packaged together.
packaged "$work" vkcompute-spirv vkcompute
cp -r "$root/tests/downstream" "$work/downstream"
# The versions this repository is tested with (no registry look-ups needed).
cp "$root/Cargo.lock" "$work/downstream/Cargo.lock"

cd "$work/downstream"
start=$(date +%s)
env -u SHADERC_LIB_DIR -u VULKAN_SDK -u RUSTFLAGS -u CARGO_TARGET_DIR \
  CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}" \
  cargo build -q --target-dir "$work/target"
end=$(date +%s)
echo "downstream: clean build of the packaged crate (default features) took $((end - start)) s"
env -u SHADERC_LIB_DIR -u VULKAN_SDK "$work/target/debug/vkcompute-downstream"

# The build-time path: a crate whose build.rs compiles its own shaders with
# the packaged vkcompute-build (which links shaderc into the build script
# only), running them on the packaged vkcompute with default features, as
# on a stock Debian machine: the distribution's shaderc, glslang and
# SPIRV-Tools packages, and no SHADERC_LIB_DIR or VULKAN_SDK
# (vkcompute-spirv's build.rs completes Debian's split shaderc). Clean
# release build, timed.
cd "$root"
packaged "$work" vkcompute-spirv vkcompute-build
# What the three packages hold (`cargo package --list`, which reads the
# manifests only): the shipped SPIR-V in, the repository's development
# files out, vkcompute-build's README in.
listing() { cargo package -q --list --allow-dirty -p "$1"; }
vk_files=$(listing vkcompute)
build_files=$(listing vkcompute-build)
spirv_files=$(listing vkcompute-spirv)
shipped=$(find shaders/spv -name '*.spv' | sort)
missing=$(comm -23 <(echo "$shipped") <(echo "$vk_files" | sort))
if [ -z "$shipped" ] || [ -n "$missing" ]; then
  echo "packaging: the vkcompute package lacks shipped SPIR-V: ${missing:-no shaders/spv/*.spv found}" >&2
  exit 1
fi
unwanted=$(printf '%s\n' "$vk_files" "$build_files" "$spirv_files" |
  grep -E '^(tests/downstream|scripts/|\.ci/|Makefile$|\.setup|target/)' || true)
if [ -n "$unwanted" ]; then
  echo "packaging: development files in a package:" >&2
  echo "$unwanted" >&2
  exit 1
fi
if ! echo "$build_files" | grep -qx 'README.md'; then
  echo "packaging: vkcompute-build's package has no README.md" >&2
  exit 1
fi
# The API docs on default features (what `cargo doc` shows a user without
# `glsl`): no broken links (`make lint` documents all features).
RUSTDOCFLAGS="-D warnings" cargo doc -q --no-deps -p vkcompute -p vkcompute-spirv
echo "packaging: vkcompute ($(echo "$vk_files" | wc -l) files, $(echo "$shipped" | wc -l) shipped SPIR-V modules), vkcompute-spirv ($(echo "$spirv_files" | wc -l)) and vkcompute-build ($(echo "$build_files" | wc -l), README in) hold no development files"
cp -r "$root/tests/downstream-build" "$work/downstream-build"
cp "$root/Cargo.lock" "$work/downstream-build/Cargo.lock"
cd "$work/downstream-build"
if cargo tree -q -e normal | grep -q shaderc; then
  echo "downstream-build: shaderc is among the normal dependencies:" >&2
  cargo tree -e normal >&2
  exit 1
fi
# With its CPU time and the load: on a shared machine the wall time is
# the other builds' as much as this one's (target: under 2 minutes on an
# idle 2-core machine).
load_before=$(cut -d ' ' -f 1 /proc/loadavg)
TIMEFORMAT="%0R s (CPU %0U s user, %0S s system)"
took=$( { time env -u SHADERC_LIB_DIR -u VULKAN_SDK -u RUSTFLAGS -u CARGO_TARGET_DIR \
  CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}" \
  cargo build -q --release --target-dir "$work/target-build" >&3 2>&3; } 3>&2 2>&1 )
echo "downstream-build: clean release build with build-time shaders (vkcompute-build) took $took;" \
  "load average $load_before before, $(cut -d ' ' -f 1 /proc/loadavg) after, $(nproc) cores"
"$work/target-build/release/downstream-build"

# vkcompute-build's README walkthrough, as written: its three files
# (shaders/scale.comp, build.rs, src/main.rs, each after a
# `<!-- walkthrough: FILE -->` line) in a fresh crate whose dependencies
# are the unpacked packages, built in the same target directory, run.
walk="$work/walkthrough"
mkdir -p "$walk/shaders" "$walk/src"
awk -v dir="$walk" '
  /^<!-- walkthrough: [^ ]+ -->$/ { file = $3; next }
  file != "" && /^```/ { if (inside) { inside = 0; file = "" } else { inside = 1 }; next }
  inside { print > (dir "/" file) }
' "$root/vkcompute-build/README.md"
for f in shaders/scale.comp build.rs src/main.rs; do
  [ -s "$walk/$f" ] || { echo "walkthrough: the README has no $f" >&2; exit 1; }
done
cat > "$walk/Cargo.toml" <<'TOML'
[package]
name = "walkthrough"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
vkcompute = { path = "../vkcompute" }

[build-dependencies]
vkcompute-build = { path = "../vkcompute-build" }

[patch.crates-io]
vkcompute-spirv = { path = "../vkcompute-spirv" }

[workspace]
TOML
cp "$root/Cargo.lock" "$walk/Cargo.lock"
(cd "$walk" && env -u SHADERC_LIB_DIR -u VULKAN_SDK -u RUSTFLAGS -u CARGO_TARGET_DIR \
  CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}" \
  cargo build -q --release --target-dir "$work/target-build")
out=$("$work/target-build/release/walkthrough")
echo "walkthrough (vkcompute-build's README, as written): $out"
case "$out" in "scaled 1000 floats on "*) ;; *) exit 1 ;; esac
# The compile-fail doctests: wrong element type, buffer count, push struct.
env -u SHADERC_LIB_DIR -u VULKAN_SDK -u RUSTFLAGS -u CARGO_TARGET_DIR \
  cargo test -q --release --doc --target-dir "$work/target-build" 2>&1 | tail -n 3
