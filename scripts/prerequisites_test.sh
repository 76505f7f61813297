#!/usr/bin/env bash
# Tests the prerequisite checks of scripts/test.sh without building or running anything: each
# case runs the script with PATH holding only stub tools (rustc, redis-server, apt-get... that
# print chosen versions) and the few real utilities the script is allowed to use, then checks
# its exit status and what it printed. Run by .ci/run; takes about a second.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# The real utilities scripts/test.sh may use (its header says which); anything else it calls
# is "command not found" here, which fails a case.
UTILITIES=(bash env sed grep uname id dirname)

# Writes an executable stub $bin/$1 running the shell code $2, replacing what is there (the
# utilities are copies, never links, so no stub can write through to a real one).
stub() {
  rm -f "$bin/$1"
  printf '#!%s\n%s\n' "$(command -v bash)" "$2" >"$bin/$1"
  chmod +x "$bin/$1"
}

# Executable initdb and postgres stubs in directory $1.
pg_stubs() {
  mkdir -p "$1"
  printf '#!/bin/sh\nexit 0\n' >"$1/initdb"
  printf '#!/bin/sh\nexit 0\n' >"$1/postgres"
  chmod +x "$1/initdb" "$1/postgres"
}

# A machine on which everything is present and recent enough; cases then break one thing.
good_machine() {
  rm -rf "$work/case"
  bin=$work/case/bin
  mkdir -p "$bin" "$work/case/home"
  local u
  for u in "${UTILITIES[@]}"; do cp "$(command -v "$u")" "$bin/$u"; done
  stub id 'echo 0'
  stub cc 'exit 0'
  stub rustc 'echo "rustc 1.95.0 (59807616e 2026-04-14)"'
  stub cargo 'echo "cargo $*" >>"$LOG"'
  stub redis-server 'echo "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1"'
  stub redis-sentinel 'echo "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1"'
  stub redis-cli 'echo "redis-cli 7.0.15"'
  stub chromium 'echo "Chromium 156.0.8078.108"'
  # PostgreSQL's server binaries, off PATH as Debian puts them (DISTLOCK_TEST_PG_LIB).
  pg_stubs "$work/case/pglib/15/bin"
  # apt-get records its calls; `install` adds Redis 7.0 stubs, as the real package would.
  stub apt-get 'echo "apt-get $*" >>"$LOG"
    [ "$1" = install ] || exit 0
    put() { printf "#!/bin/sh\n%s\n" "$2" >"$BIN/$1"; '"$(command -v chmod)"' +x "$BIN/$1"; }
    for p in "$@"; do case "$p" in
      redis-server) put redis-server "echo \"Redis server v=7.0.15 sha=0\"" ;;
      redis-sentinel) put redis-sentinel "echo \"Redis server v=7.0.15 sha=0\"" ;;
      redis-tools) put redis-cli "echo redis-cli 7.0.15" ;;
      build-essential) put cc "exit 0" ;;
      chromium) put chromium "echo Chromium 156" ;;
      postgresql) '"$(command -v mkdir)"' -p "$PGLIB/15/bin"
        BIN=$PGLIB/15/bin put initdb "exit 0"; BIN=$PGLIB/15/bin put postgres "exit 0" ;;
    esac; done'
  : >"$work/case/log"
}

# Runs scripts/test.sh with the stub PATH; sets $status and $output.
run_script() {
  set +e
  output=$(env -i PATH="$bin" HOME="$work/case/home" LOG="$work/case/log" BIN="$bin" \
    DISTLOCK_TEST_PG_LIB="$work/case/pglib" PGLIB="$work/case/pglib" \
    "$bin/bash" "$repo/scripts/test.sh" "$@" 2>&1)
  status=$?
  set -e
}

# expect NAME STATUS [TEXT...]: the last run exited with STATUS and printed every TEXT.
expect() {
  local name=$1 want=$2 ok=true text
  shift 2
  [ "$status" -eq "$want" ] || ok=false
  for text in "$@"; do
    grep -qF -- "$text" <<<"$output" || { ok=false; echo "  missing: $text" >&2; }
  done
  if grep -q "command not found" <<<"$output"; then ok=false; fi
  if $ok; then
    echo "ok   $name"
  else
    echo "FAIL $name (exit $status, expected $want); output:" >&2
    sed 's/^/    | /' <<<"$output" >&2
    failures=$((failures + 1))
  fi
}

# expect_log NAME TEXT / expect_no_log NAME PATTERN: what the stubs recorded.
expect_log() {
  if grep -qF -- "$2" "$work/case/log"; then echo "ok   $1"; else
    echo "FAIL $1: the stubs did not record '$2'; they recorded:" >&2
    sed 's/^/    | /' "$work/case/log" >&2
    failures=$((failures + 1))
  fi
}
expect_no_log() {
  if ! grep -q -- "$2" "$work/case/log"; then echo "ok   $1"; else
    echo "FAIL $1: the stubs recorded '$2':" >&2
    sed 's/^/    | /' "$work/case/log" >&2
    failures=$((failures + 1))
  fi
}

good_machine
run_script --check-only
expect "a complete machine passes the checks" 0 "redis-server 7.0.15" "rustc 1.95.0" \
  "all prerequisites found"
expect_no_log "--check-only runs neither apt-get nor cargo" "apt-get\|cargo"

good_machine
stub rustc 'echo "rustc 1.63.0"'
run_script --check-only
expect "Debian 12's packaged rustc is refused" 1 \
  "needs Rust >= 1.88 (edition 2024), found rustc 1.63.0" "https://sh.rustup.rs"

good_machine
rm "$bin/rustc" "$bin/cargo"
run_script --check-only
expect "no Rust at all" 1 "Rust not found: needs Rust >= 1.88" "https://sh.rustup.rs"

good_machine
rm "$bin/cargo"
run_script --check-only
expect "rustc without cargo" 1 "rustc is installed but cargo is not"

good_machine
stub rustup 'echo "rustup $*" >>"$LOG"; exit 1'
stub rustc '[ "${RUSTUP_AUTO_INSTALL:-}" = 0 ] || echo "downloads with auto-install on" >>"$LOG"
  echo "error: toolchain 1.95.0-x86_64-unknown-linux-gnu is not installed" >&2; exit 1'
run_script --check-only
expect "a missing pinned toolchain is named with its install command" 1 \
  "pinned in rust-toolchain.toml (1.95.0) is not installed" "rustup toolchain install 1.95.0"
expect_no_log "--check-only does not download a toolchain" "rustup\|downloads"
run_script
expect "offline, a failed toolchain install says what to do" 1 \
  "could not install Rust 1.95.0" "RUSTUP_TOOLCHAIN=stable ./scripts/test.sh"
expect_log "the pinned toolchain is installed with its components" \
  "rustup toolchain install 1.95.0 --profile minimal --component clippy --component rustfmt"

good_machine
rm "$bin/cc"
run_script --check-only
expect "no C compiler" 1 "no C compiler and linker (cc)" "apt-get install -y build-essential"

good_machine
stub redis-server 'echo "Redis server v=6.0.16 sha=00000000:0 malloc=jemalloc-5.2.1 bits=64 build=a3fdef44459b3ad6"'
run_script --check-only
expect "Ubuntu 22.04's redis-server 6.0 is refused" 1 \
  "needs redis-server >= 7.0, found 6.0.16" "https://packages.redis.io/deb"

good_machine
stub redis-sentinel 'echo "Redis server v=6.2.14 sha=0"'
run_script --check-only
expect "an old redis-sentinel is refused too" 1 "needs redis-sentinel >= 7.0, found 6.2.14"

good_machine
stub redis-server 'echo "Redis server v=10.0.0 sha=0"'
run_script --check-only
expect "versions compare as numbers, not text" 0 "redis-server 10.0.0"

good_machine
stub redis-server 'echo "redis-server: unrecognized option"'
run_script --check-only
expect "an unreadable version is reported" 1 "cannot read the version of redis-server"

good_machine
rm "$bin/redis-cli" "$bin/redis-sentinel"
run_script --check-only
expect "missing Redis tools are named with their packages" 1 \
  "missing Redis tools: redis-tools redis-sentinel" \
  "apt-get install -y redis-tools redis-sentinel"

good_machine
stub rustc 'echo "rustc 1.63.0"'
stub redis-server 'echo "Redis server v=6.0.16 sha=0"'
rm "$bin/cc"
run_script --check-only
expect "every problem is listed at once" 1 "3 prerequisite(s) missing" "found rustc 1.63.0" \
  "found 6.0.16" "no C compiler"

good_machine
rm "$bin/redis-server" "$bin/redis-cli" "$bin/redis-sentinel" "$bin/cc"
run_script --no-fail-fast
expect "a fresh machine gets its packages from apt-get, then the tests run" 0 \
  "installing build-essential with apt-get" \
  "installing redis-server redis-tools redis-sentinel with apt-get" "redis-server 7.0.15"
expect_log "apt-get installs the Redis packages" \
  "apt-get install -y -qq redis-server redis-tools redis-sentinel"
expect_log "cargo test runs with the extra arguments" \
  "cargo test --workspace --all-features --no-fail-fast"
expect_log "the core suites run again as an ACL user" \
  "cargo test --all-features --test lock --test ratelimit --no-fail-fast"

good_machine
rm -r "$work/case/pglib"
run_script --check-only
expect "a missing PostgreSQL server is named with its package" 1 \
  "missing PostgreSQL's server (initdb and postgres" "apt-get install -y postgresql"
run_script --no-fail-fast
expect "a fresh machine gets PostgreSQL from apt-get" 0 "installing postgresql with apt-get" \
  "PostgreSQL server binaries in $work/case/pglib/15/bin"
expect_log "apt-get installs the postgresql package" "apt-get install -y -qq postgresql"

good_machine
rm "$bin/chromium"
run_script --check-only
expect "a missing Chromium is named with its package" 1 \
  "missing Chromium" "apt-get install -y chromium"
run_script --no-fail-fast
expect "a fresh machine gets Chromium from apt-get" 0 "installing chromium with apt-get" \
  "Chromium: $bin/chromium"
expect_log "apt-get installs the chromium package" "apt-get install -y -qq chromium"

good_machine
run_script --check-only
expect "--check-only says it installs nothing" 0 "nothing is installed or built" \
  "nothing was installed"

good_machine
rm "$bin/cc"
run_script --check-only
expect "as root, a fix needs no sudo" 1 "fix: apt-get install -y build-essential"
if grep -q "sudo" <<<"$output"; then
  echo "FAIL as root, no fix names sudo:" >&2
  sed 's/^/    | /' <<<"$output" >&2
  failures=$((failures + 1))
fi
stub id 'echo 1000'
run_script --check-only
expect "as another user, a fix goes through sudo" 1 "fix: sudo apt-get install -y build-essential"

good_machine
stub uname 'echo MINGW64_NT-10.0'
run_script --check-only
expect "Windows is refused with a pointer to WSL" 1 "unsupported platform MINGW64_NT-10.0" "WSL 2"

if ((failures)); then
  echo "$failures check(s) of scripts/test.sh failed" >&2
  exit 1
fi
echo "scripts/test.sh: all prerequisite checks behave"
