#!/usr/bin/env bash
# Runs cargo with the environment scripts/setup.sh prepared (SHADERC_LIB_DIR
# where Debian's shaderc needed merging). Use it like cargo itself:
#   scripts/cargo.sh test
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -f "$root/.setup/env.sh" ]; then
  "$root/scripts/setup.sh"
fi
# shellcheck source=/dev/null
source "$root/.setup/env.sh"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
exec cargo "$@"
