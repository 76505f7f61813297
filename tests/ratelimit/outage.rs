//! TESTPLAN 22: the store down (killed) or slow (a delaying or blackholing proxy). Every
//! check answers within its deadline under each outage policy; fail-open lets requests
//! through and the store counts again once back; the local fallback enforces the policy
//! per process; the limiter is back on the store within 1 s of a restart; and a slow store
//! never builds a queue beyond the in-flight limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock::ratelimit::{Algorithm, Origin, Outage, RateLimiter, RateLimiterBuilder};
use distlock::{Client, RateLimitError, StoreError};
use tokio::time::Instant;

use crate::common::{brief, policy};
use crate::support::lateness::{LatenessProbe, Mark};
use crate::support::server::short_client;
use crate::support::{Proxy, RedisServer};

/// Allowed on top of a deadline for the work around it (spawning the check, building the
/// answer), besides how late the runtime ran its timers meanwhile ([`within_deadline`]).
const SLACK: Duration = Duration::from_millis(100);
const DEADLINE: Duration = Duration::from_millis(150);

/// Whether an answer that took `took` came within the deadline: a check's deadline is a
/// timer, kept to within how late this runtime ran its timers since `mark` (nothing on a quiet
/// machine, hundreds of milliseconds on a starved one: the README's limits).
fn within_deadline(took: Duration, probe: &LatenessProbe, mark: Mark) -> bool {
    took <= DEADLINE + SLACK + probe.since(mark)
}

fn limiter(client: &Client, outage: Outage) -> RateLimiter {
    limiter_builder(client, outage)
        .build()
        .expect("valid limiter")
}

fn limiter_builder(client: &Client, outage: Outage) -> RateLimiterBuilder {
    client
        .rate_limiter(policy(Algorithm::Gcra, 3, Duration::from_secs(10)))
        .on_outage(outage)
        .deadline(DEADLINE)
}

/// Runs `n` checks at once; returns each one's result and how long it took.
async fn concurrent_checks(
    limiter: &RateLimiter,
    n: usize,
) -> Vec<(
    Result<distlock::ratelimit::Decision, RateLimitError>,
    Duration,
)> {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let start = Instant::now();
                let result = limiter.check(&format!("subject:{}", i % 7)).await;
                (result, start.elapsed())
            })
        })
        .collect();
    let mut out = Vec::with_capacity(n);
    for task in tasks {
        out.push(task.await.expect("check task"));
    }
    out
}

/// Runs 20 checks at once on `limiter` while the store is `what` (slow, killed...): `judge`
/// asserts on each answer, then each must have come within the deadline.
async fn checks_in_time(
    limiter: &RateLimiter,
    probe: &LatenessProbe,
    what: &str,
    judge: impl Fn(Result<distlock::ratelimit::Decision, RateLimitError>),
) {
    let mark = probe.mark();
    for (result, took) in concurrent_checks(limiter, 20).await {
        judge(result);
        assert!(
            within_deadline(took, probe, mark),
            "{what}: answered after {took:?} (timers {:?} late meanwhile)",
            probe.since(mark)
        );
    }
}

/// A first check, while the store is up: the store answers it.
async fn answered_by_the_store(limiter: &RateLimiter) {
    assert_eq!(
        limiter.check("warm").await.expect("check").origin,
        Origin::Store
    );
}

fn is_unavailable(err: &RateLimitError) -> bool {
    matches!(
        err,
        RateLimitError::Store(StoreError::Timeout { .. } | StoreError::Unreachable { .. })
            | RateLimitError::CircuitOpen { .. }
    )
}

/// Slow (every byte delayed 1 s), blackholed, then killed: every fail-closed check errs
/// within the deadline, with a store error that says the store is unavailable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_closed_answers_within_the_deadline() {
    let mut server = RedisServer::start();
    let proxy = Proxy::start(server.addr()).await;
    let client = short_client(&proxy.url()).await;
    let limiter = limiter(&client, Outage::FailClosed);
    assert!(limiter.check("warm").await.expect("warm-up").allowed);
    let probe = LatenessProbe::start();

    for fault in ["slow", "blackhole"] {
        match fault {
            "slow" => proxy.delay(Duration::from_secs(1)),
            _ => proxy.blackhole(),
        }
        checks_in_time(&limiter, &probe, fault, |result| {
            match result {
                Err(RateLimitError::Store(StoreError::Timeout { after })) => {
                    assert_eq!(after, DEADLINE, "{fault}");
                }
                // After a few timeouts the circuit breaker answers at once.
                Err(RateLimitError::CircuitOpen { .. }) => {}
                other => panic!("{fault}: expected Store(Timeout), got {other:?}"),
            }
        })
        .await;
    }

    proxy.pass();
    server.kill();
    checks_in_time(&limiter, &probe, "killed", |result| {
        let err = result.expect_err("fail closed with the server killed");
        assert!(is_unavailable(&err), "killed: {err:?}");
    })
    .await;
}

/// Fail-open: with the store slow or killed, checks pass at once (origin `FailOpen`);
/// after the restart the store counts again from its (empty) state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_passes_then_the_store_counts_again() {
    let mut server = RedisServer::start();
    let proxy = Proxy::start(server.addr()).await;
    let client = short_client(&proxy.url()).await;
    let limiter = limiter(&client, Outage::FailOpen);
    answered_by_the_store(&limiter).await;
    let probe = LatenessProbe::start();

    for fault in ["slow", "killed"] {
        match fault {
            "slow" => proxy.delay(Duration::from_secs(1)),
            _ => {
                proxy.pass();
                server.kill();
            }
        }
        checks_in_time(&limiter, &probe, fault, |result| {
            let d = result.expect("fail open never errs");
            assert!(
                d.allowed && d.origin == Origin::FailOpen,
                "{fault}: {}",
                brief(&d)
            );
        })
        .await;
    }

    server.restart();
    let back = Instant::now();
    loop {
        let d = limiter.check("counted").await.expect("check");
        if d.origin == Origin::Store {
            assert_eq!(d.remaining, 2, "the store counts from its fresh state");
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(5),
            "never back on the store"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let d = limiter.check("counted").await.expect("check");
    assert_eq!((d.origin, d.remaining), (Origin::Store, 1));
    limiter.check("counted").await.expect("check");
    let d = limiter.check("counted").await.expect("check");
    assert!(!d.allowed && d.origin == Origin::Store, "{}", brief(&d));
}

/// The local fallback enforces the same policy in memory while the store is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_fallback_enforces_the_policy_per_process() {
    let mut server = RedisServer::start();
    let client = short_client(&server.url()).await;
    let limiter = limiter(&client, Outage::LocalFallback);
    answered_by_the_store(&limiter).await;
    server.kill();
    let probe = LatenessProbe::start();
    let mut seen = Vec::new();
    for _ in 0..5 {
        let mark = probe.mark();
        let start = Instant::now();
        let d = limiter
            .check("fallback")
            .await
            .expect("the fallback never errs");
        assert!(
            within_deadline(start.elapsed(), &probe, mark),
            "answered after {:?} (timers {:?} late meanwhile)",
            start.elapsed(),
            probe.since(mark)
        );
        assert_eq!(d.origin, Origin::LocalFallback, "{}", brief(&d));
        seen.push(d.allowed);
    }
    assert_eq!(seen, [true, true, true, false, false]);
}

/// Killed, then restarted: the limiter is back on the store within 1 s of the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_on_the_store_within_a_second_of_a_restart() {
    let mut server = RedisServer::start();
    let client = short_client(&server.url()).await;
    let limiter = limiter_builder(&client, Outage::FailOpen)
        .deny_cache(0)
        .build()
        .expect("valid limiter");
    answered_by_the_store(&limiter).await;
    server.kill();
    // Fail for a while, so the client is deep in its reconnect attempts.
    let down = Instant::now();
    while down.elapsed() < Duration::from_millis(1500) {
        let d = limiter.check("down").await.expect("fail open");
        assert_eq!(d.origin, Origin::FailOpen);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let probe = LatenessProbe::start();
    server.restart();
    let mark = probe.mark();
    let restarted = Instant::now();
    loop {
        let d = limiter.check("up").await.expect("fail open");
        if d.origin == Origin::Store {
            break;
        }
        // The reconnect is paced by timers: within 1 s, plus how late they ran.
        assert!(
            restarted.elapsed() <= Duration::from_secs(1) + probe.since(mark),
            "still failing open {:?} after the restart (timers {:?} late meanwhile)",
            restarted.elapsed(),
            probe.since(mark)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "back on the store {:?} after the restart",
        restarted.elapsed()
    );
}

/// A slow store (every byte delayed 500 ms, deadline 100 ms) and 500 simultaneous checks:
/// at most `max_in_flight` wait on the store, the rest are refused at once as overloaded,
/// every check answers within the deadline, and nothing is left waiting afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_store_never_builds_a_queue() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr()).await;
    let client = short_client(&proxy.url()).await;
    let deadline = Duration::from_millis(100);
    let limiter = client
        .rate_limiter(policy(Algorithm::Gcra, 1000, Duration::from_secs(1)))
        .deadline(deadline)
        .max_in_flight(32)
        .build()
        .expect("valid limiter");
    assert!(limiter.check("warm").await.expect("warm-up").allowed);
    proxy.delay(Duration::from_millis(500));

    let peak = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let limiter = limiter.clone();
        let peak = Arc::clone(&peak);
        tokio::spawn(async move {
            for _ in 0..100 {
                peak.fetch_max(limiter.__in_flight(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let results = concurrent_checks(&limiter, 500).await;
    sampler.await.expect("sampler");
    let mut overloaded = 0;
    for (result, took) in &results {
        match result {
            Err(RateLimitError::Overloaded { in_flight: 32 }) => overloaded += 1,
            Err(RateLimitError::Store(StoreError::Timeout { .. })) => {}
            other => panic!("expected Overloaded or Timeout, got {other:?}"),
        }
        assert!(*took <= deadline + SLACK, "answered after {took:?}");
    }
    assert!(
        overloaded >= 500 - 32 * 3,
        "only {overloaded} refused at once"
    );
    assert!(
        peak.load(Ordering::Relaxed) <= 32,
        "peak {}",
        peak.load(Ordering::Relaxed)
    );
    assert_eq!(limiter.__in_flight(), 0, "checks left waiting");
}

/// Issue 29 §2: an outage is logged when it starts and when it ends, with the count of the
/// operations the outage policy answered, never a line per refused request.
#[tokio::test(flavor = "current_thread")]
async fn an_outage_is_logged_once_when_it_starts_and_once_when_it_ends() {
    // Current-thread: the capture sees every task of the test.
    let capture = crate::traces::Capture::start(tracing::Level::INFO);
    let mut server = RedisServer::start();
    let client = short_client(&server.url()).await;
    let limiter = limiter_builder(&client, Outage::FailOpen)
        // The breaker would answer most of them without asking: count them all the same.
        .circuit_breaker(None)
        .build()
        .expect("valid limiter");
    answered_by_the_store(&limiter).await;
    server.kill();
    const REFUSED: usize = 25;
    for _ in 0..REFUSED {
        let d = limiter.check("down").await.expect("fail open never errs");
        assert_eq!(d.origin, Origin::FailOpen, "{}", brief(&d));
    }
    server.restart();
    let back = Instant::now();
    let mut unanswered = REFUSED;
    while limiter.check("up").await.expect("check").origin != Origin::Store {
        unanswered += 1;
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "never back on the store"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = capture.text();
    let started: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("rate-limit store unavailable"))
        .collect();
    let ended: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("rate-limit store is back"))
        .collect();
    assert_eq!(started.len(), 1, "one line when it starts:\n{text}");
    assert!(started[0].contains("WARN"), "{}", started[0]);
    assert_eq!(ended.len(), 1, "one line when it ends:\n{text}");
    assert!(
        ended[0].contains(&format!("unanswered={unanswered}")),
        "the end says how many the outage policy answered ({unanswered}): {}",
        ended[0]
    );
    assert!(
        !text.contains("still unavailable"),
        "no summary within a minute:\n{text}"
    );
}
