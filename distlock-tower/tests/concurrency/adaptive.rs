//! An adaptive concurrency limit shared by two server processes (issue 45 §3): a backend
//! whose latency rises past a knee of concurrency; the shared limit converges near the knee
//! and holds it, and follows the knee up when the backend recovers. The figures are printed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use distlock_tower::concurrency::ConcurrencyLimitLayer;
use distlock_tower::extract::Constant;
use redis::AsyncCommands as _;

use crate::support::RedisServer;
use crate::support::child::{self, ChildProcess, listening};
use crate::support::fixture::connect;
use crate::support::server::resource_conn;

const ENTRY: &str = "adaptive::child_entry";
/// The backend's latency when it is not past its knee: long beside a loaded machine's
/// scheduling delays, so that only the knee (not a busy CPU) moves the 90th percentile past
/// the tolerance.
const BASE: Duration = Duration::from_millis(100);
/// How often each replica votes, and how often the shared limit may move.
const WINDOW: Duration = Duration::from_millis(300);

/// A server process: `/work` under an adaptive `ConcurrencyLimitLayer` (shared limit
/// `backend`), whose handler is the backend: `BASE` while at most `backend:knee` requests are
/// inside it across both processes, and `BASE` more for every request past the knee.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as a child process of the tests in this module"]
async fn child_entry() {
    let Some((role, url)) = child::role() else {
        return;
    };
    assert_eq!(role, "adaptive");
    let client = connect(&url).await;
    let conn = resource_conn(&url).await;
    let limit = client
        .adaptive_limit("backend")
        .initial(4)
        .bounds(1, 128)
        .window(WINDOW)
        .tolerance(2.0)
        .backoff(0.8)
        .step(1)
        .build()
        .expect("valid settings");
    let app = Router::new()
        .route(
            "/work",
            get(move || {
                let mut conn = conn.clone();
                async move {
                    let inside: i64 = conn.incr("backend:inside", 1).await.expect("incr");
                    let knee: i64 = conn.get("backend:knee").await.expect("knee");
                    let past = u32::try_from((inside - knee).max(0)).unwrap_or(0);
                    tokio::time::sleep(BASE * (1 + past)).await;
                    let _: i64 = conn.decr("backend:inside", 1).await.expect("decr");
                    "done"
                }
            }),
        )
        .layer(
            ConcurrencyLimitLayer::builder(client, Constant::from_static("backend"), 4)
                .adaptive(limit)
                .build()
                .expect("valid settings"),
        );
    child::serve_and_say(app).await;
}

/// The shared limit now.
async fn shared_limit(conn: &mut redis::aio::MultiplexedConnection) -> Option<u32> {
    conn.hget("distlock:adaptive:{backend}", "l")
        .await
        .expect("HGET")
}

/// How long the limit must stay within its band before a phase ends: 10 windows.
const HELD: Duration = Duration::from_secs(3);
/// The shortest phase, so that the mean shows where the limit went, not where it started.
const MIN_PHASE: Duration = Duration::from_secs(10);
/// The longest: a limit that has not settled by then has failed. Not a speed claim (the
/// limit moves one step per window at most, and a loaded machine's votes come late); only
/// the bound of a wait.
const MAX_PHASE: Duration = Duration::from_secs(40);

/// The limit's samples (every 100 ms) while the backend's knee is `knee`: at least
/// `MIN_PHASE`, then until the limit has stayed within `[low, high]` for `HELD` (or
/// `MAX_PHASE` has passed).
async fn watch(
    conn: &mut redis::aio::MultiplexedConnection,
    knee: i64,
    (low, high): (u32, u32),
) -> Vec<(Duration, u32)> {
    let () = conn.set("backend:knee", knee).await.expect("SET");
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut inside_since = None;
    while started.elapsed() < MAX_PHASE {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Some(limit) = shared_limit(conn).await else {
            continue;
        };
        let at = started.elapsed();
        samples.push((at, limit));
        if (low..=high).contains(&limit) {
            let since = *inside_since.get_or_insert(at);
            if at >= MIN_PHASE && at - since >= HELD {
                break;
            }
        } else {
            inside_since = None;
        }
    }
    samples
}

/// When the limit first came within `[low, high]` and stayed there to the end of `samples`,
/// and the mean, least and greatest limit from then on.
fn settled(samples: &[(Duration, u32)], low: u32, high: u32) -> Option<(Duration, f64, u32, u32)> {
    let last_out = samples
        .iter()
        .rposition(|&(_, l)| !(low..=high).contains(&l));
    let from = last_out.map_or(0, |i| i + 1);
    let held = &samples[from..];
    if held.len() < 10 {
        return None;
    }
    #[expect(clippy::cast_precision_loss, reason = "a mean of small numbers")]
    let mean = held.iter().map(|&(_, l)| f64::from(l)).sum::<f64>() / held.len() as f64;
    let least = held.iter().map(|&(_, l)| l).min()?;
    let most = held.iter().map(|&(_, l)| l).max()?;
    Some((held[0].0, mean, least, most))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_converge_near_the_knee_and_follow_it_up() {
    let redis = RedisServer::start();
    let mut conn = redis.conn().await;
    let () = conn.set("backend:knee", 8).await.expect("SET");
    let (_children, ports): (Vec<ChildProcess>, Vec<u16>) = (0..2)
        .map(|_| listening(ENTRY, "adaptive", &redis.url()))
        .unzip();

    // 48 callers, more than either knee: the limit is always binding.
    let stop = Arc::new(AtomicBool::new(false));
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(64)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let callers: Vec<_> = (0..48)
        .map(|i| {
            let (http, stop) = (http.clone(), Arc::clone(&stop));
            let url = format!("http://127.0.0.1:{}/work", ports[i % 2]);
            tokio::spawn(async move {
                let mut served = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    match http.get(&url).send().await {
                        Ok(r) if r.status().is_success() => served += 1,
                        // Refused at capacity: come back shortly.
                        _ => tokio::time::sleep(Duration::from_millis(10)).await,
                    }
                }
                served
            })
        })
        .collect();

    // Knee at 8: from 4 up, one step (1) per window at most.
    let first = watch(&mut conn, 8, (4, 16)).await;
    // The backend recovers: knee at 24.
    let second = watch(&mut conn, 24, (12, 48)).await;
    stop.store(true, Ordering::Relaxed);
    let mut served = 0;
    for caller in callers {
        served += caller.await.expect("caller");
    }
    let series = |s: &[(Duration, u32)]| {
        s.iter()
            .map(|(_, l)| l.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    eprintln!("knee 8:  {}", series(&first));
    eprintln!("knee 24: {}", series(&second));

    // Near the knee: within half and twice of it, held for the rest of the phase.
    let (at, mean, least, most) = settled(&first, 4, 16)
        .unwrap_or_else(|| panic!("never settled near a knee of 8: {}", series(&first)));
    eprintln!(
        "knee 8: within 4..=16 from {at:?} on (mean {mean:.1}, {least}..={most}), {served} requests served in all"
    );
    // It settled and held the band for HELD (10 windows) before the phase's bound.
    let end = first.last().map_or(Duration::ZERO, |&(at, _)| at);
    assert!(end - at >= HELD, "held 4..=16 only from {at:?} to {end:?}");
    assert!((5.0..=14.0).contains(&mean), "mean {mean} for a knee of 8");
    let (at, mean, least, most) = settled(&second, 12, 48)
        .unwrap_or_else(|| panic!("never followed the knee up to 24: {}", series(&second)));
    eprintln!("knee 24: within 12..=48 from {at:?} on (mean {mean:.1}, {least}..={most})");
    let end = second.last().map_or(Duration::ZERO, |&(at, _)| at);
    assert!(end - at >= HELD, "held 12..=48 only from {at:?} to {end:?}");
    assert!(
        (15.0..=40.0).contains(&mean),
        "mean {mean} for a knee of 24"
    );
}
