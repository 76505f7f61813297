//! `drain`: a process that stops while holding `--ops` leases (default 100) and leading an
//! election, and another process that waits for one of those locks and campaigns for the
//! same leadership. Reports how long the stopping process takes to give everything back, and
//! how long after the stop began the other process holds the lock and leads (ttl 30 s: what
//! they would wait without a drain). Repeated `--rounds`-style within one run: the time
//! budget (`--duration`, default 5 s) bounds how many stops are measured.
//!
//! The raw peer is what a service writes by hand without a drain: it tracks its own keys,
//! deletes each with the compare-and-delete script on stop, and the other process polls the
//! lock every millisecond (raw Redis has no wake-up and no election, so `leader_ms` is
//! absent for it).

use std::time::{Duration, Instant};

use crate::cli::Args;
use crate::raw;
use crate::report::Outcome;
use crate::stats::Samples;
use crate::workloads::Peer;

const TTL: Duration = Duration::from_secs(30);
const DEFAULT_LEASES: u64 = 100;

/// One stop: (time to give every lease back, time until the other process held the lock,
/// time until it led, if measured).
struct Stop {
    released: Duration,
    lock: Duration,
    leader: Option<Duration>,
}

async fn stop_distlock(url: &str, leases: usize, round: usize) -> Result<Stop, String> {
    let stopping = distlock::Client::connect(url)
        .await
        .map_err(|e| e.to_string())?;
    let other = distlock::Client::connect(url)
        .await
        .map_err(|e| e.to_string())?;
    let election_name = format!("drain:{round}:leader");
    let mut held = Vec::with_capacity(leases);
    for i in 0..leases {
        let lease = stopping
            .lock(format!("drain:{round}:{i}"))
            .ttl(TTL)
            .acquire()
            .await
            .map_err(|e| e.to_string())?;
        held.push(lease);
    }
    let leading = stopping
        .election(&election_name)
        .ttl(TTL)
        .build()
        .map_err(|e| e.to_string())?
        .campaign("stopping")
        .await
        .map_err(|e| e.to_string())?;
    let election = other
        .election(&election_name)
        .ttl(TTL)
        .build()
        .map_err(|e| e.to_string())?;
    let follower = tokio::spawn(async move {
        let leadership = election.campaign("other").await;
        (Instant::now(), leadership.map(drop))
    });
    let waiter_client = other.clone();
    let first = format!("drain:{round}:0");
    let waiter = tokio::spawn(async move {
        let lease = waiter_client
            .lock(first)
            .ttl(TTL)
            .wait(2 * TTL)
            .acquire()
            .await;
        let at = Instant::now();
        if let Ok(lease) = lease {
            let _ = lease.release().await;
        }
        at
    });
    // Let the waiter and the follower reach the store and subscribe.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let report = stopping.shutdown(Duration::from_secs(10)).await;
    let released = started.elapsed();
    if !report.not_released.is_empty() {
        return Err(format!("{} leases not released", report.not_released.len()));
    }
    drop((held, leading));
    let lock_at = waiter.await.map_err(|e| e.to_string())?;
    let (leader_at, led) = follower.await.map_err(|e| e.to_string())?;
    led.map_err(|e| e.to_string())?;
    other.shutdown(Duration::from_secs(10)).await;
    Ok(Stop {
        released,
        lock: lock_at.saturating_duration_since(started),
        leader: Some(leader_at.saturating_duration_since(started)),
    })
}

async fn stop_raw(url: &str, leases: usize, round: usize) -> Result<Stop, String> {
    let mut conn = raw::connect(url).await?;
    let mut other = raw::connect(url).await?;
    let ttl_ms = u64::try_from(TTL.as_millis()).unwrap_or(u64::MAX);
    let mut held = Vec::with_capacity(leases);
    for i in 0..leases {
        let key = format!("drain:{round}:{i}");
        let token = raw::token();
        if !raw::try_acquire(&mut conn, &key, &token, ttl_ms)
            .await
            .map_err(|e| e.to_string())?
        {
            return Err(format!("{key} was busy"));
        }
        held.push((key, token));
    }
    let first = format!("drain:{round}:0");
    let waiter = tokio::spawn(async move {
        let token = raw::token();
        let got = raw::acquire_polling(&mut other, &first, &token, ttl_ms).await;
        let at = Instant::now();
        if got.is_ok() {
            let _ = raw::release(&mut other, &first, &token).await;
        }
        at
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let releases = held.iter().map(|(key, token)| {
        let mut conn = conn.clone();
        async move { raw::release(&mut conn, key, token).await }
    });
    for released in futures_util::future::join_all(releases).await {
        released.map_err(|e| e.to_string())?;
    }
    let released = started.elapsed();
    let lock_at = waiter.await.map_err(|e| e.to_string())?;
    Ok(Stop {
        released,
        lock: lock_at.saturating_duration_since(started),
        leader: None,
    })
}

fn ms(d: f64) -> String {
    format!("{:.3}", d / 1000.0)
}

pub async fn run(peer: Peer, url: &str, args: &Args) -> Result<Outcome, String> {
    let leases = usize::try_from(args.ops.unwrap_or(DEFAULT_LEASES)).map_err(|e| e.to_string())?;
    if leases == 0 {
        return Err("drain needs at least one lease (--ops)".into());
    }
    let budget = args.duration.unwrap_or(Duration::from_secs(5));
    let mut admin = raw::connect(url).await?;
    let () = redis::cmd("FLUSHALL")
        .query_async(&mut admin)
        .await
        .map_err(|e| e.to_string())?;
    let (mut released, mut lock, mut leader) = (
        Samples::with_capacity(16),
        Samples::with_capacity(16),
        Samples::with_capacity(16),
    );
    let began = Instant::now();
    let mut stops = 0;
    // At least three stops, then as many as the budget allows.
    while stops < 3 || began.elapsed() < budget {
        let stop = match peer {
            Peer::Distlock => stop_distlock(url, leases, stops).await?,
            Peer::Raw => stop_raw(url, leases, stops).await?,
        };
        released.record(stop.released);
        lock.record(stop.lock);
        if let Some(at) = stop.leader {
            leader.record(at);
        }
        stops += 1;
    }
    let (released_p50, released_p99, _) = released.percentiles();
    let (lock_p50, lock_p99, lock_max) = lock.percentiles();
    let mut extra = vec![
        ("leases", leases.to_string()),
        ("stops", stops.to_string()),
        ("release_all_ms_p50", ms(released_p50)),
        ("release_all_ms_p99", ms(released_p99)),
        ("lock_ms_p50", ms(lock_p50)),
        ("lock_ms_p99", ms(lock_p99)),
        ("ttl_ms", TTL.as_millis().to_string()),
    ];
    if peer == Peer::Distlock {
        let (leader_p50, leader_p99, _) = leader.percentiles();
        extra.push(("leader_ms_p50", ms(leader_p50)));
        extra.push(("leader_ms_p99", ms(leader_p99)));
    }
    Ok(Outcome {
        peer: peer.name(),
        workload: "drain",
        // Leases given back per second of drain.
        ops_per_s: leases as f64 / (released_p50 / 1e6).max(1e-9),
        p50_us: lock_p50,
        p99_us: lock_p99,
        max_us: lock_max,
        errors: 0,
        violations: 0,
        n: stops as u64,
        extra,
    })
}
