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

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
rm -rf "$work"
mkdir -p "$work"
# --no-verify: building the package is what the downstream build below does.
# --allow-dirty: so that uncommitted work can be checked too.
# With the kernel model it depends on (vkcompute-spirv), packaged together:
# unpacked beside it, the downstream crates' `[patch.crates-io]` finds it.
env -u SHADERC_LIB_DIR -u VULKAN_SDK cargo package -q --no-verify --allow-dirty \
  -p vkcompute-spirv -p vkcompute --target-dir "$work/package-target"
tar -xzf "$work/package-target/package/vkcompute-$version.crate" -C "$work"
mv "$work/vkcompute-$version" "$work/vkcompute"
spirv_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' vkcompute-spirv/Cargo.toml | head -n 1)
tar -xzf "$work/package-target/package/vkcompute-spirv-$spirv_version.crate" -C "$work"
mv "$work/vkcompute-spirv-$spirv_version" "$work/vkcompute-spirv"
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
build_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' vkcompute-build/Cargo.toml | head -n 1)
cargo package -q --no-verify --allow-dirty -p vkcompute-spirv -p vkcompute-build \
  --target-dir "$work/package-target"
tar -xzf "$work/package-target/package/vkcompute-build-$build_version.crate" -C "$work"
mv "$work/vkcompute-build-$build_version" "$work/vkcompute-build"
cp -r "$root/tests/downstream-build" "$work/downstream-build"
cp "$root/Cargo.lock" "$work/downstream-build/Cargo.lock"
cd "$work/downstream-build"
if cargo tree -q -e normal | grep -q shaderc; then
  echo "downstream-build: shaderc is among the normal dependencies:" >&2
  cargo tree -e normal >&2
  exit 1
fi
start=$(date +%s)
env -u SHADERC_LIB_DIR -u VULKAN_SDK -u RUSTFLAGS -u CARGO_TARGET_DIR \
  CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}" \
  cargo build -q --release --target-dir "$work/target-build"
end=$(date +%s)
echo "downstream-build: clean release build with build-time shaders (vkcompute-build) took $((end - start)) s"
"$work/target-build/release/downstream-build"
# The compile-fail doctests: wrong element type, buffer count, push struct.
env -u SHADERC_LIB_DIR -u VULKAN_SDK -u RUSTFLAGS -u CARGO_TARGET_DIR \
  cargo test -q --release --doc --target-dir "$work/target-build" 2>&1 | tail -n 3
