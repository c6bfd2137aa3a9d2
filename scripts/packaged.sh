# Sourced by scripts/downstream.sh and scripts/ubuntu-check.sh, from the
# repository root: `packaged WORK CRATE...` packages the workspace crates
# CRATE... (`cargo package`, as a user gets them from crates.io) into
# WORK/package-target and unpacks each into WORK/CRATE, where the test
# crates' `[patch.crates-io]` finds them.
packaged() {
  local work=$1
  shift
  local args=() crate manifest version
  for crate in "$@"; do args+=(-p "$crate"); done
  # --no-verify: building the packages is what the callers do next.
  # --allow-dirty: so that uncommitted work can be checked too.
  env -u SHADERC_LIB_DIR -u VULKAN_SDK cargo package -q --no-verify --allow-dirty \
    "${args[@]}" --target-dir "$work/package-target"
  for crate in "$@"; do
    manifest=$crate/Cargo.toml
    [ "$crate" = vkcompute ] && manifest=Cargo.toml
    version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$manifest" | head -n 1)
    rm -rf "${work:?}/$crate"
    tar -xzf "$work/package-target/package/$crate-$version.crate" -C "$work"
    mv "$work/$crate-$version" "$work/$crate"
  done
}
