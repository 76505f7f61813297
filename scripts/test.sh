#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs redis-server when it is missing
# (Debian/Ubuntu, via apt-get), then runs every test of the workspace. Tests start their own
# redis-server processes on free loopback ports; nothing needs to be running beforehand.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
  echo "redis-server not found: installing it with apt-get" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server redis-tools >/dev/null
  # The package starts a system service on 6379; the tests do not use it.
  ($SUDO systemctl stop redis-server >/dev/null 2>&1 || $SUDO service redis-server stop >/dev/null 2>&1 || true)
fi
redis-server --version

cargo test --workspace --all-features "$@"
