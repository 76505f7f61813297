//! The workloads of DESIGN §9, each runnable through either peer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

use crate::cli::Args;
use crate::raw;
use crate::report::Outcome;
use crate::stats::Samples;

/// Lock ttl in every lock workload.
const LOCK_TTL: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    LockUncontendedSeq,
    LockUncontendedParallel,
    LockContended,
    WatchdogScale,
    RatelimitSeq,
    RatelimitParallel,
    RatelimitAccuracy,
    RatelimitDeniedHot,
    LayerOverhead,
}

impl Workload {
    pub const ALL: [Workload; 9] = [
        Self::LockUncontendedSeq,
        Self::LockUncontendedParallel,
        Self::LockContended,
        Self::RatelimitSeq,
        Self::RatelimitParallel,
        Self::RatelimitAccuracy,
        Self::RatelimitDeniedHot,
        Self::WatchdogScale,
        Self::LayerOverhead,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::LockUncontendedSeq => "lock_uncontended_seq",
            Self::LockUncontendedParallel => "lock_uncontended_parallel",
            Self::LockContended => "lock_contended",
            Self::WatchdogScale => "watchdog_scale",
            Self::RatelimitSeq => "ratelimit_seq",
            Self::RatelimitParallel => "ratelimit_parallel",
            Self::RatelimitAccuracy => "ratelimit_accuracy",
            Self::RatelimitDeniedHot => "ratelimit_denied_hot",
            Self::LayerOverhead => "layer_overhead",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.name() == name)
    }

    /// (tasks, default time budget, op cap).
    pub fn shape(self) -> (usize, Duration, u64) {
        match self {
            Self::LockUncontendedSeq => (1, Duration::from_secs(5), 20_000),
            Self::LockUncontendedParallel => (32, Duration::from_secs(5), 300_000),
            // A fixed count of sections: the time budget is only a safety stop.
            Self::LockContended => (8, Duration::from_secs(120), 2_000),
            // 10 000 leases held for 15 s (the hold, not an op count, is the budget).
            Self::WatchdogScale => (1, Duration::from_secs(15), 10_000),
            // Shaped by their own modules.
            Self::RatelimitSeq
            | Self::RatelimitParallel
            | Self::RatelimitAccuracy
            | Self::RatelimitDeniedHot
            | Self::LayerOverhead => (1, Duration::from_secs(5), 0),
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

/// The thing under test: distlock's client, or the hand-written baseline's connection.
#[derive(Clone)]
enum Locker {
    Distlock(distlock::Client),
    Raw(MultiplexedConnection),
}

impl Locker {
    async fn connect(peer: Peer, url: &str) -> Result<Self, String> {
        Ok(match peer {
            Peer::Distlock => Self::Distlock(
                distlock::Client::connect(url)
                    .await
                    .map_err(|e| e.to_string())?,
            ),
            Peer::Raw => Self::Raw(raw::connect(url).await?),
        })
    }

    /// Acquire (no waiting) and release one lock.
    async fn cycle(&mut self, key: &str) -> Result<(), String> {
        match self {
            Self::Distlock(client) => {
                let lease = client
                    .lock(key)
                    .ttl(LOCK_TTL)
                    .acquire()
                    .await
                    .map_err(|e| e.to_string())?;
                lease.release().await.map_err(|e| e.to_string())?;
            }
            Self::Raw(conn) => {
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
            Self::Distlock(client) => {
                let lease = client
                    .lock(key)
                    .ttl(LOCK_TTL)
                    .wait_forever()
                    .acquire()
                    .await
                    .map_err(|e| e.to_string())?;
                let waited = start.elapsed();
                bump(counter).await?;
                lease.release().await.map_err(|e| e.to_string())?;
                Ok(waited)
            }
            Self::Raw(conn) => {
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
        }
    }
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

struct TaskResult {
    samples: Samples,
    errors: u64,
}

pub async fn run(
    workload: Workload,
    peer: Peer,
    url: &str,
    args: &Args,
) -> Result<Outcome, String> {
    match workload {
        Workload::WatchdogScale => {
            return crate::watchdog::run(peer, url, args, workload.shape()).await;
        }
        Workload::LayerOverhead => return crate::layer::run(peer, args).await,
        Workload::RatelimitSeq
        | Workload::RatelimitParallel
        | Workload::RatelimitAccuracy
        | Workload::RatelimitDeniedHot => {
            return crate::ratelimit::run(workload, peer, url, args).await;
        }
        _ => {}
    }
    let (default_tasks, default_budget, default_cap) = workload.shape();
    let tasks = args.tasks.unwrap_or(default_tasks);
    let cap = args.ops.unwrap_or(default_cap);
    let budget_time = args.duration.unwrap_or(default_budget);
    let locker = Locker::connect(peer, url).await?;
    let mut admin = raw::connect(url).await?;
    let () = redis::cmd("FLUSHALL")
        .query_async(&mut admin)
        .await
        .map_err(|e| e.to_string())?;
    let run_id = rand::random::<u32>();

    let started = Instant::now();
    let budget = Arc::new(Budget {
        deadline: started + budget_time,
        cap,
        next: AtomicU64::new(0),
    });
    let mut handles = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let mut locker = locker.clone();
        let budget = budget.clone();
        let mut counter = admin.clone();
        handles.push(tokio::spawn(async move {
            let mut result = TaskResult {
                samples: Samples::with_capacity(
                    usize::try_from(cap).unwrap_or(0) / tasks.max(1) + 1,
                ),
                errors: 0,
            };
            while let Some(op) = budget.claim() {
                let outcome = match workload {
                    Workload::LockUncontendedSeq | Workload::LockUncontendedParallel => {
                        let start = Instant::now();
                        let key = format!("bench:{run_id}:{task}:{op}");
                        locker.cycle(&key).await.map(|()| start.elapsed())
                    }
                    Workload::LockContended => locker.section("bench:hot", &mut counter).await,
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
        }));
    }
    let mut samples = Samples::default();
    let mut errors = 0;
    for handle in handles {
        let result = handle.await.map_err(|e| format!("task failed: {e}"))?;
        samples.merge(result.samples);
        errors += result.errors;
    }
    let elapsed = started.elapsed();

    let mut violations = 0;
    if workload == Workload::LockContended {
        let counter: Option<u64> = admin
            .get("bench:counter")
            .await
            .map_err(|e| e.to_string())?;
        violations = (samples.len() as u64).saturating_sub(counter.unwrap_or(0));
    }
    let n = samples.len() as u64;
    let (p50_us, p99_us, max_us) = samples.percentiles();
    Ok(Outcome {
        peer: peer.name(),
        workload: workload.name(),
        ops_per_s: n as f64 / elapsed.as_secs_f64(),
        p50_us,
        p99_us,
        max_us,
        errors,
        violations,
        n,
        extra: vec![
            ("tasks", tasks.to_string()),
            ("seconds", format!("{:.3}", elapsed.as_secs_f64())),
        ],
    })
}
