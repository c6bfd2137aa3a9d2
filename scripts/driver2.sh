#!/usr/bin/env bash
# Runs a command on the second driver: Mesa 25's lavapipe, which
# scripts/setup.sh unpacks into .setup/mesa25 on Debian 12, e.g.
#   scripts/driver2.sh ./scripts/cargo.sh test --all-features --tests
# Where setup did not install it (a system other than Debian 12), says so
# and succeeds without running the command.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
env_file="$root/.setup/driver2.env"
if [ ! -f "$env_file" ]; then
  echo "driver2: skipped (no second driver: scripts/setup.sh installs it on Debian 12): $*" >&2
  exit 0
fi
# shellcheck source=/dev/null
. "$env_file"
exec "$@"
