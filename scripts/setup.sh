#!/usr/bin/env bash
# Installs what vkcompute needs to build and test, and nothing that is already there.
#
#   - a Vulkan loader, a Vulkan driver (lavapipe, Mesa's CPU driver, where no
#     other driver is present) and the Khronos validation layers;
#   - Open MPI and libclang, for the vkcompute-mpi crate (rsmpi's bindgen);
#   - a shaderc that links: the Vulkan SDK's or a working system one where it
#     exists; on Debian/Ubuntu, whose libshaderc is linked without glslang, one
#     static archive merged from the distribution's own static libraries.
#
# Writes `.setup/env.sh` (read by scripts/cargo.sh) with the variables the
# build needs. Idempotent: a second run checks and returns in well under a second.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
setup_dir="$root/.setup"
env_file="$setup_dir/env.sh"
mkdir -p "$setup_dir"

say() { echo "setup: $*" >&2; }

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo_cmd=(sudo); fi
fi

# Debian packages, each with the file that proves it is installed.
# (Checking files rather than `dpkg -s` keeps a second run fast.)
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
libdir="/usr/lib/$multiarch"

missing=()
need() { # need PACKAGE FILE...
  local pkg=$1; shift
  local f
  for f in "$@"; do
    if ls $f >/dev/null 2>&1; then return 0; fi
  done
  missing+=("$pkg")
}

have_vulkan_sdk() { [ -n "${VULKAN_SDK:-}" ] && [ -d "$VULKAN_SDK/lib" ]; }

if command -v apt-get >/dev/null 2>&1; then
  need libvulkan1 "$libdir/libvulkan.so.1" /usr/lib/libvulkan.so.1
  need libvulkan-dev /usr/include/vulkan/vulkan.h
  need vulkan-tools /usr/bin/vulkaninfo
  need vulkan-validationlayers /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json
  # lavapipe: always installed, so that there is a device (CI has no GPU) and
  # the tests can run on it even where a GPU driver exists too.
  need mesa-vulkan-drivers /usr/share/vulkan/icd.d/lvp_icd*.json
  # vkcompute-mpi: Open MPI (mpirun, the library and its headers) and
  # libclang, which the `mpi` crate's build script (bindgen) loads.
  need openmpi-bin /usr/bin/mpirun
  need libopenmpi-dev "$libdir/openmpi/include/mpi.h" /usr/include/mpi.h "$libdir/libmpi.so"
  need libclang-dev "/usr/lib/llvm-*/lib/libclang.so" "$libdir/libclang.so"
  if ! have_vulkan_sdk && [ -z "${SHADERC_LIB_DIR:-}" ]; then
    need libshaderc-dev "$libdir/libshaderc_combined.a"
    need glslang-dev "$libdir/libglslang.a"
    need spirv-tools "$libdir/libSPIRV-Tools-opt.a"
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo_cmd[@]}" apt-get update -qq
    "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
else
  say "not a Debian/Ubuntu system: install the Vulkan loader, a Vulkan driver"
  say "(Mesa's lavapipe where there is no GPU), the Khronos validation layers"
  say "and shaderc (or the Vulkan SDK) with your package manager"
fi

# shaderc: decide what the build links against.
shaderc_dir=""
if [ -n "${SHADERC_LIB_DIR:-}" ]; then
  shaderc_dir="$SHADERC_LIB_DIR"   # the user's choice
elif have_vulkan_sdk; then
  shaderc_dir=""                   # shaderc-sys finds the SDK by itself
elif [ -f "$libdir/libshaderc_combined.a" ] && [ -f "$libdir/libglslang.a" ]; then
  # Debian's libshaderc_combined.a lacks glslang and SPIRV-Tools: merge them in.
  shaderc_dir="$setup_dir/shaderc"
  merged="$shaderc_dir/libshaderc_combined.a"
  if [ ! -f "$merged" ] || [ "$merged" -ot "$libdir/libshaderc_combined.a" ]; then
    say "merging Debian's shaderc, glslang and SPIRV-Tools into $merged"
    mkdir -p "$shaderc_dir"
    script="create $merged.tmp
addlib $libdir/libshaderc_combined.a"
    for lib in glslang MachineIndependent GenericCodeGen OSDependent OGLCompiler \
               SPIRV HLSL glslang-default-resource-limits SPIRV-Tools-opt SPIRV-Tools; do
      if [ -f "$libdir/lib$lib.a" ]; then
        script="$script
addlib $libdir/lib$lib.a"
      fi
    done
    script="$script
save
end"
    echo "$script" | ar -M
    mv "$merged.tmp" "$merged"
  fi
fi

# Write the build environment only when it changed (keeps make's view stable).
if [ -n "$shaderc_dir" ]; then
  new_env="# written by scripts/setup.sh
export SHADERC_LIB_DIR='$shaderc_dir'"
else
  new_env="# written by scripts/setup.sh: nothing to set here"
fi
if [ ! -f "$env_file" ] || [ "$(cat "$env_file")" != "$new_env" ]; then
  printf '%s\n' "$new_env" >"$env_file"
fi

# The second driver: Mesa 25's lavapipe from Debian's bookworm-backports,
# unpacked into .setup/mesa25 beside the system's driver (which it does not
# replace). `make test` runs the integration tests, the examples and the
# quick benchmark on both drivers; scripts/driver2.sh runs a command on this
# one. Only where the system is Debian 12 (bookworm): elsewhere the
# distribution's own Mesa is the only driver, and setup says so.
driver2_dir="$setup_dir/mesa25"
driver2_env="$setup_dir/driver2.env"
if [ -f "$driver2_env" ] && grep -qs "\"$driver2_dir/root/" "$driver2_dir/icd.json"; then
  :   # installed
elif command -v apt-get >/dev/null 2>&1 && grep -qs 'VERSION_CODENAME=bookworm' /etc/os-release; then
  say "installing the second driver (Mesa 25 lavapipe from bookworm-backports) into $driver2_dir"
  rm -rf "$driver2_dir.tmp"
  apt_dir="$driver2_dir.tmp/apt"
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$driver2_dir.tmp/debs" "$driver2_dir.tmp/root"
  # The mirror the system already uses, and Debian's own archive key.
  mirror=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)[[:space:]]*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
  if [ -z "$mirror" ]; then
    mirror=$(sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*\/debian\)[[:space:]]\+bookworm[[:space:]].*/\2/p' /etc/apt/sources.list 2>/dev/null | head -n 1)
  fi
  mirror=${mirror:-http://deb.debian.org/debian}
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm-backports main" \
    >"$apt_dir/sources.list"
  apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o "Dir::Etc::sourceparts=-"
            -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -qq)
  # As root, apt's download user cannot write into this folder: download as root.
  if [ "$(id -u)" -eq 0 ]; then apt_opts+=(-o "APT::Sandbox::User=root"); fi
  apt-get "${apt_opts[@]}" update
  (cd "$driver2_dir.tmp/debs" &&
     apt-get "${apt_opts[@]}" download mesa-vulkan-drivers/bookworm-backports \
       libdrm2/bookworm-backports libdrm-amdgpu1/bookworm-backports)
  for deb in "$driver2_dir.tmp/debs"/*.deb; do dpkg-deb -x "$deb" "$driver2_dir.tmp/root"; done
  rm -rf "$apt_dir" "$driver2_dir.tmp/debs" "$driver2_dir"
  mv "$driver2_dir.tmp" "$driver2_dir"
  lvp=$(ls "$driver2_dir"/root/usr/lib/*/libvulkan_lvp.so | head -n 1)
  manifest=$(ls "$driver2_dir"/root/usr/share/vulkan/icd.d/lvp_icd*.json | head -n 1)
  # The manifest names the library by an absolute path, so the loader takes
  # this copy and not the system's.
  sed "s|\"library_path\":[^,]*|\"library_path\": \"$lvp\"|" "$manifest" >"$driver2_dir/icd.json"
  printf "export VK_DRIVER_FILES='%s'\nexport LD_LIBRARY_PATH='%s'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\n" \
    "$driver2_dir/icd.json" "$(dirname "$lvp")" >"$driver2_env"
else
  say "no second driver: Mesa 25 from bookworm-backports installs only on Debian 12"
fi

# The result the tests depend on: a device and the validation layer.
icds=$(ls /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json 2>/dev/null | wc -l || true)
if [ "$icds" -eq 0 ] && [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ]; then
  say "warning: no Vulkan driver manifest found; DeviceContext::new() will fail"
fi
exit 0
