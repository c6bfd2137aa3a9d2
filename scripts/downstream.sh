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
env -u SHADERC_LIB_DIR -u VULKAN_SDK cargo package -q --no-verify --allow-dirty \
  --target-dir "$work/package-target"
tar -xzf "$work/package-target/package/vkcompute-$version.crate" -C "$work"
mv "$work/vkcompute-$version" "$work/vkcompute"
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
