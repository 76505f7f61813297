//! `watchdog_scale`: many leases held at once, renewed in the background. Reports the renewal
//! round trips per second (script invocations, from `INFO commandstats`) against the naive
//! figure of one renewal per lease per ttl/3, and how many leases were lost. The raw peer
//! renews each lease on its own timer with a compare-and-`PEXPIRE` script, as a hand-written
//! watchdog would.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::Script;
use redis::aio::MultiplexedConnection;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cli::Args;
use crate::raw;
use crate::report::Outcome;
use crate::stats::Samples;
use crate::workloads::Peer;

const TTL: Duration = Duration::from_secs(3);

static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then \
         return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0",
    )
});

/// Calls so far: (script invocations = round trips, all commands including those that ran
/// inside scripts).
async fn calls(conn: &mut MultiplexedConnection) -> Result<(u64, u64), String> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .map_err(|e| e.to_string())?;
    let (mut scripts, mut all) = (0, 0);
    for line in info.lines() {
        let Some(n) = line
            .split("calls=")
            .nth(1)
            .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
        else {
            continue;
        };
        all += n;
        if line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:") {
            scripts += n;
        }
    }
    Ok((scripts, all))
}

/// The leases held, the peer's way.
enum Held {
    /// distlock's leases, renewed by the client's watchdog.
    Distlock(distlock::Client, Vec<distlock::Lease>),
    /// One renewal task a lease, until the token stops them; a task returns whether it found
    /// its lease gone.
    Raw(CancellationToken, Vec<JoinHandle<bool>>),
}

impl Held {
    /// Stops holding: releases the leases and returns how many were lost.
    async fn release(self) -> Result<usize, String> {
        match self {
            Self::Distlock(_client, held) => {
                let lost = held.iter().filter(|lease| lease.is_lost()).count();
                for lease in held {
                    let _ = lease.release().await;
                }
                Ok(lost)
            }
            Self::Raw(stop, tasks) => {
                stop.cancel();
                let mut lost = 0;
                for task in tasks {
                    if task.await.map_err(|e| e.to_string())? {
                        lost += 1;
                    }
                }
                Ok(lost)
            }
        }
    }
}

/// Takes `leases` leases the peer's way, recording each acquisition's latency or error.
async fn acquire(
    peer: Peer,
    url: &str,
    leases: usize,
    latency: &mut Samples,
    errors: &AtomicU64,
) -> Result<Held, String> {
    match peer {
        Peer::Distlock => {
            let client = distlock::Client::connect(url)
                .await
                .map_err(|e| e.to_string())?;
            let mut held = Vec::with_capacity(leases);
            for i in 0..leases {
                let start = Instant::now();
                match client.lock(format!("wd:{i}")).ttl(TTL).acquire().await {
                    Ok(lease) => {
                        latency.record(start.elapsed());
                        held.push(lease);
                    }
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Ok(Held::Distlock(client, held))
        }
        Peer::Raw => {
            let conn = raw::connect(url).await?;
            let stop = CancellationToken::new();
            let ttl_ms = u64::try_from(TTL.as_millis()).unwrap_or(u64::MAX);
            let mut tasks = Vec::with_capacity(leases);
            for i in 0..leases {
                let key = format!("wd:{i}");
                let token = raw::token();
                let mut conn = conn.clone();
                let start = Instant::now();
                if !raw::try_acquire(&mut conn, &key, &token, ttl_ms)
                    .await
                    .unwrap_or(false)
                {
                    errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                latency.record(start.elapsed());
                tasks.push(tokio::spawn(renew_raw(
                    conn,
                    key,
                    token,
                    ttl_ms,
                    stop.clone(),
                )));
            }
            Ok(Held::Raw(stop, tasks))
        }
    }
}

/// The raw peer's watchdog of one lease: renews it every ttl/3 until stopped, then releases
/// it. Returns whether a renewal found the key gone (the lease lost).
async fn renew_raw(
    mut conn: MultiplexedConnection,
    key: String,
    token: String,
    ttl_ms: u64,
    stop: CancellationToken,
) -> bool {
    let first = tokio::time::Instant::now() + TTL / 3;
    let mut tick = tokio::time::interval_at(first, TTL / 3);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => break,
        }
        let renewed: i64 = RENEW
            .key(&key)
            .arg(&token)
            .arg(ttl_ms)
            .invoke_async(&mut conn)
            .await
            .unwrap_or(0);
        if renewed != 1 {
            return true;
        }
    }
    let _ = raw::release(&mut conn, &key, &token).await;
    false
}

pub async fn run(
    peer: Peer,
    url: &str,
    args: &Args,
    shape: (usize, Duration, u64),
) -> Result<Outcome, String> {
    let (_, default_hold, default_leases) = shape;
    let hold = args.duration.unwrap_or(default_hold);
    let leases = usize::try_from(args.ops.unwrap_or(default_leases)).map_err(|e| e.to_string())?;
    let mut admin = raw::connect(url).await?;
    let () = redis::cmd("FLUSHALL")
        .query_async(&mut admin)
        .await
        .map_err(|e| e.to_string())?;
    let mut latency = Samples::with_capacity(leases);
    let errors = AtomicU64::new(0);
    let held = acquire(peer, url, leases, &mut latency, &errors).await?;
    let before = calls(&mut admin).await?;
    tokio::time::sleep(hold).await;
    let after = calls(&mut admin).await?;
    let lost = held.release().await?;
    // Less one command: the INFO that read `before`, which `after` counts.
    let (round_trips, commands) = (after.0 - before.0, after.1 - before.1 - 1);
    let seconds = hold.as_secs_f64();
    let round_trips_per_s = round_trips as f64 / seconds;
    // The reference: one renewal per lease per ttl/3.
    let naive = leases as f64 / (TTL / 3).as_secs_f64();
    let (p50_us, p99_us, max_us) = latency.percentiles();
    Ok(Outcome {
        peer: peer.name(),
        workload: "watchdog_scale",
        ops_per_s: naive,
        p50_us,
        p99_us,
        max_us,
        errors: errors.load(Ordering::Relaxed),
        violations: lost as u64,
        n: leases as u64,
        extra: vec![
            (
                "renewal_round_trips_per_s",
                format!("{round_trips_per_s:.1}"),
            ),
            (
                "renewal_commands_per_s",
                format!("{:.1}", commands as f64 / seconds),
            ),
            (
                "renewal_cost_ratio",
                format!("{:.4}", round_trips_per_s / naive),
            ),
            ("lost", lost.to_string()),
            ("hold_s", format!("{seconds:.1}")),
        ],
    })
}
