#!/usr/bin/env bash
# Runs distlock's test suites against several Redis and Valkey versions (TESTPLAN 52).
#
#   ./scripts/version-matrix.sh [--ci] [--versions NAME,...] [--suites NAME,...] [--build-only] [--record]
#
# Servers: Redis 6.2.16, Redis 7.4.1 and Valkey 8.0.1, each built once from its source archive
# and kept outside the repository, plus `system`: the redis-server found on PATH (Debian 12's
# apt package, 7.0.15). The tests start their own servers by name (redis-server, redis-cli,
# redis-sentinel), so each version runs with its bin directory first on PATH; Valkey's is
# reached through the redis-named links its `make install` makes.
#
# Lengths:
#   full (default)  every suite that starts a server, on every version, and the lock and
#                   rate-limit suites again as an ACL user (as scripts/test.sh does).
#   --ci            what .ci/run runs: the lock, rate-limit and HTTP (distlock-tower) suites on
#                   Redis 6.2.16, the oldest version distlock supports, and the lock and
#                   rate-limit suites on Valkey 8.0.1, so every CI run meets a server that is
#                   not Redis. Measured on this 2-core machine (shared with other builds),
#                   test binaries already built: cold (both servers built, 49 s and 33 s, at
#                   load 9) 517 s; warm (servers cached, load 4) 309 s, of which the suites
#                   take 160 s on 6.2.16 and 148 s on Valkey. All of .ci/run with it: 2023 s
#                   (warm). Redis 7.4.1 runs in the full length only. `system` is left out:
#                   ./scripts/test.sh runs every suite against it just before.
# A suite or test that needs a newer server than the one under test is excluded by this script,
# with the reason printed; nothing is skipped silently. The script exits 1 if any suite failed.
#
# Options:
#   --versions LIST   comma-separated subset of: redis-6.2.16 system redis-7.4.1 valkey-8.0.1
#   --suites LIST     comma-separated subset of the suites of the chosen length (on every
#                     version chosen)
#   --build-only      build (or find in the cache) the servers and stop
#   --record          also write the results into the committed results file (below); the
#                     full length always does
#
# Results: every run writes one line per version and suite (server, version, suite, outcome,
# passed, failed, date, commit) to target/version-matrix/results.tsv. With --record, and in
# the full length, those lines replace the same (server, version, suite) lines of
# docs/version-results.tsv, which is committed: the README and src/guide/deployment.md quote
# it, not anyone's memory.
#
# Environment:
#   DISTLOCK_REDIS_SOURCES  the directory holding redis-6.2.16.tar.gz, redis-7.4.1.tar.gz and
#                           valkey-8.0.1.tar.gz (default: shared/redis-sources beside the
#                           checkout, ../shared/redis-sources from the repository's root). A
#                           missing archive is an error, even when a build is cached: the cache
#                           is checked against the archive's checksum.
#   DISTLOCK_SERVER_CACHE   where built servers are kept, one directory per version (default
#                           ${XDG_CACHE_HOME:-$HOME/.cache}/distlock/servers).
#   DISTLOCK_MATRIX_SUITE_TIMEOUT  seconds one suite may run on one version before it is killed
#                           and counts as failed (default 1200), so a hung test cannot stall CI.
#
# Servers are built with `make BUILD_TLS=yes MALLOC=libc OPTIMIZATION=-O2`: TLS for the TLS
# tests; libc's malloc and -O2 without link-time optimisation build in about a third of the
# time of the upstream defaults (jemalloc, -O3 -flto) and change nothing the tests observe
# (commands, scripts, replies, errors). On Debian/Ubuntu the build tools (build-essential,
# pkg-config, libssl-dev) are installed with apt-get when missing, as root or through sudo.
set -euo pipefail
cd "$(dirname "$0")/.."

DEFAULT_SOURCES="$(cd .. && pwd)/shared/redis-sources"
SOURCES=${DISTLOCK_REDIS_SOURCES:-$DEFAULT_SOURCES}
RESULTS_FILE=docs/version-results.tsv
CACHE=${DISTLOCK_SERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/distlock/servers}
MAKE_FLAGS=(BUILD_TLS=yes MALLOC=libc OPTIMIZATION=-O2)
SUITE_TIMEOUT=${DISTLOCK_MATRIX_SUITE_TIMEOUT:-1200}

# Version name, archive ("" for the server on PATH), in the order they run.
ALL_VERSIONS=(redis-6.2.16 system redis-7.4.1 valkey-8.0.1)
declare -A ARCHIVE=(
  [redis-6.2.16]=redis-6.2.16.tar.gz
  [system]=""
  [redis-7.4.1]=redis-7.4.1.tar.gz
  [valkey-8.0.1]=valkey-8.0.1.tar.gz
)
CI_VERSIONS=(redis-6.2.16 valkey-8.0.1)

# Suites: name -> test target, as <package directory>:<test name>; and the environment.
declare -A SUITE_TARGET=(
  [lock]=.:lock
  [ratelimit]=.:ratelimit
  [http-rate-limit]=distlock-tower:rate_limit
  [http-lock]=distlock-tower:lock_layer
  [http-concurrency]=distlock-tower:concurrency
  [macro]=.:macro
  [bloom]=.:bloom
  [metrics]=.:metrics
  [faults]=.:faults
  [quorum]=.:quorum
  [replication]=.:replication
  [cluster]=.:cluster
  [harness]=.:harness
  [ticket-shop]=examples/ticket-shop:e2e
  [fenced]=.:fenced
  [history]=.:history
  [waiting]=.:waiting
  [lock-acl]=.:lock
  [ratelimit-acl]=.:ratelimit
)
declare -A SUITE_ENV=(
  [lock-acl]="DISTLOCK_TEST_AS_ACL_USER=1"
  [ratelimit-acl]="DISTLOCK_TEST_AS_ACL_USER=1"
)
# The CI length's suites on each of its versions.
declare -A CI_SUITES=(
  [redis-6.2.16]="lock ratelimit http-rate-limit http-lock http-concurrency"
  [valkey-8.0.1]="lock ratelimit"
)
FULL_SUITES=(lock ratelimit http-rate-limit http-lock http-concurrency macro bloom metrics faults
  quorum replication cluster harness ticket-shop fenced history waiting lock-acl ratelimit-acl)

note() { echo "version-matrix: $*" >&2; }
die() {
  echo "version-matrix: ERROR: $*" >&2
  exit 1
}

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

ci=false
build_only=false
record=false
versions_opt=""
suites_opt=""
while (($#)); do
  case "$1" in
    --ci) ci=true ;;
    --build-only) build_only=true ;;
    --record) record=true ;;
    --versions) versions_opt=${2:?--versions needs a list}; shift ;;
    --versions=*) versions_opt=${1#*=} ;;
    --suites) suites_opt=${2:?--suites needs a list}; shift ;;
    --suites=*) suites_opt=${1#*=} ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument $1" ;;
  esac
  shift
done

if $ci; then versions=("${CI_VERSIONS[@]}")
else versions=("${ALL_VERSIONS[@]}"); record=true; fi
if [ -n "$versions_opt" ]; then IFS=, read -r -a versions <<<"$versions_opt"; fi
for v in "${versions[@]}"; do
  [ -n "${ARCHIVE[$v]+x}" ] || die "unknown version $v (known: ${ALL_VERSIONS[*]})"
done
# The suites each version runs: --suites on every version, else the length's.
declare -A PLAN
for v in "${versions[@]}"; do
  if [ -n "$suites_opt" ]; then PLAN[$v]=${suites_opt//,/ }
  elif $ci; then PLAN[$v]=${CI_SUITES[$v]:-${CI_SUITES[redis-6.2.16]}}
  else PLAN[$v]="${FULL_SUITES[*]}"; fi
  for s in ${PLAN[$v]}; do
    [ -n "${SUITE_TARGET[$s]+x}" ] || die "unknown suite $s (known: ${FULL_SUITES[*]})"
  done
done

# --- Build tools -----------------------------------------------------------------------------
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
missing_tools() {
  local -a missing=()
  command -v cc >/dev/null 2>&1 && command -v make >/dev/null 2>&1 || missing+=(build-essential)
  command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
  if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists openssl; then
    missing+=(libssl-dev)
  fi
  echo "${missing[*]}"
}
needs_build=false
for v in "${versions[@]}"; do [ -n "${ARCHIVE[$v]}" ] && needs_build=true; done
if $needs_build; then
  missing=$(missing_tools)
  if [ -n "$missing" ] && command -v apt-get >/dev/null 2>&1 \
    && { [ -z "$SUDO" ] || command -v sudo >/dev/null 2>&1; }; then
    note "installing $missing with apt-get (to build the servers)"
    # shellcheck disable=SC2086 # a list of package names
    $SUDO apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null \
      || note "apt-get could not install $missing"
    missing=$(missing_tools)
  fi
  [ -z "$missing" ] || die "cannot build the servers without: $missing
    fix: sudo apt-get install -y $missing"
fi

# --- Servers ---------------------------------------------------------------------------------
# Echoes the bin directory of version $1, building it first unless the cache holds a build of
# the same archive (same checksum) with the same flags.
server_bin_dir() {
  local name=$1
  local archive=$SOURCES/${ARCHIVE[$name]}
  if [ ! -f "$archive" ]; then
    die "the source archive of $name is missing: $archive
    The version matrix builds $name from it. Set DISTLOCK_REDIS_SOURCES to the directory
    holding ${ARCHIVE[redis-6.2.16]}, ${ARCHIVE[redis-7.4.1]} and ${ARCHIVE[valkey-8.0.1]}
    (git archive of the upstream release tags; without it: $DEFAULT_SOURCES, beside the
    checkout), e.g. DISTLOCK_REDIS_SOURCES=/path/to/redis-sources $0 ..., or run fewer
    versions with --versions."
  fi
  local dir=$CACHE/$name
  local stamp
  stamp="archive-sha256 $(sha256sum "$archive" | cut -d' ' -f1)
make ${MAKE_FLAGS[*]}"
  mkdir -p "$CACHE"
  # One build per version at a time, also across concurrent runs of this script.
  exec {lock}>"$CACHE/$name.lock"
  flock "$lock"
  if [ -f "$dir/build-info" ] && [ "$(cat "$dir/build-info")" = "$stamp" ] \
    && [ -x "$dir/bin/redis-server" ]; then
    note "$name: cached in $dir"
  else
    local work
    work=$(mktemp -d "$CACHE/$name.build.XXXXXX")
    note "$name: building from $archive in $work (nice make -j2 ${MAKE_FLAGS[*]})"
    local began=$SECONDS
    tar -xzf "$archive" -C "$work" --strip-components=1
    if ! (cd "$work" && nice make -j2 "${MAKE_FLAGS[@]}" >build.log 2>&1 \
      && make "${MAKE_FLAGS[@]}" PREFIX="$work/install" install >>build.log 2>&1); then
      tail -n 60 "$work/build.log" >&2
      die "$name: the build failed; full log: $work/build.log"
    fi
    # Valkey's install makes redis-named links to its valkey-* binaries; check all are there.
    local tool
    for tool in redis-server redis-cli redis-sentinel; do
      [ -x "$work/install/bin/$tool" ] || die "$name: the build made no $tool ($work/install/bin)"
    done
    rm -rf "$dir"
    mkdir -p "$dir"
    mv "$work/install/bin" "$dir/bin"
    printf '%s\n' "$stamp" >"$dir/build-info"
    rm -rf "$work"
    note "$name: built in $((SECONDS - began)) s (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  fi
  exec {lock}>&-
  # The binary must report the version it is named after (catches a mislabelled archive).
  local want=${name#*-} banner
  banner=$("$dir/bin/redis-server" --version)
  case "$banner" in
    *" v=$want "*) ;;
    *) die "$name: $dir/bin/redis-server reports \"$banner\", not v=$want" ;;
  esac
  echo "$dir/bin"
}

# Echoes "major minor" of the redis-server first on PATH.
server_version() {
  local banner
  banner=$(redis-server --version) || die "cannot run redis-server --version ($(command -v redis-server))"
  sed -n '1s/.* v=\([0-9]*\)\.\([0-9]*\).*/\1 \2/p' <<<"$banner"
}

# What version ($1 major, $2 minor) cannot run of suite $3, as lines "SKIP <filter>|<reason>"
# (the filter is a `cargo test -- --skip` substring) or "EXCLUDE|<reason>" (the whole suite).
exclusions() {
  local major=$1 minor=$2 suite=$3
  local cluster_reason="Redis Cluster needs 7.0: distlock's wake-ups use sharded pub/sub (SSUBSCRIBE, 7.0) and connect_cluster refuses an older cluster; the cluster harness also sets --cluster-port (7.0)"
  if ((major < 7)); then
    case "$suite" in
      cluster) echo "EXCLUDE|$cluster_reason" ;;
      ticket-shop) echo "SKIP _on_a_cluster|$cluster_reason" ;;
      replication)
        echo "SKIP tls::a_cluster_client_over_tls_takes_the_ca_through_certs|$cluster_reason"
        echo "SKIP tls::distlock_connects_to_a_cluster_over_tls|$cluster_reason"
        ;;
      fenced | history) echo "SKIP cluster|$cluster_reason" ;;
      lock | lock-acl | ratelimit | ratelimit-acl | http-rate-limit) echo "SKIP on_a_cluster|$cluster_reason" ;;
    esac
  fi
  return 0
}

# --- Run -------------------------------------------------------------------------------------
began=$SECONDS
declare -A BIN
for v in "${versions[@]}"; do
  if [ -n "${ARCHIVE[$v]}" ]; then
    BIN[$v]=$(server_bin_dir "$v")
  fi
done
$build_only && { note "servers ready in $((SECONDS - began)) s"; exit 0; }
if $ci; then
  note "system redis-server is not in the CI length: ./scripts/test.sh runs every suite against it"
fi
# The in-memory store's twins of the both-store tests (tests/support/fixture.rs) start no
# server, so they would only repeat themselves on every version.
ALWAYS_SKIP=(--skip ::memory)
note "on every version: skipping tests matching '::memory': the in-memory store's twin of each test starts no server (./scripts/test.sh runs them)"

results_dir=target/version-matrix
rm -rf "$results_dir"
mkdir -p "$results_dir"
# The test binaries are built once, as `cargo test --workspace --all-features` builds them
# (so after ./scripts/test.sh nothing is compiled), and run directly: a `cargo test -p ..
# --test ..` per suite would unify features differently and compile the crates again.
note "building the test binaries"
if ! nice cargo test --workspace --all-features --no-run --message-format=json-render-diagnostics \
  >"$results_dir/build.json" 2>"$results_dir/build.log"; then
  cat "$results_dir/build.log" >&2
  die "the tests do not build"
fi
declare -A EXE PKG_DIR
while IFS= read -r line; do
  case "$line" in *'"kind":["test"]'*'"executable":"'*) ;; *) continue ;; esac
  name=$(sed 's/.*"target":{"kind":\["test"\][^}]*"name":"\([^"]*\)".*/\1/' <<<"$line")
  manifest=$(sed 's/.*"manifest_path":"\([^"]*\)".*/\1/' <<<"$line")
  dir=${manifest%/Cargo.toml}
  rel=${dir#"$PWD"}
  rel=${rel#/}
  EXE[${rel:-.}:$name]=$(sed 's/.*"executable":"\([^"]*\)".*/\1/' <<<"$line")
  PKG_DIR[${rel:-.}:$name]=$dir
done <"$results_dir/build.json"
for v in "${versions[@]}"; do
  for s in ${PLAN[$v]}; do
    [ -n "${EXE[${SUITE_TARGET[$s]}]:-}" ] || die "suite $s: no test binary ${SUITE_TARGET[$s]} was built"
  done
done
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  commit="$commit-dirty"
fi
today=$(date -u +%F)
printf 'server\tversion\tsuite\toutcome\tpassed\tfailed\tdate\tcommit\n' >"$results_dir/results.tsv"

summary=()
failed=0
for v in "${versions[@]}"; do
  if [ -n "${BIN[$v]:-}" ]; then
    path="${BIN[$v]}:$PATH"
  else
    path=$PATH
    command -v redis-server >/dev/null 2>&1 \
      || die "system: no redis-server on PATH (./scripts/test.sh installs it)"
  fi
  read -r major minor < <(PATH=$path server_version)
  [ -n "${major:-}" ] || die "$v: cannot read the version of $(PATH=$path command -v redis-server)"
  banner=$(PATH=$path redis-server --version)
  note "=== $v: $banner ($(PATH=$path command -v redis-server))"
  # "Redis server v=7.0.15 ..." or "Valkey server v=8.0.1 ...": the server and its version.
  server=$(sed -n '1s/^\([A-Za-z]*\) server v=.*/\1/p' <<<"$banner" | tr '[:upper:]' '[:lower:]')
  full_version=$(sed -n '1s/.* v=\([0-9][0-9.]*\).*/\1/p' <<<"$banner")
  mkdir -p "$results_dir/$v"
  for s in ${PLAN[$v]}; do
    skips=("${ALWAYS_SKIP[@]}")
    excluded=""
    while IFS='|' read -r what reason; do
      case "$what" in
        EXCLUDE) excluded=$reason ;;
        SKIP\ *)
          skips+=(--skip "${what#SKIP }")
          note "$v $s: skipping tests matching '${what#SKIP }': $reason"
          ;;
      esac
    done < <(exclusions "$major" "$minor" "$s")
    if [ -n "$excluded" ]; then
      note "$v $s: EXCLUDED: $excluded"
      summary+=("$(printf '%-14s %-18s excluded  %s' "$v" "$s" "$excluded")")
      printf '%s\t%s\t%s\texcluded\t0\t0\t%s\t%s\n' "${server:-?}" "${full_version:-?}" "$s" \
        "$today" "$commit" >>"$results_dir/results.tsv"
      continue
    fi
    log=$results_dir/$v/$s.log
    started=$SECONDS
    target=${SUITE_TARGET[$s]}
    # As `cargo test` runs it: from the package's directory. `timeout` signals its whole
    # process group, so the servers of a hung suite go with it.
    status=0
    # shellcheck disable=SC2086 # SUITE_ENV is a list of assignments
    (cd "${PKG_DIR[$target]}" && env PATH="$path" ${SUITE_ENV[$s]:-} \
      timeout --kill-after=30 "$SUITE_TIMEOUT" "${EXE[$target]}" -q "${skips[@]}") \
      >"$log" 2>&1 || status=$?
    if ((status == 0)); then
      result=passed
    else
      result=FAILED
      failed=$((failed + 1))
      cat "$log" >&2
      if ((status == 124 || status == 137)); then
        result="TIMEOUT"
        note "$v $s: killed after ${SUITE_TIMEOUT} s (DISTLOCK_MATRIX_SUITE_TIMEOUT)"
      fi
    fi
    took=$((SECONDS - started))
    # (No "test result" line at all when the binary was killed.)
    read -r n_passed n_failed n_ignored < <(sed -n 's/^test result:.* \([0-9]*\) passed; \([0-9]*\) failed; \([0-9]*\) ignored.*/\1 \2 \3/p' "$log" \
      | awk '{p+=$1; f+=$2; i+=$3} END {printf "%d %d %d\n", p, f, i}')
    counts="$n_passed passed, $n_failed failed, $n_ignored ignored"
    outcome=$(tr '[:upper:]' '[:lower:]' <<<"$result")
    printf '%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n' "${server:-?}" "${full_version:-?}" "$s" "$outcome" \
      "$n_passed" "$n_failed" "$today" "$commit" >>"$results_dir/results.tsv"
    note "$v $s: $result in $took s ($counts; load $(cut -d' ' -f1 /proc/loadavg))"
    local_skips=("${skips[@]:${#ALWAYS_SKIP[@]}}")
    summary+=("$(printf '%-14s %-18s %-8s  %4d s  %s%s' "$v" "$s" "$result" "$took" "$counts" \
      "${local_skips[*]:+, also skipped: ${local_skips[*]}}")")
  done
done

# The committed results: this run's lines replace the same (server, version, suite) lines.
if $record; then
  {
    head -n 1 "$results_dir/results.tsv"
    awk -F'\t' 'NR == FNR { if (FNR > 1) ran[$1 FS $2 FS $3] = 1; next }
      FNR > 1 && !(($1 FS $2 FS $3) in ran)' "$results_dir/results.tsv" "$RESULTS_FILE" 2>/dev/null || true
    tail -n +2 "$results_dir/results.tsv"
  } >"$results_dir/merged.tsv"
  { head -n 1 "$results_dir/merged.tsv"; tail -n +2 "$results_dir/merged.tsv" | sort -t$'\t' -k1,1 -k2,2V -k3,3; } \
    >"$RESULTS_FILE"
  note "results recorded in $RESULTS_FILE (commit it)"
fi

echo
echo "version matrix ($($ci && echo CI || echo full) length): $((SECONDS - began)) s, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%s\n' "${summary[@]}"
if ((failed)); then
  echo "$failed suite(s) failed; logs in $results_dir/" >&2
  exit 1
fi
