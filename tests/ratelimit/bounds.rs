//! TESTPLAN 41 for rate limits and clients: every public `Duration` and count at 0, 1, its
//! documented bounds and `MAX` is a typed error or a defined meaning, never a panic.

use std::time::Duration;

use distlock::ratelimit::{Algorithm, Policy, Rate, RateLimiter};
use distlock::{Client, InvalidPolicy, RateLimitError, StoreError};

use crate::support::RedisServer;
use crate::support::fixture::{Fixture, on_both_stores};

on_both_stores!(limiter_settings_at_their_bounds);

const ONE_NS: Duration = Duration::from_nanos(1);

/// Durations worth trying for any parameter.
fn durations() -> Vec<Duration> {
    vec![
        Duration::ZERO,
        ONE_NS,
        Duration::from_micros(1),
        Duration::from_millis(1) - ONE_NS,
        Duration::from_millis(1),
        Duration::from_secs(1),
        Duration::from_secs(366 * 24 * 3600),
        Duration::from_secs(366 * 24 * 3600) + ONE_NS,
        Duration::from_secs(u64::MAX),
        Duration::MAX,
    ]
}

const COUNTS: [u32; 6] = [0, 1, 2, 10_000, 10_001, u32::MAX];

/// Every rate and policy constructor over every count and period: built or refused with a
/// typed error; a built policy's limit and window are what it was given.
#[test]
fn rates_and_policies_over_every_boundary() {
    let algorithms = [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ];
    let max_period = Duration::from_secs(366 * 24 * 3600);
    let valid = |count: u32, period: Duration| {
        count > 0
            && (Duration::from_millis(1)..=max_period).contains(&period)
            && u128::from(count) <= period.as_micros()
    };
    for count in COUNTS {
        for period in durations() {
            let built = Rate::per(count, period);
            assert_eq!(
                built.is_ok(),
                valid(count, period),
                "Rate::per({count}, {period:?}): {built:?}"
            );
            let Ok(rate) = built else {
                continue;
            };
            for burst in COUNTS {
                match rate.burst(burst) {
                    Ok(r) => assert_eq!(r.capacity(), burst),
                    Err(InvalidPolicy::Zero { .. }) => assert_eq!(burst, 0),
                    Err(InvalidPolicy::BurstTooLong { .. }) => assert!(burst > count),
                    Err(other) => panic!("burst {burst}: {other:?}"),
                }
            }
            for algorithm in algorithms {
                match Policy::new("p", algorithm, rate) {
                    Ok(policy) => assert_eq!(policy.limit(), count),
                    Err(InvalidPolicy::LogTooLarge { limit, .. }) => {
                        assert_eq!(algorithm, Algorithm::SlidingLog);
                        assert_eq!(limit, count);
                    }
                    Err(other) => panic!("{algorithm:?} {count}/{period:?}: {other:?}"),
                }
            }
        }
        let periods = [1, 60, 3600, 24 * 3600].map(Duration::from_secs);
        let shorthands = [
            Rate::per_second,
            Rate::per_minute,
            Rate::per_hour,
            Rate::per_day,
        ];
        for (per, period) in shorthands.into_iter().zip(periods) {
            assert_eq!(
                per(count).is_ok(),
                valid(count, period),
                "{count} per {period:?}"
            );
        }
    }
}

/// A limiter's deadline, deny cache, in-flight limit and costs over their boundaries.
async fn limiter_settings_at_their_bounds(fx: Fixture) {
    // Ten per hour: no unit comes back while the checks below run, however slow the machine
    // (at ten per second, a loaded run refilled one before the thirteenth check).
    let policy = Policy::gcra("bounds", Rate::per_hour(10).expect("rate")).expect("policy");
    for deadline in durations() {
        // Zero is refused, by name; MAX means the client's own response timeout bounds it.
        let built = fx
            .client
            .rate_limiter(policy.clone())
            .deadline(deadline)
            .build();
        if deadline.is_zero() {
            assert_refused(built, "deadline");
            continue;
        }
        let limiter = built.expect("valid limiter");
        match limiter.check("deadline").await {
            Ok(_) => {}
            // A deadline of a millisecond or so may pass on a busy machine: a typed answer.
            Err(RateLimitError::Store(StoreError::Timeout { .. }))
                if deadline < Duration::from_millis(100) => {}
            Err(err) => panic!("deadline {deadline:?}: {err}"),
        }
    }
    for size in [0, 1, 2, usize::MAX] {
        let limiter = fx
            .client
            .rate_limiter(policy.clone())
            .deny_cache(size)
            .build()
            .expect("valid limiter");
        for _ in 0..12 {
            limiter
                .check(&format!("cache-{size}"))
                .await
                .expect("check");
        }
        assert!(
            !limiter
                .check(&format!("cache-{size}"))
                .await
                .expect("check")
                .allowed
        );
    }
    assert_refused(
        fx.client
            .rate_limiter(policy.clone())
            .max_in_flight(0)
            .build(),
        "max_in_flight",
    );
    for checks in [1, usize::MAX / 8, usize::MAX] {
        let limiter = fx
            .client
            .rate_limiter(policy.clone())
            .max_in_flight(checks)
            .build()
            .expect("valid limiter");
        limiter
            .check("in-flight")
            .await
            .expect("at least one check may wait");
    }
    let limiter = fx
        .client
        .rate_limiter(policy)
        .build()
        .expect("valid limiter");
    assert!(limiter.check_n("cost", 0).await.expect("peek").allowed);
    assert!(
        limiter
            .check_n("cost", 10)
            .await
            .expect("at the limit")
            .allowed
    );
    for cost in [11, u32::MAX] {
        match limiter.check_n("cost", cost).await {
            Err(RateLimitError::CostTooLarge { capacity: 10, .. }) => {}
            other => panic!("cost {cost}: {other:?}"),
        }
    }
}

/// Client settings: zero timeouts and bad prefixes are `Config` errors where the client is
/// built (in memory too, with `try_in_memory`); `MAX` timeouts and retry counts work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_settings_at_their_bounds() {
    for prefix in ["", "a b", "a{b", "}", "\u{7}"] {
        let err = Client::builder().prefix(prefix).try_in_memory();
        assert!(
            matches!(err, Err(StoreError::Config { .. })),
            "prefix {prefix:?}"
        );
    }
    let server = RedisServer::start();
    for timeout in [Duration::ZERO] {
        let response = Client::builder()
            .response_timeout(timeout)
            .connect(&server.url())
            .await;
        assert!(
            matches!(response, Err(StoreError::Config { .. })),
            "{response:?}"
        );
        let connect = Client::builder()
            .connect_timeout(timeout)
            .connect(&server.url())
            .await;
        assert!(
            matches!(connect, Err(StoreError::Config { .. })),
            "{connect:?}"
        );
        let memory = Client::builder().response_timeout(timeout).try_in_memory();
        assert!(matches!(memory, Err(StoreError::Config { .. })));
    }
    for timeout in [
        ONE_NS,
        Duration::from_millis(1),
        Duration::from_secs(u64::MAX),
        Duration::MAX,
    ] {
        // Tiny timeouts may time out; they must not panic. MAX ones must work.
        for builder in [
            Client::builder().response_timeout(timeout),
            Client::builder().connect_timeout(timeout),
        ] {
            match builder.connect(&server.url()).await {
                Ok(client) => {
                    // A lock of its own: a lease taken under a tiny timeout may outlive it.
                    let lease = client
                        .lock(format!("client-bounds-{timeout:?}"))
                        .acquire()
                        .await;
                    if timeout >= Duration::from_secs(1) {
                        lease.expect("acquire").release().await.expect("release");
                    }
                }
                Err(StoreError::Timeout { .. }) if timeout < Duration::from_secs(1) => {}
                Err(err) => panic!("timeout {timeout:?}: {err}"),
            }
        }
    }
    for retries in [0, 1, usize::MAX] {
        let client = Client::builder()
            .reconnect_retries(retries)
            .connect(&server.url())
            .await
            .expect("connect");
        let lease = client.lock("retries").acquire().await.expect("acquire");
        lease.release().await.expect("release");
    }
}

/// `built` was refused for the option `field`, by `LimiterOptions::check`.
fn assert_refused(built: Result<RateLimiter, RateLimitError>, field: &str) {
    match built {
        Err(RateLimitError::InvalidPolicy(InvalidPolicy::LimiterOption(invalid))) => {
            assert_eq!(invalid.field(), field, "{invalid}");
        }
        other => panic!("{field}: expected a refusal, got {other:?}"),
    }
}
