#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine.
#
#   ./scripts/test.sh [--check-only] [arguments for cargo test...]
#
# First it checks every prerequisite, and on Debian/Ubuntu installs with apt-get what apt-get
# can provide:
#
#   * Rust >= the `rust-version` of Cargo.toml (1.88), through rustup: the toolchain pinned in
#     rust-toolchain.toml is installed with rustup when it is missing. Distribution packages of
#     rustc are too old (Debian 12 ships 1.63), so rustup itself is never installed for you:
#     the script prints the command.
#   * a C compiler and linker, `cc` (apt: build-essential).
#   * for the history suite: iproute2, nftables and faketime (network namespaces, partitions,
#     server clock jumps), installed when missing.
#   * redis-server >= 7.0 (the tests start it with --enable-debug-command, new in 7.0), and
#     redis-cli and redis-sentinel for the multi-node tests (apt: redis-server redis-tools
#     redis-sentinel). Releases that package an older Redis (Ubuntu 22.04, Debian 11) need
#     Redis's own APT repository; the script prints how.
#   * PostgreSQL's server binaries, initdb and postgres (apt: postgresql), under
#     /usr/lib/postgresql/<version>/bin: the fenced-write tests (tests/fenced) start their own
#     server with them (as the `postgres` account when run as root).
#   * Chromium (apt: chromium): the operator console's page test runs it headless.
#
# Whatever it cannot fix is listed with the command that fixes it, and it exits 1 before
# building anything. `--check-only` installs nothing and stops after the checks (exit 0 when
# everything is there). Then it runs `cargo test --workspace --all-features`; the tests start
# their own redis-server processes on free loopback ports, so nothing needs to be running.
#
# Only bash, sed, grep, uname, id and dirname are used besides the tools checked
# (scripts/prerequisites_test.sh runs this script against stub tools and relies on that).
set -euo pipefail
cd "$(dirname "$0")/.."

MIN_REDIS=7.0
# `sudo ` before the commands a fix names, unless this is root (which may have no sudo).
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
AS_ROOT=${SUDO:+sudo }
MIN_RUST=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml)
PINNED=$(sed -n 's/^channel *= *"\([^"]*\)".*/\1/p' rust-toolchain.toml)
REDIS_REPO_HELP="install Redis from its own APT repository:
      ${AS_ROOT}apt-get install -y lsb-release curl gpg
      curl -fsSL https://packages.redis.io/gpg | ${AS_ROOT}gpg --dearmor -o /usr/share/keyrings/redis-archive-keyring.gpg
      echo \"deb [signed-by=/usr/share/keyrings/redis-archive-keyring.gpg] https://packages.redis.io/deb \$(lsb_release -cs) main\" | ${AS_ROOT}tee /etc/apt/sources.list.d/redis.list
      ${AS_ROOT}apt-get update && ${AS_ROOT}apt-get install -y redis-server redis-tools redis-sentinel
    or put a redis-server >= 7.0 (with its redis-cli and redis-sentinel) first on PATH"
RUSTUP_HELP='install Rust with rustup (distribution packages are too old):
      curl --proto '"'=https'"' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
      . "$HOME/.cargo/env"   # or open a new shell, so ~/.cargo/bin comes first on PATH'

check_only=false
case "${1:-}" in
  --check-only) check_only=true; shift ;;
  -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
esac

problems=()
problem() { problems+=("$1"); }
note() { echo "test.sh: $*" >&2; }
if $check_only; then note "--check-only: checking the prerequisites; nothing is installed or built"; fi

# Whether dotted version $1 >= $2, comparing numbers field by field (missing fields are 0).
version_ge() {
  local IFS=.
  local -a have want
  read -r -a have <<<"$1"
  read -r -a want <<<"$2"
  local i
  for i in 0 1 2; do
    local h=$((10#${have[i]:-0})) w=$((10#${want[i]:-0}))
    if ((h > w)); then return 0; fi
    if ((h < w)); then return 1; fi
  done
  return 0
}

# apt-get installs only outside --check-only, as root or through sudo.
can_apt=false
if ! $check_only && command -v apt-get >/dev/null 2>&1 \
  && { [ -z "$SUDO" ] || command -v sudo >/dev/null 2>&1; }; then
  can_apt=true
fi
apt_install() {
  note "installing $* with apt-get"
  if ! { $SUDO apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null; }; then
    note "apt-get could not install $*"
  fi
}

# --- Platform --------------------------------------------------------------------------------
os=$(uname -s)
case "$os" in
  Linux) ;;
  Darwin) note "macOS is not tested: install the prerequisites yourself (brew install redis; rustup)" ;;
  *) problem "unsupported platform $os: the tests signal redis-server processes (SIGSTOP, SIGKILL), which needs Linux or another Unix
    fix: on Windows, run the tests in WSL 2 with Ubuntu 24.04" ;;
esac

# --- C compiler and linker -------------------------------------------------------------------
if ! command -v cc >/dev/null 2>&1 && $can_apt; then apt_install build-essential; fi
if ! command -v cc >/dev/null 2>&1; then
  problem "no C compiler and linker (cc): Rust links with it, and the tls feature builds C code (ring)
    fix: ${AS_ROOT}apt-get install -y build-essential"
fi

# --- Redis -----------------------------------------------------------------------------------
# Binary and the Debian/Ubuntu package that provides it.
redis_tools=(redis-server:redis-server redis-cli:redis-tools redis-sentinel:redis-sentinel)
find_missing() {
  missing=()
  local entry
  for entry in "${redis_tools[@]}"; do
    command -v "${entry%%:*}" >/dev/null 2>&1 || missing+=("${entry#*:}")
  done
}
find_missing
if ((${#missing[@]})) && $can_apt; then
  apt_install "${missing[@]}"
  # The packages start system services (6379, 26379); the tests do not use them.
  for service in redis-server redis-sentinel; do
    ($SUDO systemctl stop "$service" >/dev/null 2>&1 || $SUDO service "$service" stop >/dev/null 2>&1 || true)
  done
  find_missing
fi
if ((${#missing[@]})); then
  problem "missing Redis tools: ${missing[*]}
    fix: ${AS_ROOT}apt-get install -y ${missing[*]}   (Redis >= $MIN_REDIS: Debian 12, Ubuntu 24.04 or newer)"
fi
for tool in redis-server redis-sentinel; do
  command -v "$tool" >/dev/null 2>&1 || continue
  banner=$("$tool" --version 2>&1 || true)
  found=$(sed -n '1s/.*v=\([0-9][0-9.]*\).*/\1/p' <<<"$banner")
  if [ -z "$found" ]; then
    problem "cannot read the version of $tool ($(command -v "$tool")) from: $banner"
  elif ! version_ge "$found" "$MIN_REDIS"; then
    problem "needs $tool >= $MIN_REDIS, found $found ($(command -v "$tool")): the tests start it with --enable-debug-command, new in Redis 7.0 (the library itself works with 6.2)
    fix: $REDIS_REPO_HELP"
  else
    note "$tool $found"
  fi
done

# --- History suite (tests/history) ------------------------------------------------------------
# Its nemesis partitions in network namespaces it makes (`ip` from iproute2, `nft` from
# nftables, `ss`), and jumps a server's clock with libfaketime (faketime). Installed here when
# missing; without them (or without root) the history suite itself fails, saying what it lacks.
history_tools=(ip:iproute2 nft:nftables ss:iproute2 faketime:faketime)
history_missing=()
for entry in "${history_tools[@]}"; do
  command -v "${entry%%:*}" >/dev/null 2>&1 || history_missing+=("${entry#*:}")
done
if ((${#history_missing[@]})) && $can_apt; then apt_install "${history_missing[@]}"; fi
for entry in "${history_tools[@]}"; do
  command -v "${entry%%:*}" >/dev/null 2>&1 \
    || note "the history suite needs ${entry%%:*} (apt-get install -y ${entry#*:}); it will fail without it"
done

# --- PostgreSQL ------------------------------------------------------------------------------
# tests/fenced runs initdb and postgres from Debian's postgresql package, which puts them off
# PATH in /usr/lib/postgresql/<version>/bin (DISTLOCK_TEST_PG_LIB stands for that directory in
# scripts/prerequisites_test.sh). The tests fail, never skip, without them.
pg_lib=${DISTLOCK_TEST_PG_LIB:-/usr/lib/postgresql}
find_postgres() {
  pg_bin=""
  local dir
  for dir in "$pg_lib"/*/bin; do
    if [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ]; then pg_bin=$dir; fi
  done
}
find_postgres
if [ -z "$pg_bin" ] && $can_apt; then
  apt_install postgresql
  # The package starts a system cluster on 5432; the tests do not use it.
  ($SUDO systemctl stop postgresql >/dev/null 2>&1 || $SUDO service postgresql stop >/dev/null 2>&1 || true)
  find_postgres
fi
if [ -z "$pg_bin" ]; then
  problem "missing PostgreSQL's server (initdb and postgres in $pg_lib/<version>/bin): the fenced-write tests start their own
    fix: ${AS_ROOT}apt-get install -y postgresql"
else
  note "PostgreSQL server binaries in $pg_bin"
fi

# --- Chromium --------------------------------------------------------------------------------
# distlock-tower/tests/console drives the operator console's page in headless Chromium
# (apt: chromium; the test runs $DISTLOCK_TEST_CHROMIUM instead when set). The test fails, never skips,
# without it.
find_chromium() {
  chromium_bin=""
  local candidate
  for candidate in ${DISTLOCK_TEST_CHROMIUM:-} chromium chromium-browser google-chrome; do
    if command -v "$candidate" >/dev/null 2>&1; then
      chromium_bin=$(command -v "$candidate")
      return
    fi
  done
}
find_chromium
if [ -z "$chromium_bin" ] && $can_apt; then
  apt_install chromium
  find_chromium
fi
if [ -z "$chromium_bin" ]; then
  problem "missing Chromium: the operator console's page test runs it headless
    fix: ${AS_ROOT}apt-get install -y chromium"
else
  note "Chromium: $chromium_bin"
fi

# --- Rust ------------------------------------------------------------------------------------
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  note "using $HOME/.cargo/bin, which is not on PATH (add it: . \"\$HOME/.cargo/env\")"
  PATH="$HOME/.cargo/bin:$PATH"
fi
if command -v rustup >/dev/null 2>&1 && ! RUSTUP_AUTO_INSTALL=0 rustc --version >/dev/null 2>&1; then
  # rustup is there but the toolchain it selects (rust-toolchain.toml, unless RUSTUP_TOOLCHAIN
  # says otherwise) is not installed.
  if $check_only; then
    problem "the Rust toolchain pinned in rust-toolchain.toml ($PINNED) is not installed
    fix: rustup toolchain install $PINNED --profile minimal --component clippy --component rustfmt"
  else
    note "installing the Rust toolchain $PINNED pinned in rust-toolchain.toml"
    if ! rustup toolchain install "$PINNED" --profile minimal --component clippy --component rustfmt >&2; then
      problem "could not install Rust $PINNED (pinned in rust-toolchain.toml) with rustup; offline?
    fix: connect to the network and run this script again, or use an installed toolchain >= $MIN_RUST:
      RUSTUP_TOOLCHAIN=stable ./scripts/test.sh"
    fi
  fi
fi
if ! command -v rustc >/dev/null 2>&1; then
  problem "Rust not found: needs Rust >= $MIN_RUST
    fix: $RUSTUP_HELP"
elif rust_banner=$(RUSTUP_AUTO_INSTALL=0 rustc --version 2>&1); then
  found=$(sed -n '1s/^rustc \([0-9][0-9.]*\).*/\1/p' <<<"$rust_banner")
  if [ -z "$found" ]; then
    problem "cannot read the version of rustc ($(command -v rustc)) from: $rust_banner"
  elif ! version_ge "$found" "$MIN_RUST"; then
    if command -v rustup >/dev/null 2>&1; then
      fix="rustup toolchain install $PINNED, and unset RUSTUP_TOOLCHAIN if it selects an old one"
    else
      fix=$RUSTUP_HELP
    fi
    problem "needs Rust >= $MIN_RUST (edition 2024), found rustc $found ($(command -v rustc))
    fix: $fix"
  else
    note "rustc $found"
  fi
  if ! command -v cargo >/dev/null 2>&1; then
    problem "rustc is installed but cargo is not
    fix: $RUSTUP_HELP"
  fi
fi

if ((${#problems[@]})); then
  echo "test.sh: cannot run the tests, ${#problems[@]} prerequisite(s) missing:" >&2
  for p in "${problems[@]}"; do echo "  * $p" >&2; done
  exit 1
fi
if $check_only; then
  note "all prerequisites found (--check-only: nothing was installed)"
  exit 0
fi

# One full run builds every test binary once: incremental caches would only double the
# target directory (unless the caller chose otherwise).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
cargo test --workspace --all-features "$@"
# The core suites again, with the library logged in as an ACL user limited to the README's
# rules (tests/support/server.rs, ACL_RUN_ENV): every lock, semaphore, read-write lock, job and
# rate-limit test then proves those rules enough.
DISTLOCK_TEST_AS_ACL_USER=1 cargo test --all-features --test lock --test ratelimit "$@"
