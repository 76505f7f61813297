//! Command-line flags (a handful, parsed by hand).

use std::time::Duration;

use crate::workloads::{Peer, Workload};

pub const USAGE: &str = "\
usage: distlock-bench [flags]
  --url URL            Redis to use (default: start a redis-server on a free port)
  --cluster-url URL    a Redis Cluster node for the cluster_* workloads; repeat it or give a
                       comma-separated list (default: start a local cluster of --masters masters)
  --masters N          masters of the local cluster (default: 3; no replicas)
  --server-cpus LIST   pin the redis-servers the bench starts to these CPUs (taskset -c LIST)
  --workloads LIST     comma-separated (default: the first nine below); see below
  --cluster            add the cluster_* workloads to the selection
  --cluster-slots N    an experiment: draw the cluster workloads' lock names and subjects from N
                       hash slots only (evenly spread, so 3 = one per master of 3), so that
                       concurrent operations share slots (default: names spread over all slots)
  --quorum             add the quorum_* workloads to the selection
  --quorum-url URL     a node of a Redlock quorum (independent primaries) for the quorum_*
                       workloads; repeat it or give a comma-separated list, an odd number of
                       at least 3 (default: start --quorum-nodes redis-servers)
  --quorum-nodes N     independent redis-servers the bench starts for the quorum_* workloads
                       without --quorum-url (default: 5, as the outside benchmark's W7)
  --peers LIST         distlock,raw (default: both)
  --duration D         time budget per run, humantime (default: 5s; 3s for ratelimit_accuracy)
  --ops N              cap on operations per run (default: the workload's own)
  --tasks N            override the workload's concurrency
  --rounds N           run each (peer, workload) N times, peers alternating, and report the
                       median run by ops/s (errors summed, violations the worst; default: 1)
  --chart FILE         also write an SVG chart of distlock vs raw per workload
  --runtime KIND       the tokio runtime the bench runs on: current-thread (default; one
                       thread, like ../shared/peer-bench and many small services) or
                       multi-thread (one worker per CPU the process may use)
  --help

workloads: lock_uncontended_seq lock_uncontended_parallel lock_uncontended_seq_fenced
           lock_uncontended_parallel_fenced lock_contended ratelimit_seq ratelimit_parallel
           ratelimit_accuracy ratelimit_denied_hot watchdog_scale layer_overhead
  (the _fenced variants take eager leases, `.fenced()`: the grant mints the fence; by default
  a lease mints it when asked, and these workloads never ask)
cluster (only when named or with --cluster): cluster_lock_parallel cluster_ratelimit_parallel
  cluster_lock_parallel_fenced (lock_uncontended_parallel, ratelimit_parallel and
  lock_uncontended_parallel_fenced on a cluster; these and their single-primary counterparts
  also report the server's cost per operation: server_us_per_op, server_cpu_us_per_op,
  items_per_script_call)
fair (only when named): lock_contended_fair (lock_contended with fair locks, granted in
  arrival order; raw polls as in lock_contended: it has no fair lock)
semaphores (only when named): semaphore_uncontended (32 tasks, semaphores of their own)
  semaphore_contended (16 tasks on one semaphore of 4 permits, 2000 sections; p50/p99 = wait)
quorum (only when named or with --quorum): quorum_lock_seq quorum_lock_parallel
  (lock_uncontended_seq and _parallel on a Redlock quorum; raw is hand-written Redlock: SET NX
  PX on every node at once, granted by a majority, compare-and-delete on every node; a quorum
  client refuses rate limits, so there is no rate-limit variant)
bloom (only when named): bloom_contains_many (Bloom filter lookups, 1000 items per call)
rate-limit service (only when named): rls_one_descriptor rls_many_descriptors (Envoy's
  ShouldRateLimit over gRPC on loopback, 64 callers, one descriptor value or 1,000; raw is one
  GCRA EVALSHA per request with no service in between)
drain (only when named): a process holding --ops leases (100) and leading an election stops;
  release_all_ms = until it gave them back, lock_ms (p50/p99) = until another process waiting
  on one of the locks holds it, leader_ms = until that process leads (ttl 30 s, what they
  would wait without a drain); raw tracks its keys, deletes them on stop, and its waiter
  polls every millisecond";

#[derive(Debug)]
pub struct Args {
    pub url: Option<String>,
    pub cluster_urls: Vec<String>,
    pub masters: usize,
    pub server_cpus: Option<String>,
    pub cluster_slots: Option<u16>,
    pub quorum_urls: Vec<String>,
    pub quorum_nodes: usize,
    pub workloads: Vec<Workload>,
    pub peers: Vec<Peer>,
    pub duration: Option<Duration>,
    pub ops: Option<u64>,
    pub tasks: Option<usize>,
    pub rounds: usize,
    pub chart: Option<std::path::PathBuf>,
    pub runtime: Runtime,
    pub help: bool,
}

/// The tokio runtime flavour the bench runs on (`--runtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    MultiThread,
    CurrentThread,
}

impl Args {
    pub fn parse(mut argv: impl Iterator<Item = String>) -> Result<Self, String> {
        let mut args = Args {
            url: None,
            cluster_urls: Vec::new(),
            masters: 3,
            server_cpus: None,
            cluster_slots: None,
            quorum_urls: Vec::new(),
            quorum_nodes: 5,
            workloads: Workload::ALL.to_vec(),
            peers: vec![Peer::Distlock, Peer::Raw],
            duration: None,
            ops: None,
            tasks: None,
            rounds: 1,
            chart: None,
            runtime: Runtime::CurrentThread,
            help: false,
        };
        let mut add_cluster = false;
        let mut add_quorum = false;
        while let Some(flag) = argv.next() {
            let mut value = || argv.next().ok_or_else(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--url" => args.url = Some(value()?),
                "--cluster-url" => args.cluster_urls.extend(
                    value()?
                        .split(',')
                        .map(str::trim)
                        .filter(|u| !u.is_empty())
                        .map(str::to_owned),
                ),
                "--masters" => {
                    let n: usize = value()?.parse().map_err(|e| format!("--masters: {e}"))?;
                    if n < 3 {
                        return Err("--masters must be at least 3 (redis-cli's minimum)".into());
                    }
                    args.masters = n;
                }
                "--server-cpus" => args.server_cpus = Some(value()?),
                "--cluster" => add_cluster = true,
                "--quorum" => add_quorum = true,
                "--quorum-url" => args.quorum_urls.extend(
                    value()?
                        .split(',')
                        .map(str::trim)
                        .filter(|u| !u.is_empty())
                        .map(str::to_owned),
                ),
                "--quorum-nodes" => {
                    let n: usize = value()?
                        .parse()
                        .map_err(|e| format!("--quorum-nodes: {e}"))?;
                    if n < 3 || n.is_multiple_of(2) {
                        return Err("--quorum-nodes: an odd number of at least 3".into());
                    }
                    args.quorum_nodes = n;
                }
                "--cluster-slots" => {
                    let n: u16 = value()?
                        .parse()
                        .map_err(|e| format!("--cluster-slots: {e}"))?;
                    if !(1..=16384).contains(&n) {
                        return Err("--cluster-slots must be 1 to 16384".into());
                    }
                    args.cluster_slots = Some(n);
                }
                "--workloads" => {
                    args.workloads = value()?
                        .split(',')
                        .map(|w| {
                            Workload::from_name(w.trim())
                                .ok_or_else(|| format!("unknown workload `{w}`"))
                        })
                        .collect::<Result<_, _>>()?;
                }
                "--peers" => {
                    args.peers = value()?
                        .split(',')
                        .map(|p| {
                            Peer::from_name(p.trim()).ok_or_else(|| format!("unknown peer `{p}`"))
                        })
                        .collect::<Result<_, _>>()?;
                }
                "--duration" => {
                    let v = value()?;
                    args.duration = Some(
                        humantime::parse_duration(&v)
                            .map_err(|e| format!("--duration {v}: {e}"))?,
                    );
                }
                "--ops" => args.ops = Some(value()?.parse().map_err(|e| format!("--ops: {e}"))?),
                "--tasks" => {
                    let n: usize = value()?.parse().map_err(|e| format!("--tasks: {e}"))?;
                    if n == 0 {
                        return Err("--tasks must be at least 1".into());
                    }
                    args.tasks = Some(n);
                }
                "--rounds" => {
                    let n: usize = value()?.parse().map_err(|e| format!("--rounds: {e}"))?;
                    if n == 0 {
                        return Err("--rounds must be at least 1".into());
                    }
                    args.rounds = n;
                }
                "--chart" => args.chart = Some(value()?.into()),
                "--runtime" => {
                    args.runtime = match value()?.as_str() {
                        "multi-thread" => Runtime::MultiThread,
                        "current-thread" => Runtime::CurrentThread,
                        other => {
                            return Err(format!(
                                "--runtime: `{other}` (multi-thread or current-thread)"
                            ));
                        }
                    };
                }
                "--help" | "-h" => args.help = true,
                other => return Err(format!("unknown flag `{other}`")),
            }
        }
        let added: [(bool, &[Workload]); 2] = [
            (add_cluster, &Workload::CLUSTER),
            (add_quorum, &Workload::QUORUM),
        ];
        for w in added
            .into_iter()
            .filter(|(add, _)| *add)
            .flat_map(|(_, ws)| ws.iter().copied())
        {
            if !args.workloads.contains(&w) {
                args.workloads.push(w);
            }
        }
        if !args.quorum_urls.is_empty()
            && (args.quorum_urls.len() < 3 || args.quorum_urls.len().is_multiple_of(2))
        {
            return Err("--quorum-url: a quorum is an odd number of at least 3 nodes".into());
        }
        Ok(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Result<Args, String> {
        Args::parse(argv.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn the_default_set_has_no_cluster_workload() {
        let args = parse(&[]).unwrap();
        assert_eq!(args.workloads, Workload::ALL.to_vec());
        assert!(
            args.workloads
                .iter()
                .all(|w| !w.is_cluster() && !w.is_quorum())
        );
        assert_eq!(args.masters, 3);
    }

    #[test]
    fn cluster_workloads_run_when_named_or_added() {
        let named = parse(&["--workloads", "cluster_lock_parallel,ratelimit_parallel"]).unwrap();
        assert_eq!(
            named.workloads,
            vec![Workload::ClusterLockParallel, Workload::RatelimitParallel]
        );
        // --cluster appends, wherever it stands, without repeating a named one.
        let added = parse(&[
            "--cluster",
            "--workloads",
            "lock_uncontended_parallel,cluster_lock_parallel",
        ])
        .unwrap();
        assert_eq!(
            added.workloads,
            vec![
                Workload::LockUncontendedParallel,
                Workload::ClusterLockParallel,
                Workload::ClusterRatelimitParallel,
                Workload::ClusterLockParallelFenced
            ]
        );
        assert_eq!(parse(&["--cluster"]).unwrap().workloads.len(), 14);
        let both = parse(&["--quorum", "--cluster", "--workloads", "quorum_lock_seq"]).unwrap();
        assert_eq!(
            both.workloads,
            vec![
                Workload::QuorumLockSeq,
                Workload::ClusterLockParallel,
                Workload::ClusterRatelimitParallel,
                Workload::ClusterLockParallelFenced,
                Workload::QuorumLockParallel
            ]
        );
    }

    #[test]
    fn quorum_urls_are_an_odd_number_of_at_least_three() {
        let args = parse(&[
            "--quorum-url",
            "redis://a/,redis://b/",
            "--quorum-url",
            "redis://c/",
        ])
        .unwrap();
        assert_eq!(args.quorum_urls.len(), 3);
        assert!(parse(&["--quorum-url", "redis://a/"]).is_err());
        assert!(
            parse(&[
                "--quorum-url",
                "redis://a/,redis://b/,redis://c/,redis://d/"
            ])
            .is_err()
        );
    }

    #[test]
    fn cluster_urls_repeat_or_list() {
        let args = parse(&[
            "--cluster-url",
            "redis://127.0.0.1:7001/, redis://127.0.0.1:7002/",
            "--cluster-url",
            "redis://127.0.0.1:7003/",
            "--server-cpus",
            "0",
        ])
        .unwrap();
        assert_eq!(
            args.cluster_urls,
            [
                "redis://127.0.0.1:7001/",
                "redis://127.0.0.1:7002/",
                "redis://127.0.0.1:7003/"
            ]
        );
        assert_eq!(args.server_cpus.as_deref(), Some("0"));
        assert!(parse(&["--masters", "2"]).is_err());
        assert!(parse(&["--workloads", "cluster_nope"]).is_err());
    }

    #[test]
    fn runtime_defaults_to_current_thread() {
        assert_eq!(parse(&[]).unwrap().runtime, Runtime::CurrentThread);
        assert_eq!(
            parse(&["--runtime", "multi-thread"]).unwrap().runtime,
            Runtime::MultiThread
        );
        assert!(parse(&["--runtime", "single"]).is_err());
    }

    #[test]
    fn semaphore_workloads_run_only_when_named() {
        assert!(
            parse(&[])
                .unwrap()
                .workloads
                .iter()
                .all(|w| !Workload::EXTRA.contains(w))
        );
        let named = parse(&["--workloads", "semaphore_uncontended,semaphore_contended"]).unwrap();
        assert_eq!(
            named.workloads,
            [Workload::SemaphoreUncontended, Workload::SemaphoreContended]
        );
    }
}
