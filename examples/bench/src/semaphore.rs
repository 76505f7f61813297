//! `semaphore_uncontended` and `semaphore_contended`: acquire/release cycles of a semaphore's
//! permit. Not in the default set (CI's smoke run counts its lines); run them by name.
//!
//! * `semaphore_uncontended`: 32 tasks, each on semaphores of its own (5 permits), acquire one
//!   permit and release it. Latency is the cycle.
//! * `semaphore_contended`: 16 tasks on ONE semaphore of 4 permits, 2000 sections; each
//!   section counts itself in an occupancy counter on the server (INCR, a 0–1 ms sleep, DECR)
//!   and `violations` is how many sections saw more than 4 inside. p50/p99 are the wait for a
//!   permit.
//!
//! The raw peer is what a careful user writes by hand: the sorted-set semaphore of the Redis
//! documentation as one script (prune expired entries, count, add the holder if there is
//! room), a `ZREM` to release, polling every millisecond while full, no fencing, no renewal,
//! no wake-ups.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, Script};

use crate::cli::Args;
use crate::raw;
use crate::report::Outcome;
use crate::stats::Samples;
use crate::workloads::{Peer, Workload};

/// Permit ttl in both workloads (never reached: no holder dies).
const TTL: Duration = Duration::from_secs(30);

/// The raw peer's acquire: prune, count, add if there is room. `1` granted, `0` full.
static RAW_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local t = redis.call('TIME') \
         local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
         redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) \
         if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then \
           redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1]) \
           redis.call('PEXPIRE', KEYS[1], ARGV[3]) \
           return 1 \
         end \
         return 0",
    )
});

/// (tasks, permits, time budget, op cap).
fn shape(workload: Workload) -> (usize, u32, Duration, u64) {
    match workload {
        Workload::SemaphoreContended => (16, 4, Duration::from_secs(120), 2_000),
        _ => (32, 5, Duration::from_secs(5), 300_000),
    }
}

/// One cycle through either peer: take a permit of `name` (waiting if `wait`), run `inside`,
/// give it back. Returns how long taking the permit took.
async fn cycle(
    peer: &Semaphores,
    name: &str,
    permits: u32,
    wait: bool,
) -> Result<(Duration, Release), String> {
    let start = Instant::now();
    match peer {
        Semaphores::Distlock(client) => {
            let builder = client.semaphore(name, permits).ttl(TTL);
            let builder = if wait {
                builder.wait_forever()
            } else {
                builder
            };
            let lease = builder.acquire().await.map_err(|e| e.to_string())?;
            Ok((start.elapsed(), Release::Distlock(lease)))
        }
        Semaphores::Raw(conn) => {
            let mut conn = conn.clone();
            let token = raw::token();
            let key = format!("raw-sem:{name}");
            loop {
                let granted: i64 = RAW_ACQUIRE
                    .key(&key)
                    .arg(&token)
                    .arg(permits)
                    .arg(u64::try_from(TTL.as_millis()).unwrap_or(u64::MAX))
                    .invoke_async(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                if granted == 1 {
                    return Ok((start.elapsed(), Release::Raw { conn, key, token }));
                }
                if !wait {
                    return Err(format!("{name} unexpectedly full"));
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
}

/// A held permit, for either peer.
enum Release {
    Distlock(distlock::Lease),
    Raw {
        conn: MultiplexedConnection,
        key: String,
        token: String,
    },
}

impl Release {
    async fn release(self) -> Result<(), String> {
        match self {
            Self::Distlock(lease) => lease.release().await.map(|_| ()).map_err(|e| e.to_string()),
            Self::Raw {
                mut conn,
                key,
                token,
            } => conn
                .zrem::<_, _, i64>(&key, &token)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
        }
    }
}

#[derive(Clone)]
enum Semaphores {
    Distlock(distlock::Client),
    Raw(MultiplexedConnection),
}

pub async fn run(
    workload: Workload,
    peer: Peer,
    url: &str,
    args: &Args,
) -> Result<Outcome, String> {
    let (default_tasks, permits, default_budget, default_cap) = shape(workload);
    let tasks = args.tasks.unwrap_or(default_tasks);
    let cap = args.ops.unwrap_or(default_cap);
    let budget = args.duration.unwrap_or(default_budget);
    let contended = workload == Workload::SemaphoreContended;
    let semaphores = match peer {
        Peer::Distlock => Semaphores::Distlock(
            distlock::Client::connect(url)
                .await
                .map_err(|e| e.to_string())?,
        ),
        Peer::Raw => Semaphores::Raw(raw::connect(url).await?),
    };
    let mut admin = raw::connect(url).await?;
    let run_id = rand::random::<u32>();
    let occupancy = format!("bench:sem-occupancy:{run_id}");
    let started = Instant::now();
    let deadline = started + budget;
    let next = Arc::new(AtomicU64::new(0));
    let violations = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let semaphores = semaphores.clone();
        let (next, violations) = (next.clone(), violations.clone());
        let mut counter = admin.clone();
        let occupancy = occupancy.clone();
        handles.push(tokio::spawn(async move {
            let mut samples = Samples::default();
            let mut errors = 0u64;
            loop {
                if Instant::now() >= deadline {
                    break;
                }
                let op = next.fetch_add(1, Ordering::Relaxed);
                if op >= cap {
                    break;
                }
                let name = if contended {
                    format!("bench:{run_id}:hot")
                } else {
                    format!("bench:{run_id}:{task}:{}", op % 64)
                };
                let cycle_start = Instant::now();
                let outcome = async {
                    let (waited, held) = cycle(&semaphores, &name, permits, contended).await?;
                    if contended {
                        let inside: i64 = counter
                            .incr(&occupancy, 1)
                            .await
                            .map_err(|e| e.to_string())?;
                        if inside > i64::from(permits) {
                            violations.fetch_add(1, Ordering::Relaxed);
                        }
                        tokio::time::sleep(Duration::from_micros(rand::random_range(0..1000)))
                            .await;
                        let _: i64 = counter
                            .decr(&occupancy, 1)
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                    held.release().await?;
                    Ok::<_, String>(waited)
                }
                .await;
                match outcome {
                    Ok(waited) => {
                        samples.record(if contended {
                            waited
                        } else {
                            cycle_start.elapsed()
                        });
                    }
                    Err(message) => {
                        if errors == 0 {
                            eprintln!("distlock-bench: first error in task {task}: {message}");
                        }
                        errors += 1;
                    }
                }
            }
            (samples, errors)
        }));
    }
    let mut samples = Samples::default();
    let mut errors = 0;
    for handle in handles {
        let (task_samples, task_errors) = handle.await.map_err(|e| format!("task failed: {e}"))?;
        samples.merge(task_samples);
        errors += task_errors;
    }
    let elapsed = started.elapsed();
    let _: i64 = admin.del(&occupancy).await.map_err(|e| e.to_string())?;
    Ok(Outcome {
        errors,
        violations: violations.load(Ordering::Relaxed),
        extra: vec![
            ("tasks", tasks.to_string()),
            ("permits", permits.to_string()),
            ("seconds", format!("{:.3}", elapsed.as_secs_f64())),
        ],
        ..Outcome::timed(peer, workload.name(), &mut samples, elapsed)
    })
}
