//! The rate-limit workloads. The raw peer is one hand-written GCRA script, one EVALSHA per
//! decision, with no local cache: what a careful user writes on top of the `redis` crate (over
//! a cluster connection for `cluster_ratelimit_parallel`).
//!
//! `ratelimit_hybrid` runs distlock twice on fresh subjects, hybrid (shares of
//! [`HYBRID_SHARE`] synced every [`HYBRID_SYNC`]) then exact, and reports both: checks per
//! second, and how many passed over what the policy allows in the run's span (the overshoot;
//! the hybrid mode's documented bound is one share per replica, here one replica).

use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use distlock::ratelimit::{Policy, Rate, RateLimiter};
use redis::Script;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;

use crate::cli::Args;
use crate::raw;
use crate::report::Outcome;
use crate::serverstats::{self, Accounting, Probe};
use crate::stats::Samples;
use crate::workloads::{Job, Peer, Targets, Workload};

/// GCRA on one key: the key holds the theoretical arrival time (TAT) in µs of server time.
/// `ARGV[1]` emission interval in µs, `ARGV[2]` burst. Reply `{allowed, retry_after_us}`.
static RAW_GCRA: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
        local interval = tonumber(ARGV[1])
        local tolerance = interval * tonumber(ARGV[2])
        local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
        if tat < now then tat = now end
        local new_tat = tat + interval
        local allow_at = new_tat - tolerance
        if allow_at > now then return {0, allow_at - now} end
        redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', math.ceil((new_tat - now) / 1000))
        return {1, 0}
        ",
    )
});

/// The hybrid limiter's share in `ratelimit_hybrid`.
const HYBRID_SHARE: u32 = 1_000;
/// The hybrid limiter's sync interval in `ratelimit_hybrid`.
const HYBRID_SYNC: Duration = Duration::from_millis(50);

/// How distlock's limiter is built.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Exact { deny_cache: bool },
    Hybrid,
}

/// What decides: distlock's limiter, or the raw script with its parameters.
#[derive(Clone)]
enum Decider {
    Distlock(RateLimiter),
    Raw {
        conn: MultiplexedConnection,
        interval_us: u64,
        burst: u32,
    },
    RawCluster {
        conn: ClusterConnection,
        interval_us: u64,
        burst: u32,
    },
}

/// One decision of the raw script: `Ok(allowed)`.
/// One decision of the raw GCRA script on `subject` (for the other workloads' raw peers).
pub async fn raw_gcra_check(
    conn: &mut impl ConnectionLike,
    subject: &str,
    interval_us: u64,
    burst: u32,
) -> Result<bool, String> {
    raw_gcra(conn, subject, interval_us, burst).await
}

async fn raw_gcra(
    conn: &mut impl ConnectionLike,
    subject: &str,
    interval_us: u64,
    burst: u32,
) -> Result<bool, String> {
    let reply: Vec<i64> = RAW_GCRA
        .key(format!("bench:rl:{{{subject}}}"))
        .arg(interval_us)
        .arg(burst)
        .invoke_async(conn)
        .await
        .map_err(|e| e.to_string())?;
    Ok(reply.first() == Some(&1))
}

impl Decider {
    async fn new(
        peer: Peer,
        workload: Workload,
        targets: &Targets,
        rate: Rate,
        mode: Mode,
    ) -> Result<Self, String> {
        let interval_us =
            u64::try_from(rate.emission_interval().as_micros()).map_err(|e| e.to_string())?;
        Ok(match peer {
            Peer::Distlock => {
                let client = crate::workloads::distlock_client(workload, targets).await?;
                let policy = Policy::gcra("bench", rate).map_err(|e| e.to_string())?;
                let builder = client.rate_limiter(policy);
                let builder = match mode {
                    Mode::Exact { deny_cache: true } => builder,
                    Mode::Exact { deny_cache: false } => builder.deny_cache(0),
                    Mode::Hybrid => builder.hybrid(HYBRID_SHARE, HYBRID_SYNC),
                };
                Self::Distlock(builder.build().map_err(|e| e.to_string())?)
            }
            Peer::Raw if workload.is_cluster() => Self::RawCluster {
                conn: raw::connect_cluster(&targets.cluster()?.seeds).await?,
                interval_us,
                burst: rate.capacity(),
            },
            Peer::Raw => Self::Raw {
                conn: raw::connect(targets.single()?).await?,
                interval_us,
                burst: rate.capacity(),
            },
        })
    }

    /// One decision: `Ok(allowed)`.
    async fn decide(&mut self, subject: &str) -> Result<bool, String> {
        match self {
            Self::Distlock(limiter) => Ok(limiter
                .check(subject)
                .await
                .map_err(|e| e.to_string())?
                .allowed),
            Self::Raw {
                conn,
                interval_us,
                burst,
            } => raw_gcra(conn, subject, *interval_us, *burst).await,
            Self::RawCluster {
                conn,
                interval_us,
                burst,
            } => raw_gcra(conn, subject, *interval_us, *burst).await,
        }
    }
}

struct Shape {
    tasks: usize,
    budget: Duration,
    cap: u64,
    subjects: u64,
    rate: Rate,
    /// Subjects drawn from this many hash slots only (`--cluster-slots`, cluster workloads).
    slots: Option<u16>,
}

fn shape(workload: Workload, args: &Args) -> Result<Shape, String> {
    let never_denies = Rate::per_second(1_000_000)
        .and_then(|r| r.burst(1_000_000))
        .map_err(|e| e.to_string())?;
    let (tasks, budget, cap, subjects, rate) = match workload {
        Workload::RatelimitSeq => (1, Duration::from_secs(5), 20_000, 1, never_denies),
        Workload::RatelimitParallel | Workload::ClusterRatelimitParallel => {
            (64, Duration::from_secs(5), 300_000, 1000, never_denies)
        }
        Workload::RatelimitAccuracy => {
            let rate = Rate::per_second(100)
                .and_then(|r| r.burst(100))
                .map_err(|e| e.to_string())?;
            (16, Duration::from_secs(3), u64::MAX, 1, rate)
        }
        Workload::RatelimitDeniedHot => {
            // 10 per hour, spent before the run: every decision in the run is a denial.
            let rate = Rate::per_hour(10).map_err(|e| e.to_string())?;
            (64, Duration::from_secs(5), 2_000_000, 1, rate)
        }
        Workload::RatelimitHybrid => {
            // Above what exact checks reach on one primary (one round trip each, batched):
            // the exact limiter is bound by round trips, the hybrid one by the rate.
            let rate = Rate::per_second(200_000)
                .and_then(|r| r.burst(20_000))
                .map_err(|e| e.to_string())?;
            (16, Duration::from_secs(3), u64::MAX, 1, rate)
        }
        other => return Err(format!("{} is not a rate-limit workload", other.name())),
    };
    Ok(Shape {
        tasks: args.tasks.unwrap_or(tasks),
        budget: args.duration.unwrap_or(budget),
        cap: args.ops.unwrap_or(cap),
        subjects,
        rate,
        slots: args.cluster_slots.filter(|_| workload.is_cluster()),
    })
}

struct Run {
    samples: Samples,
    allowed: u64,
    errors: u64,
    elapsed: Duration,
}

async fn drive(decider: Decider, shape: &Shape, run_id: u32) -> Result<Run, String> {
    // Built before the clock starts: formatting one per operation costs about as much as a
    // deny-cache hit, and would be counted as the peer's time.
    let slot_names = shape.slots.map(crate::slots::SlotNames::new);
    let subjects: Vec<String> = (0..shape.subjects)
        .map(|i| match &slot_names {
            Some(names) => names.name(&format!("s{run_id}:{i}:"), i),
            None => format!("s{run_id}:{i}"),
        })
        .collect();
    let deadline = Instant::now() + shape.budget;
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    // A set, so that a run cut short (a signal drops it) stops its tasks before the servers go.
    let mut handles = tokio::task::JoinSet::new();
    for _ in 0..shape.tasks {
        let mut decider = decider.clone();
        let next = next.clone();
        let cap = shape.cap;
        let subjects = subjects.clone();
        handles.spawn(async move {
            let mut samples = Samples::default();
            let (mut allowed, mut errors) = (0u64, 0u64);
            loop {
                let op = next.fetch_add(1, Ordering::Relaxed);
                if op >= cap || Instant::now() >= deadline {
                    break;
                }
                let subject = &subjects[(op % subjects.len() as u64) as usize];
                let start = Instant::now();
                match decider.decide(subject).await {
                    Ok(ok) => {
                        samples.record(start.elapsed());
                        allowed += u64::from(ok);
                    }
                    Err(message) => {
                        if errors == 0 {
                            eprintln!("distlock-bench: first error: {message}");
                        }
                        errors += 1;
                    }
                }
            }
            (samples, allowed, errors)
        });
    }
    let mut run = Run {
        samples: Samples::default(),
        allowed: 0,
        errors: 0,
        elapsed: Duration::ZERO,
    };
    while let Some(joined) = handles.join_next().await {
        let (samples, allowed, errors) = joined.map_err(|e| e.to_string())?;
        run.samples.merge(samples);
        run.allowed += allowed;
        run.errors += errors;
    }
    run.elapsed = started.elapsed();
    Ok(run)
}

/// How many of `run`'s passes exceed what GCRA allows over its span: the burst, then one per
/// emission interval.
fn over_the_rate(run: &Run, shape: &Shape) -> u64 {
    let interval = shape.rate.emission_interval().as_secs_f64();
    let span = run.elapsed.as_secs_f64();
    let ideal = u64::from(shape.rate.capacity()) + (span / interval).ceil() as u64;
    run.allowed.saturating_sub(ideal)
}

pub async fn run(job: Job<'_>) -> Result<Outcome, String> {
    let (workload, peer, targets, args) = job.parts();
    let shape = shape(workload, args)?;
    let mut probe = Probe::connect(&targets.nodes(workload)?).await?;
    probe.flush().await?;
    let run_id = rand::random::<u32>();

    let mut extra = vec![("tasks", shape.tasks.to_string())];
    if let Some(n) = shape.slots {
        extra.push(("cluster_slots", n.to_string()));
    }
    if workload == Workload::RatelimitDeniedHot {
        // Spend the key first, so every decision in the run is a denial.
        let mode = Mode::Exact { deny_cache: false };
        let mut warm = Decider::new(peer, workload, targets, shape.rate, mode).await?;
        while warm.decide(&format!("s{run_id}:0")).await? {}
    }
    let mode = if workload == Workload::RatelimitHybrid && peer == Peer::Distlock {
        Mode::Hybrid
    } else {
        Mode::Exact { deny_cache: true }
    };
    let decider = Decider::new(peer, workload, targets, shape.rate, mode).await?;
    let before = if workload.measures_server() {
        Some(probe.snapshot().await?)
    } else {
        None
    };
    let mut run = drive(decider, &shape, run_id).await?;
    if let Some(before) = before {
        let delta = probe.snapshot().await?.since(&before);
        // Both peers: one check per script call item, no plain command.
        let accounting = Accounting {
            plain: &[],
            scripted_items_per_op: 1,
        };
        let n = run.samples.len() as u64;
        extra.extend(serverstats::fields(&delta, n, probe.nodes(), accounting));
    }

    let violations = match workload {
        Workload::RatelimitAccuracy => {
            // GCRA: the burst at once, then one per emission interval.
            let interval = shape.rate.emission_interval().as_secs_f64();
            // Over the time decisions were made (the budget), not the tasks' wind-down.
            let span = run.elapsed.min(shape.budget).as_secs_f64();
            let ideal = u64::from(shape.rate.capacity()) + (span / interval).floor() as u64;
            extra.push(("allowed", run.allowed.to_string()));
            extra.push(("ideal", ideal.to_string()));
            extra.push(("algorithm", "\"gcra\"".to_owned()));
            run.allowed.saturating_sub(ideal)
        }
        Workload::RatelimitDeniedHot if peer == Peer::Distlock => {
            // The same run with the deny cache off, for the ratio.
            let mode = Mode::Exact { deny_cache: false };
            let without = Decider::new(peer, workload, targets, shape.rate, mode).await?;
            let off = drive(without, &shape, run_id).await?;
            let on_rate = run.samples.len() as f64 / run.elapsed.as_secs_f64();
            let off_rate = off.samples.len() as f64 / off.elapsed.as_secs_f64();
            extra.push(("deny_cache_off_ops_per_s", format!("{off_rate:.1}")));
            extra.push(("deny_cache_speedup", format!("{:.1}", on_rate / off_rate)));
            run.allowed + off.allowed
        }
        Workload::RatelimitDeniedHot => run.allowed,
        Workload::RatelimitHybrid => {
            let overshoot = over_the_rate(&run, &shape);
            extra.push(("allowed", run.allowed.to_string()));
            extra.push(("overshoot", overshoot.to_string()));
            if peer == Peer::Distlock {
                // The exact limiter in the same run, on subjects of its own.
                let mode = Mode::Exact { deny_cache: true };
                let exact = Decider::new(peer, workload, targets, shape.rate, mode).await?;
                let other = drive(exact, &shape, run_id.wrapping_add(1)).await?;
                let rate = other.samples.len() as f64 / other.elapsed.as_secs_f64();
                extra.push(("share", HYBRID_SHARE.to_string()));
                extra.push(("exact_ops_per_s", format!("{rate:.1}")));
                extra.push(("exact_allowed", other.allowed.to_string()));
                extra.push(("exact_overshoot", over_the_rate(&other, &shape).to_string()));
                // Beyond the documented bound (one share for this one replica).
                overshoot.saturating_sub(u64::from(HYBRID_SHARE))
            } else {
                overshoot
            }
        }
        _ => {
            // Never-denying workloads: a denial is a violation of the setup.
            (run.samples.len() as u64).saturating_sub(run.allowed)
        }
    };
    Ok(Outcome {
        errors: run.errors,
        violations,
        extra,
        ..Outcome::timed(peer, workload.name(), &mut run.samples, run.elapsed)
    })
}
