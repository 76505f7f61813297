//! The workloads of DESIGN §9, each runnable through either peer, and their cluster and
//! Redlock quorum variants.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;

use crate::cli::Args;
use crate::raw;
use crate::report::Outcome;
use crate::serverstats::{self, Accounting, Probe};
use crate::stats::Samples;

/// Lock ttl in every lock workload.
const LOCK_TTL: Duration = Duration::from_secs(30);

/// The raw Redlock baseline's bound on each node's answer: distlock's default
/// (`min(ttl / 10, 50 ms)`).
const QUORUM_NODE_TIMEOUT: Duration = Duration::from_millis(50);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    LockUncontendedSeq,
    LockUncontendedParallel,
    /// `lock_uncontended_seq` with eager leases (`.fenced()`: the grant mints the fence).
    LockUncontendedSeqFenced,
    /// `lock_uncontended_parallel` with eager leases.
    LockUncontendedParallelFenced,
    LockContended,
    /// `lock_contended` with fair locks (`.fair()`: granted in arrival order; only when
    /// named). Raw has no fair lock: its peer polls as in `lock_contended`.
    LockContendedFair,
    WatchdogScale,
    RatelimitSeq,
    RatelimitParallel,
    RatelimitAccuracy,
    RatelimitDeniedHot,
    LayerOverhead,
    /// `lock_uncontended_parallel` on a cluster.
    ClusterLockParallel,
    /// `cluster_lock_parallel` with eager leases.
    ClusterLockParallelFenced,
    /// `ratelimit_parallel` on a cluster.
    ClusterRatelimitParallel,
    /// Semaphore acquire/release cycles, each task on semaphores of its own.
    SemaphoreUncontended,
    /// 16 tasks on one semaphore of 4 permits.
    SemaphoreContended,
    /// `lock_uncontended_seq` on a Redlock quorum.
    QuorumLockSeq,
    /// `lock_uncontended_parallel` on a Redlock quorum.
    QuorumLockParallel,
    /// Bloom filter lookups, 1000 items per call (only when named).
    BloomContainsMany,
    /// 16 tasks on one subject near the exact limiter's capacity: distlock's hybrid limiter
    /// (leased shares) against its exact one in the same run, and the raw script (only when
    /// named).
    RatelimitHybrid,
    /// Envoy's rate-limit service over gRPC, every request on one descriptor (only when
    /// named).
    RlsOneDescriptor,
    /// The same, requests spread over 1,000 descriptors (only when named).
    RlsManyDescriptors,
    /// A process holding 100 leases and leading stops: how long until it gave them back,
    /// and until another process holds one of its locks and leads (only when named).
    Drain,
}

impl Workload {
    /// The default set (CI's smoke run expects exactly these, through both peers). The
    /// fenced variants keep the price of an eager fence in every table.
    pub const ALL: [Workload; 11] = [
        Self::LockUncontendedSeq,
        Self::LockUncontendedParallel,
        Self::LockUncontendedSeqFenced,
        Self::LockUncontendedParallelFenced,
        Self::LockContended,
        Self::RatelimitSeq,
        Self::RatelimitParallel,
        Self::RatelimitAccuracy,
        Self::RatelimitDeniedHot,
        Self::WatchdogScale,
        Self::LayerOverhead,
    ];

    /// Run only when named, or with `--cluster`.
    pub const CLUSTER: [Workload; 3] = [
        Self::ClusterLockParallel,
        Self::ClusterRatelimitParallel,
        Self::ClusterLockParallelFenced,
    ];

    /// Run only when named (CI's smoke run counts the default set's lines).
    pub const EXTRA: [Workload; 8] = [
        Self::SemaphoreUncontended,
        Self::SemaphoreContended,
        Self::BloomContainsMany,
        Self::RatelimitHybrid,
        Self::RlsOneDescriptor,
        Self::RlsManyDescriptors,
        Self::Drain,
        Self::LockContendedFair,
    ];
    /// Run only when named, or with `--quorum`. Locks only: a quorum client refuses rate limits.
    pub const QUORUM: [Workload; 2] = [Self::QuorumLockSeq, Self::QuorumLockParallel];

    pub fn name(self) -> &'static str {
        match self {
            Self::LockUncontendedSeq => "lock_uncontended_seq",
            Self::LockUncontendedParallel => "lock_uncontended_parallel",
            Self::LockUncontendedSeqFenced => "lock_uncontended_seq_fenced",
            Self::LockUncontendedParallelFenced => "lock_uncontended_parallel_fenced",
            Self::LockContended => "lock_contended",
            Self::LockContendedFair => "lock_contended_fair",
            Self::WatchdogScale => "watchdog_scale",
            Self::RatelimitSeq => "ratelimit_seq",
            Self::RatelimitParallel => "ratelimit_parallel",
            Self::RatelimitAccuracy => "ratelimit_accuracy",
            Self::RatelimitDeniedHot => "ratelimit_denied_hot",
            Self::LayerOverhead => "layer_overhead",
            Self::ClusterLockParallel => "cluster_lock_parallel",
            Self::ClusterLockParallelFenced => "cluster_lock_parallel_fenced",
            Self::ClusterRatelimitParallel => "cluster_ratelimit_parallel",
            Self::SemaphoreUncontended => "semaphore_uncontended",
            Self::SemaphoreContended => "semaphore_contended",
            Self::QuorumLockSeq => "quorum_lock_seq",
            Self::QuorumLockParallel => "quorum_lock_parallel",
            Self::BloomContainsMany => "bloom_contains_many",
            Self::RatelimitHybrid => "ratelimit_hybrid",
            Self::RlsOneDescriptor => "rls_one_descriptor",
            Self::RlsManyDescriptors => "rls_many_descriptors",
            Self::Drain => "drain",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .chain(Self::CLUSTER)
            .chain(Self::EXTRA)
            .chain(Self::QUORUM)
            .find(|w| w.name() == name)
    }

    /// Runs on the cluster instead of the single primary.
    pub fn is_cluster(self) -> bool {
        matches!(
            self,
            Self::ClusterLockParallel
                | Self::ClusterLockParallelFenced
                | Self::ClusterRatelimitParallel
        )
    }

    /// Runs with eager leases (`.fenced()`).
    pub fn is_fenced(self) -> bool {
        matches!(
            self,
            Self::LockUncontendedSeqFenced
                | Self::LockUncontendedParallelFenced
                | Self::ClusterLockParallelFenced
        )
    }

    /// Runs on the Redlock quorum instead of the single primary.
    pub fn is_quorum(self) -> bool {
        matches!(self, Self::QuorumLockSeq | Self::QuorumLockParallel)
    }

    /// The single-primary workload a cluster or quorum workload repeats.
    pub fn single_counterpart(self) -> Option<Self> {
        match self {
            Self::ClusterLockParallel | Self::QuorumLockParallel => {
                Some(Self::LockUncontendedParallel)
            }
            Self::ClusterLockParallelFenced => Some(Self::LockUncontendedParallelFenced),
            Self::QuorumLockSeq => Some(Self::LockUncontendedSeq),
            Self::ClusterRatelimitParallel => Some(Self::RatelimitParallel),
            _ => None,
        }
    }

    /// Reports the server's cost per operation, summed over the nodes (the cluster and quorum
    /// workloads and their single-primary counterparts, so they compare in one run): script
    /// calls per operation, items per call, server µs per operation and per call.
    pub fn measures_server(self) -> bool {
        matches!(
            self,
            Self::LockUncontendedSeq
                | Self::LockUncontendedParallel
                | Self::LockUncontendedSeqFenced
                | Self::LockUncontendedParallelFenced
                | Self::RatelimitSeq
                | Self::RatelimitParallel
                | Self::ClusterLockParallel
                | Self::ClusterLockParallelFenced
                | Self::ClusterRatelimitParallel
                | Self::QuorumLockSeq
                | Self::QuorumLockParallel
        )
    }

    /// (tasks, default time budget, op cap).
    pub fn shape(self) -> (usize, Duration, u64) {
        match self {
            Self::LockUncontendedSeq | Self::LockUncontendedSeqFenced | Self::QuorumLockSeq => {
                (1, Duration::from_secs(5), 20_000)
            }
            Self::LockUncontendedParallel
            | Self::LockUncontendedParallelFenced
            | Self::ClusterLockParallel
            | Self::ClusterLockParallelFenced
            | Self::QuorumLockParallel => (32, Duration::from_secs(5), 300_000),
            // A fixed count of sections: the time budget is only a safety stop.
            Self::LockContended | Self::LockContendedFair => (8, Duration::from_secs(120), 2_000),
            // 10 000 leases held for 15 s (the hold, not an op count, is the budget).
            Self::WatchdogScale => (1, Duration::from_secs(15), 10_000),
            // Shaped by their own modules.
            Self::RatelimitSeq
            | Self::RatelimitParallel
            | Self::ClusterRatelimitParallel
            | Self::RatelimitAccuracy
            | Self::RatelimitDeniedHot
            | Self::RatelimitHybrid
            | Self::LayerOverhead
            | Self::SemaphoreUncontended
            | Self::SemaphoreContended
            | Self::BloomContainsMany
            | Self::RlsOneDescriptor
            | Self::RlsManyDescriptors
            | Self::Drain => (1, Duration::from_secs(5), 0),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    Distlock,
    Raw,
}

impl Peer {
    pub fn name(self) -> &'static str {
        match self {
            Self::Distlock => "distlock",
            Self::Raw => "raw",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Distlock, Self::Raw]
            .into_iter()
            .find(|p| p.name() == name)
    }
}

/// Where the workloads run: the single primary and, for the `cluster_*` workloads, a cluster,
/// and for the `quorum_*` workloads, independent primaries.
#[derive(Debug, Default)]
pub struct Targets {
    pub single: Option<String>,
    pub cluster: Option<crate::cluster::Target>,
    pub quorum: Option<Vec<String>>,
}

impl Targets {
    pub fn single(&self) -> Result<&str, String> {
        self.single
            .as_deref()
            .ok_or_else(|| "no single primary".to_owned())
    }

    pub fn cluster(&self) -> Result<&crate::cluster::Target, String> {
        self.cluster.as_ref().ok_or_else(|| "no cluster".to_owned())
    }

    pub fn quorum(&self) -> Result<&[String], String> {
        self.quorum.as_deref().ok_or_else(|| "no quorum".to_owned())
    }

    /// The nodes that hold `workload`'s keys: the single primary, every master, or every
    /// node of the quorum.
    pub fn nodes(&self, workload: Workload) -> Result<Vec<String>, String> {
        if workload.is_quorum() {
            Ok(self.quorum()?.to_vec())
        } else if workload.is_cluster() {
            Ok(self.cluster()?.masters.clone())
        } else {
            Ok(vec![self.single()?.to_owned()])
        }
    }
}

/// A distlock client on the workload's topology.
pub async fn distlock_client(
    workload: Workload,
    targets: &Targets,
) -> Result<distlock::Client, String> {
    let client = if workload.is_quorum() {
        distlock::Client::connect_quorum(targets.quorum()?).await
    } else if workload.is_cluster() {
        distlock::Client::connect_cluster(&targets.cluster()?.seeds).await
    } else {
        distlock::Client::connect(targets.single()?).await
    };
    client.map_err(|e| e.to_string())
}

/// The thing under test: distlock's client, or the hand-written baseline's connection.
#[derive(Clone)]
enum Locker {
    /// A distlock client; `fenced`: eager leases (the grant mints the fence); `fair`: fair
    /// locks.
    Distlock {
        client: distlock::Client,
        fenced: bool,
        fair: bool,
    },
    Raw(MultiplexedConnection),
    RawCluster(ClusterConnection),
    /// One connection per node of the quorum.
    RawQuorum(Vec<MultiplexedConnection>),
}

impl Locker {
    async fn connect(peer: Peer, workload: Workload, targets: &Targets) -> Result<Self, String> {
        Ok(match peer {
            Peer::Distlock => Self::Distlock {
                client: distlock_client(workload, targets).await?,
                fenced: workload.is_fenced(),
                fair: workload == Workload::LockContendedFair,
            },
            Peer::Raw if workload.is_quorum() => {
                let mut nodes = Vec::new();
                for url in targets.quorum()? {
                    nodes.push(raw::connect(url).await?);
                }
                Self::RawQuorum(nodes)
            }
            Peer::Raw if workload.is_cluster() => {
                Self::RawCluster(raw::connect_cluster(&targets.cluster()?.seeds).await?)
            }
            Peer::Raw => Self::Raw(raw::connect(targets.single()?).await?),
        })
    }

    /// What the server counts as this peer's own commands, for a lock cycle on `nodes` nodes
    /// that each see the whole cycle (a quorum's) or on one node per cycle (otherwise).
    /// Commandstats count the commands scripts make under the same names, so only commands
    /// no script of the cycle makes are counted as plain: a quorum's boot check (`GET`) is
    /// left out (release.lua reads with `GET` too), its `TIME` is counted for a lazy lease.
    fn accounting(&self, nodes_per_op: u64, quorum: bool) -> Accounting<'static> {
        match self {
            // An eager acquire and the release, both carried by script calls.
            Self::Distlock { fenced: true, .. } => Accounting {
                plain: &[],
                scripted_items_per_op: 2 * nodes_per_op,
            },
            // A plain `SET NX PX` (behind the boot check and `TIME` on a quorum), and the
            // release script.
            Self::Distlock { fenced: false, .. } => Accounting {
                plain: if quorum { &["set", "time"] } else { &["set"] },
                scripted_items_per_op: nodes_per_op,
            },
            // A plain `SET NX PX`, and the release script.
            Self::Raw(_) | Self::RawCluster(_) | Self::RawQuorum(_) => Accounting {
                plain: &["set"],
                scripted_items_per_op: nodes_per_op,
            },
        }
    }

    /// Acquire (no waiting) and release one lock.
    async fn cycle(&mut self, key: &str) -> Result<(), String> {
        match self {
            Self::Distlock { client, fenced, .. } => {
                let lock = client.lock(key).ttl(LOCK_TTL);
                let lock = if *fenced { lock.fenced() } else { lock };
                let lease = lock.acquire().await.map_err(|e| e.to_string())?;
                lease.release().await.map_err(|e| e.to_string())?;
            }
            Self::Raw(conn) => raw_cycle(conn, key).await?,
            Self::RawCluster(conn) => raw_cycle(conn, key).await?,
            Self::RawQuorum(nodes) => {
                let token = raw::token();
                if !raw::quorum_try_acquire(nodes, key, &token, LOCK_TTL, QUORUM_NODE_TIMEOUT).await
                {
                    return Err(format!("{key}: no majority"));
                }
                raw::quorum_release(nodes, key, &token).await;
            }
        }
        Ok(())
    }

    /// Wait for the lock, bump the shared counter non-atomically, release. Returns the wait.
    async fn section(
        &mut self,
        key: &str,
        counter: &mut MultiplexedConnection,
    ) -> Result<Duration, String> {
        let start = Instant::now();
        match self {
            Self::Distlock { client, fair, .. } => {
                let lock = client.lock(key).ttl(LOCK_TTL).wait_forever();
                let lease = if *fair { lock.fair() } else { lock }
                    .acquire()
                    .await
                    .map_err(|e| e.to_string())?;
                let waited = start.elapsed();
                bump(counter).await?;
                lease.release().await.map_err(|e| e.to_string())?;
                Ok(waited)
            }
            Self::Raw(conn) => raw_section(conn, key, counter, start).await,
            Self::RawCluster(conn) => raw_section(conn, key, counter, start).await,
            Self::RawQuorum(_) => Err("no contended workload on a quorum".to_owned()),
        }
    }
}

/// The raw peer's lock cycle: `SET NX PX`, then the compare-and-delete script.
async fn raw_cycle(conn: &mut impl ConnectionLike, key: &str) -> Result<(), String> {
    let token = raw::token();
    if !raw::try_acquire(conn, key, &token, millis(LOCK_TTL))
        .await
        .map_err(|e| e.to_string())?
    {
        return Err(format!("{key} unexpectedly busy"));
    }
    raw::release(conn, key, &token)
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// The raw peer's critical section: poll for the lock, bump, release. Returns the wait.
async fn raw_section(
    conn: &mut impl ConnectionLike,
    key: &str,
    counter: &mut MultiplexedConnection,
    start: Instant,
) -> Result<Duration, String> {
    let token = raw::token();
    raw::acquire_polling(conn, key, &token, millis(LOCK_TTL))
        .await
        .map_err(|e| e.to_string())?;
    let waited = start.elapsed();
    bump(counter).await?;
    raw::release(conn, key, &token)
        .await
        .map_err(|e| e.to_string())?;
    Ok(waited)
}

/// The critical section of `lock_contended`: GET counter, SET counter + 1.
async fn bump(conn: &mut MultiplexedConnection) -> Result<(), String> {
    let seen: Option<u64> = conn.get("bench:counter").await.map_err(|e| e.to_string())?;
    let () = conn
        .set("bench:counter", seen.unwrap_or(0) + 1)
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Hands out operation numbers until the op cap or the deadline.
struct Budget {
    deadline: Instant,
    cap: u64,
    next: AtomicU64,
}

impl Budget {
    fn claim(&self) -> Option<u64> {
        if Instant::now() >= self.deadline {
            return None;
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        (n < self.cap).then_some(n)
    }
}

/// One run of a workload: which, for which peer, against which servers, with which settings.
#[derive(Clone, Copy)]
pub struct Job<'a> {
    pub workload: Workload,
    pub peer: Peer,
    pub targets: &'a Targets,
    pub args: &'a Args,
}

impl<'a> Job<'a> {
    /// The workload, the peer, the servers and the settings.
    pub fn parts(self) -> (Workload, Peer, &'a Targets, &'a Args) {
        (self.workload, self.peer, self.targets, self.args)
    }
}

struct TaskResult {
    samples: Samples,
    errors: u64,
}

pub async fn run(job: Job<'_>) -> Result<Outcome, String> {
    let (workload, peer, targets, args) = job.parts();
    match workload {
        Workload::WatchdogScale => {
            return crate::watchdog::run(peer, targets.single()?, args, workload.shape()).await;
        }
        Workload::LayerOverhead => return crate::layer::run(peer, args).await,
        Workload::Drain => return crate::drain::run(peer, targets.single()?, args).await,
        Workload::SemaphoreUncontended | Workload::SemaphoreContended => {
            return crate::semaphore::run(workload, peer, targets.single()?, args).await;
        }
        Workload::BloomContainsMany => return crate::bloom::run(peer, targets, args).await,
        Workload::RlsOneDescriptor | Workload::RlsManyDescriptors => {
            return crate::rls::run(job).await;
        }
        Workload::RatelimitSeq
        | Workload::RatelimitParallel
        | Workload::ClusterRatelimitParallel
        | Workload::RatelimitAccuracy
        | Workload::RatelimitDeniedHot
        | Workload::RatelimitHybrid => {
            return crate::ratelimit::run(job).await;
        }
        _ => {}
    }
    let (default_tasks, default_budget, default_cap) = workload.shape();
    let tasks = args.tasks.unwrap_or(default_tasks);
    let cap = args.ops.unwrap_or(default_cap);
    let budget_time = args.duration.unwrap_or(default_budget);
    let mut probe = Probe::connect(&targets.nodes(workload)?).await?;
    probe.flush().await?;
    // After the flush: a quorum client reads each node's boot value at connect, and a node
    // flushed under it would look restarted and sit out of majorities for the quarantine.
    let locker = Locker::connect(peer, workload, targets).await?;
    let mut admin = match workload {
        Workload::LockContended | Workload::LockContendedFair => {
            Some(raw::connect(targets.single()?).await?)
        }
        _ => None,
    };
    let run_id = rand::random::<u32>();
    let slot_names = args
        .cluster_slots
        .filter(|_| workload.is_cluster())
        .map(|n| Arc::new(crate::slots::SlotNames::new(n)));

    let before = if workload.measures_server() {
        Some(probe.snapshot().await?)
    } else {
        None
    };
    let started = Instant::now();
    let budget = Arc::new(Budget {
        deadline: started + budget_time,
        cap,
        next: AtomicU64::new(0),
    });
    // A set, so that a run cut short (a signal drops it) stops its tasks before the servers go.
    let mut handles = tokio::task::JoinSet::new();
    for task in 0..tasks {
        let mut locker = locker.clone();
        let budget = budget.clone();
        let mut counter = admin.clone();
        let slot_names = slot_names.clone();
        handles.spawn(async move {
            let mut result = TaskResult {
                samples: Samples::with_capacity(
                    usize::try_from(cap).unwrap_or(0) / tasks.max(1) + 1,
                ),
                errors: 0,
            };
            while let Some(op) = budget.claim() {
                let outcome = match workload {
                    Workload::LockUncontendedSeq
                    | Workload::LockUncontendedParallel
                    | Workload::LockUncontendedSeqFenced
                    | Workload::LockUncontendedParallelFenced
                    | Workload::ClusterLockParallel
                    | Workload::ClusterLockParallelFenced
                    | Workload::QuorumLockSeq
                    | Workload::QuorumLockParallel => {
                        let start = Instant::now();
                        let key = match &slot_names {
                            Some(names) => names.name(&format!("bench:{run_id}:{task}:{op}:"), op),
                            None => format!("bench:{run_id}:{task}:{op}"),
                        };
                        locker.cycle(&key).await.map(|()| start.elapsed())
                    }
                    Workload::LockContended | Workload::LockContendedFair => match counter.as_mut()
                    {
                        Some(counter) => locker.section("bench:hot", counter).await,
                        None => Err("no counter connection".to_owned()),
                    },
                    _ => Err(format!("{} has its own driver", workload.name())),
                };
                match outcome {
                    Ok(latency) => result.samples.record(latency),
                    Err(message) => {
                        if result.errors == 0 {
                            eprintln!("distlock-bench: first error in task {task}: {message}");
                        }
                        result.errors += 1;
                    }
                }
            }
            result
        });
    }
    let mut samples = Samples::default();
    let mut errors = 0;
    while let Some(joined) = handles.join_next().await {
        let result = joined.map_err(|e| format!("task failed: {e}"))?;
        samples.merge(result.samples);
        errors += result.errors;
    }
    let elapsed = started.elapsed();
    let server = match before {
        Some(before) => Some(probe.snapshot().await?.since(&before)),
        None => None,
    };

    let mut violations = 0;
    if let Some(admin) = admin.as_mut() {
        let counter: Option<u64> = admin
            .get("bench:counter")
            .await
            .map_err(|e| e.to_string())?;
        violations = (samples.len() as u64).saturating_sub(counter.unwrap_or(0));
    }
    let n = samples.len() as u64;
    let mut extra = vec![
        ("tasks", tasks.to_string()),
        ("seconds", format!("{:.3}", elapsed.as_secs_f64())),
    ];
    if let Some(n) = slot_names.as_ref().map(|s| s.targets().len()) {
        extra.push(("cluster_slots", n.to_string()));
    }
    if let Some(delta) = server {
        extra.extend(serverstats::fields(
            &delta,
            n,
            probe.nodes(),
            locker.accounting(
                if workload.is_quorum() {
                    probe.nodes() as u64
                } else {
                    1
                },
                workload.is_quorum(),
            ),
        ));
    }
    Ok(Outcome {
        errors,
        violations,
        extra,
        ..Outcome::timed(peer, workload.name(), &mut samples, elapsed)
    })
}
