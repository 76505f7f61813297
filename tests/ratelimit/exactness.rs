//! TESTPLAN 19: exactness. A limit of 100 per 10 s lets exactly 100 of 150 simultaneous
//! requests through; bursts around a window boundary stay within each algorithm's
//! documented bound (measured with injected time, printed as a table); clients agree
//! because the store's clock decides.

use std::sync::Arc;
use std::time::Duration;

use distlock::ratelimit::{Algorithm, RateLimiter};
use tokio::sync::Barrier;
use tokio::time::Instant;

use crate::common::{ALGORITHMS, EPOCH_US, policy};
use crate::support::RedisServer;
use crate::support::fixture::{Fixture, connect, on_both_stores};

on_both_stores!(
    exactly_100_of_150_at_one_instant,
    exactly_100_of_150_in_real_time,
    boundary_bursts_stay_within_the_documented_bound,
);

const LIMIT: u32 = 100;
const PERIOD: Duration = Duration::from_secs(10);
const TASKS: usize = 150;

/// `algorithm`'s limiter of `LIMIT` per `PERIOD` (burst = `LIMIT`).
fn limiter(fx: &Fixture, algorithm: Algorithm) -> RateLimiter {
    fx.client
        .rate_limiter(policy(algorithm, LIMIT, PERIOD))
        .build()
        .expect("valid limiter")
}

/// Fires `TASKS` checks at once from as many tasks; `at` injects one instant for all.
async fn fire(limiter: &RateLimiter, subject: &str, at: Option<u64>) -> usize {
    let barrier = Arc::new(Barrier::new(TASKS));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let limiter = limiter.clone();
            let barrier = Arc::clone(&barrier);
            let subject = subject.to_owned();
            tokio::spawn(async move {
                barrier.wait().await;
                let d = match at {
                    Some(at) => limiter.__check_at(&subject, 1, at).await,
                    None => limiter.check(&subject).await,
                };
                d.expect("check").allowed
            })
        })
        .collect();
    let mut allowed = 0;
    for task in tasks {
        allowed += usize::from(task.await.expect("task"));
    }
    allowed
}

async fn exactly_100_of_150_at_one_instant(fx: Fixture) {
    for algorithm in ALGORITHMS {
        let limiter = limiter(&fx, algorithm);
        let allowed = fire(&limiter, "instant", Some(EPOCH_US + 123_456)).await;
        assert_eq!(allowed, 100, "{algorithm}");
    }
}

/// In real time the 150 checks take a few milliseconds, during which GCRA, the token bucket
/// and the sliding window counter may earn back a request (one per 100 ms), and a fixed
/// window may roll over: each count must lie between 100 and the bound for the time taken.
async fn exactly_100_of_150_in_real_time(fx: Fixture) {
    for algorithm in ALGORITHMS {
        let limiter = limiter(&fx, algorithm);
        let start = Instant::now();
        let allowed = fire(&limiter, "real-time", None).await;
        let span = start.elapsed();
        let bound = documented_bound(algorithm, span);
        assert!(
            (100..=bound).contains(&allowed),
            "{algorithm}: {allowed} allowed in {span:?}, bound {bound}"
        );
        if span < Duration::from_millis(100) && algorithm != Algorithm::FixedWindow {
            assert_eq!(allowed, 100, "{algorithm} in {span:?}");
        }
    }
}

/// The most a span of length `d < PERIOD` may let through (see `Algorithm`'s docs), for
/// `LIMIT` per `PERIOD` with burst = `LIMIT`.
fn documented_bound(algorithm: Algorithm, d: Duration) -> usize {
    let limit = LIMIT as usize;
    let d_us = d.as_micros();
    let period_us = PERIOD.as_micros();
    let interval_us = period_us / u128::from(LIMIT);
    let extra = match algorithm {
        Algorithm::Gcra | Algorithm::TokenBucket => d_us / interval_us,
        Algorithm::FixedWindow => u128::from(LIMIT),
        Algorithm::SlidingWindow => u128::from(LIMIT) * d_us / period_us,
        _ => 0,
    };
    limit + usize::try_from(extra).expect("fits")
}

/// Greedy attacker across a window boundary: from one microsecond before it, for a span
/// `d`, it fires until denied at the span's start, at every emission interval inside it,
/// and at its end. The total must not exceed the documented bound, and reaches it where
/// the bound is tight for this attack.
async fn boundary_bursts_stay_within_the_documented_bound(fx: Fixture) {
    let period_us = u64::try_from(PERIOD.as_micros()).expect("fits");
    let step = period_us / u64::from(LIMIT);
    let boundary = EPOCH_US / period_us * period_us + 7 * period_us;
    let spans = [
        Duration::from_micros(2),
        Duration::from_millis(1),
        Duration::from_millis(100),
        Duration::from_secs(1),
        Duration::from_secs(5),
        PERIOD - Duration::from_micros(1),
    ];
    for algorithm in ALGORITHMS {
        let limiter = limiter(&fx, algorithm);
        for (n, span) in spans.into_iter().enumerate() {
            let subject = format!("boundary:{n}");
            let start = boundary - 1;
            let end = start + u64::try_from(span.as_micros()).expect("fits");
            let mut instants: Vec<u64> = (start..end)
                .step_by(usize::try_from(step).expect("fits"))
                .collect();
            instants.push(end);
            let mut allowed = 0;
            for at in instants {
                while limiter
                    .__check_at(&subject, 1, at)
                    .await
                    .expect("check")
                    .allowed
                {
                    allowed += 1;
                    assert!(allowed <= 2 * LIMIT as usize, "{algorithm}: runaway");
                }
            }
            let bound = documented_bound(algorithm, span);
            eprintln!(
                "boundary burst {:<14} span {span:>10?}: documented <= {bound:>3}, measured {allowed:>3}",
                algorithm.name()
            );
            assert!(
                allowed <= bound,
                "{algorithm} span {span:?}: {allowed} > {bound}"
            );
            match algorithm {
                Algorithm::SlidingWindow => assert!(allowed >= 100, "{algorithm}"),
                _ => assert_eq!(
                    allowed, bound,
                    "{algorithm} span {span:?}: bound not reached"
                ),
            }
        }
    }
}

/// Two clients on their own connections interleave checks on one subject: between them
/// they get exactly the answers one client gets alone, because every decision is made on
/// the server's clock (neither client's clock is ever read for a decision).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_get_the_answers_of_one() {
    let server = RedisServer::start();
    let a = connect(&server.url()).await;
    let b = connect(&server.url()).await;
    for algorithm in ALGORITHMS {
        let p = policy(algorithm, 5, Duration::from_secs(20));
        let alone = a
            .rate_limiter(p.clone())
            .deny_cache(0)
            .build()
            .expect("valid limiter");
        let on_a = a
            .rate_limiter(p.clone())
            .deny_cache(0)
            .build()
            .expect("valid limiter");
        let on_b = b
            .rate_limiter(p)
            .deny_cache(0)
            .build()
            .expect("valid limiter");
        let mut single = Vec::new();
        let mut shared = Vec::new();
        for i in 0..8 {
            let d = alone.check("alone").await.expect("check");
            single.push((d.allowed, d.remaining));
            let limiter = if i % 2 == 0 { &on_a } else { &on_b };
            let d = limiter.check("shared").await.expect("check");
            shared.push((d.allowed, d.remaining));
        }
        assert_eq!(shared, single, "{algorithm}");
        assert_eq!(
            shared.iter().filter(|(ok, _)| *ok).count(),
            5,
            "{algorithm}"
        );
    }
}
