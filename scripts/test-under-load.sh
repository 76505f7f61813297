#!/usr/bin/env bash
# Runs the whole test suite on a busy machine (TESTPLAN 46, issue 26 §4).
#
#   ./scripts/test-under-load.sh [-k K] [-r R] [-- arguments for cargo test...]
#
#   -k, --hogs-per-core K   busy loops per core running beside the tests (default 2; 0 = none)
#   -r, --runs R            how many times in a row the suite runs (default 3)
#
# It builds the tests first (not timed, no hogs), then starts K x (number of cores) CPU hogs
# (plain shell busy loops at normal priority, killed when the script ends, however it ends),
# then runs `cargo test --workspace --all-features --no-fail-fast` R times in a row: every
# backend's suite (lock, rate limit, tower/HTTP, cluster, quorum, replication, ...). Arguments
# after `--` go to each `cargo test`, e.g. `-- --test lock` for one binary.
#
# After each run it prints the tests passed and failed (and the names of those that failed),
# the wall time, and the load average: the 1-minute figure sampled every 5 s during the run
# (mean and max) and /proc/loadavg at its end. Each run's full output is kept in
# target/under-load/run-N.log. Exits 1 if any run had a failure (or cargo itself failed).
#
# The machine's own load counts too: the figures show what the tests really ran beside.
set -euo pipefail
cd "$(dirname "$0")/.."

hogs_per_core=2
runs=3
while (($#)); do
  case "$1" in
    -k | --hogs-per-core) hogs_per_core=$2; shift 2 ;;
    -r | --runs) runs=$2; shift 2 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "test-under-load.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $hogs_per_core =~ ^[0-9]+$ ]] || { echo "test-under-load.sh: -k wants a count, got $hogs_per_core" >&2; exit 2; }
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "test-under-load.sh: -r wants a count >= 1, got $runs" >&2; exit 2; }

note() { echo "test-under-load.sh: $*" >&2; }
cores=$(nproc)
logs=target/under-load
mkdir -p "$logs"

hog_pids=()
sampler_pid=""
stop_all() {
  local pid
  for pid in "${hog_pids[@]}" $sampler_pid; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${hog_pids[@]}" $sampler_pid; do
    wait "$pid" 2>/dev/null || true
  done
  hog_pids=()
  sampler_pid=""
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

note "building the tests (not timed, no hogs yet)"
cargo test --workspace --all-features --no-run "$@"

hogs=$((hogs_per_core * cores))
note "starting $hogs CPU hogs ($hogs_per_core per core, $cores cores)"
for ((i = 0; i < hogs; i++)); do
  # A plain busy loop; `exec` so that the pid we hold is the loop itself.
  bash -c 'exec bash -c "while :; do :; done"' &
  hog_pids+=($!)
done

loadavg1() { cut -d' ' -f1 /proc/loadavg; }

failed_runs=0
summary=()
for ((run = 1; run <= runs; run++)); do
  log="$logs/run-$run.log"
  samples="$logs/run-$run.load"
  : >"$samples"
  (while :; do loadavg1 >>"$samples"; sleep 5; done) &
  sampler_pid=$!
  note "run $run/$runs (log: $log)"
  start=$(date +%s.%N)
  set +e
  cargo test --workspace --all-features --no-fail-fast "$@" >"$log" 2>&1
  rc=$?
  set -e
  end=$(date +%s.%N)
  kill "$sampler_pid" 2>/dev/null || true
  wait "$sampler_pid" 2>/dev/null || true
  sampler_pid=""

  # libtest prints one `test result:` line per test binary (and per doctest run).
  read -r passed failed < <(awk '/^test result: / { p += $4; f += $6 } END { print p + 0, f + 0 }' "$log")
  wall=$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')
  load=$(awk '{ s += $1; if ($1 > m) m = $1 } END { if (NR) printf "mean %.2f, max %.2f", s / NR, m }' "$samples")
  verdict=ok
  if ((failed > 0 || rc != 0)); then
    verdict=FAILED
    failed_runs=$((failed_runs + 1))
  fi
  line=$(printf 'run %d/%d: %s, %d passed, %d failed, wall %.0f s, load (1 min) %s, at end %s (cargo exit %d)' \
    "$run" "$runs" "$verdict" "$passed" "$failed" "$wall" "$load" "$(cut -d' ' -f1-3 /proc/loadavg)" "$rc")
  echo "$line"
  summary+=("$line")
  if [ "$verdict" = FAILED ]; then
    grep -E '^test .* \.\.\. FAILED$|^error: ' "$log" | sed 's/^/    /' || true
  fi
done

stop_all
echo
echo "under load: $hogs_per_core busy loop(s) per core, $cores cores, $runs run(s)"
printf '  %s\n' "${summary[@]}"
if ((failed_runs)); then
  echo "$failed_runs of $runs run(s) failed"
  exit 1
fi
echo "all $runs run(s) passed"
