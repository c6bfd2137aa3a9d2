#!/usr/bin/env bash
# A manual check, not part of `make test`: builds and runs
# tests/downstream-build (seven kernels compiled at build time by the
# packaged vkcompute-build, run on the packaged vkcompute) inside a fresh
# Ubuntu 24.04 root with only Ubuntu's shaderc packages, no
# SHADERC_LIB_DIR and none of this project's set-up, timing the clean
# release build. Needs root, debootstrap, and the Ubuntu archive
# (archive.ubuntu.com); the host's Rust toolchain is bind-mounted in.
#
#   sudo scripts/ubuntu-check.sh [ROOT_DIR]   # default /tmp/ubuntu-noble
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
chroot_dir=${1:-/tmp/ubuntu-noble}
packages=libshaderc-dev,glslang-dev,spirv-tools,g++,libc6-dev,libvulkan1,mesa-vulkan-drivers,ca-certificates

if [ ! -x "$chroot_dir/usr/bin/apt-get" ]; then
  # Ubuntu's keyring is not on a Debian host; the archive is reached over
  # HTTP without signature checks, acceptable for a throw-away root.
  debootstrap --variant=minbase --no-check-gpg --components=main,universe \
    --include="$packages" noble "$chroot_dir" http://archive.ubuntu.com/ubuntu \
    /usr/share/debootstrap/scripts/gutsy
fi

# The packaged crates, as a user gets them from crates.io.
work="$chroot_dir/work"
rm -rf "$work"
mkdir -p "$work"
cd "$root"
# shellcheck source=scripts/packaged.sh
source "$root/scripts/packaged.sh"
packaged "$work" vkcompute-spirv vkcompute vkcompute-build
rm -rf "$work/package-target"
cp -r tests/downstream-build "$work/downstream-build"
cp Cargo.lock "$work/downstream-build/Cargo.lock"

cp /etc/resolv.conf "$chroot_dir/etc/resolv.conf"
mounts=(proc sys dev "${RUSTUP_HOME:-$HOME/.rustup}" "${CARGO_HOME:-$HOME/.cargo}")
cleanup() {
  for m in "${mounts[@]}"; do
    umount "$chroot_dir/${m#/}" 2>/dev/null || true
  done
}
trap cleanup EXIT
for m in "${mounts[@]}"; do
  case $m in
    /*) mkdir -p "$chroot_dir$m"; mount --bind "$m" "$chroot_dir$m" ;;
    *) mount --bind "/$m" "$chroot_dir/$m" ;;
  esac
done

chroot "$chroot_dir" /usr/bin/env -i HOME="$HOME" \
  PATH="${CARGO_HOME:-$HOME/.cargo}/bin:/usr/bin:/bin" \
  RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" \
  CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}" /bin/bash -c '
    set -euo pipefail
    . /etc/os-release
    echo "ubuntu-check: $PRETTY_NAME, shaderc $(dpkg-query -W -f="\${Version}" libshaderc-dev),"\
      "glslang $(dpkg-query -W -f="\${Version}" glslang-dev); SHADERC_LIB_DIR ${SHADERC_LIB_DIR:-unset}"
    cd /work/downstream-build
    TIMEFORMAT="%0R s (CPU %0U s user, %0S s system)"
    { time cargo build -q --release --target-dir /work/target >&3 2>&3; } 3>&2 2>/work/took
    echo "ubuntu-check: clean release build with build-time shaders took $(cat /work/took)"
    /work/target/release/downstream-build
  '
