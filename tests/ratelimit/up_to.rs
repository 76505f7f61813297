//! `check_up_to(subject, n)`, the partial grant (issue 28 §3), on both stores and a Cluster:
//! it takes the largest `k ≤ n` that fits now under every policy, atomically, and says how
//! many. (The model check and the stores' differential run it on random traces too.)

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use distlock::RateLimitError;
use distlock::ratelimit::{__TestOp as Op, Algorithm, Policy, Rate, RateLimiter};

use crate::common::{ALGORITHMS, EPOCH_US, brief, policy};
use crate::support::fixture::{Fixture, on_both_stores, shared_cluster_client};

on_both_stores!(
    up_to_grants_what_fits_on_every_algorithm,
    up_to_takes_the_least_of_several_policies,
    concurrent_partial_grants_add_up_to_the_limit,
    up_to_refuses_zero_units_and_shadow_mode_grants_all,
);

/// 10 per minute on every algorithm, at one injected instant: 4 of 4, then 6 of 9 (all that
/// is left), then 0 of 3 (a denial with the wait for one unit), and `u32::MAX` on a fresh
/// subject takes the limit.
async fn up_to_grants_what_fits_on_every_algorithm(fx: Fixture) {
    for algorithm in ALGORITHMS {
        let limiter = fx
            .client
            .rate_limiter(policy(algorithm, 10, Duration::from_secs(60)))
            .deny_cache(0)
            .build()
            .expect("valid limiter");
        let up_to = async |subject: &str, n: u32| {
            let (d, applied, _) = limiter
                .__operate_at(subject, Op::CheckUpTo(n), EPOCH_US)
                .await
                .expect("check up to");
            assert_eq!(applied, d.granted > 0, "{algorithm:?}: {}", brief(&d));
            d
        };
        let d = up_to("s", 4).await;
        assert_eq!(
            (d.allowed, d.granted, d.remaining),
            (true, 4, 6),
            "{algorithm:?}: {}",
            brief(&d)
        );
        let d = up_to("s", 9).await;
        assert_eq!(
            (d.allowed, d.granted, d.remaining),
            (true, 6, 0),
            "{algorithm:?}: {}",
            brief(&d)
        );
        let d = up_to("s", 3).await;
        assert_eq!(
            (d.allowed, d.granted, d.remaining),
            (false, 0, 0),
            "{algorithm:?}: {}",
            brief(&d)
        );
        assert!(
            d.retry_after > Duration::ZERO,
            "{algorithm:?}: {}",
            brief(&d)
        );
        let d = up_to("fresh", u32::MAX).await;
        assert_eq!(
            (d.allowed, d.granted, d.remaining),
            (true, 10, 0),
            "{algorithm:?}: {}",
            brief(&d)
        );
    }
}

/// A burst of 10 and a window of 3: 3 of 5 fit, and both policies consume those 3.
async fn up_to_takes_the_least_of_several_policies(fx: Fixture) {
    let limiter = fx
        .client
        .rate_limiter_all([
            Policy::gcra("burst", Rate::per_minute(10).expect("rate")).expect("policy"),
            Policy::fixed_window("window", Rate::per_minute(3).expect("rate")).expect("policy"),
        ])
        .deny_cache(0)
        .build()
        .expect("valid limiter");
    let (d, _, _) = limiter
        .__operate_at("s", Op::CheckUpTo(5), EPOCH_US)
        .await
        .expect("check up to");
    assert_eq!((d.allowed, d.granted), (true, 3), "{}", brief(&d));
    let left: Vec<u64> = d.policies.iter().map(|p| p.remaining).collect();
    assert_eq!(left, [7, 0], "{}", brief(&d));
}

/// 20 callers at once each take up to 7 under 100 per minute (sliding log) and 100 per hour
/// (GCRA, burst 100): the grants add up to exactly 100, and none exceeds 7.
async fn concurrent_partial_grants_add_up_to_the_limit(fx: Fixture) {
    for algorithm in [Algorithm::SlidingLog, Algorithm::Gcra] {
        let period = if algorithm == Algorithm::Gcra {
            Duration::from_secs(3600)
        } else {
            Duration::from_secs(60)
        };
        let limiter = fx
            .client
            .rate_limiter(policy(algorithm, 100, period))
            .build()
            .expect("valid limiter");
        let total = grant_concurrently(&limiter, "batch", 20, 7).await;
        assert_eq!(total, 100, "{algorithm:?}");
    }
}

/// `callers` tasks at once, each `check_up_to(subject, n)`: the sum of their grants.
async fn grant_concurrently(limiter: &RateLimiter, subject: &str, callers: usize, n: u32) -> u64 {
    let total = Arc::new(AtomicU64::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(callers));
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (limiter, total, start) = (limiter.clone(), total.clone(), start.clone());
            let subject = subject.to_owned();
            tokio::spawn(async move {
                start.wait().await;
                let d = limiter.check_up_to(&subject, n).await.expect("check up to");
                assert!(d.granted <= n, "{}", brief(&d));
                assert_eq!(d.allowed, d.granted > 0, "{}", brief(&d));
                total.fetch_add(u64::from(d.granted), Ordering::SeqCst);
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    total.load(Ordering::SeqCst)
}

async fn up_to_refuses_zero_units_and_shadow_mode_grants_all(fx: Fixture) {
    let gcra = || Policy::gcra("g", Rate::per_hour(5).expect("rate")).expect("policy");
    let limiter = fx.client.rate_limiter(gcra()).build().expect("limiter");
    assert!(matches!(
        limiter.check_up_to("s", 0).await,
        Err(RateLimitError::NoUnits)
    ));
    let shadow = fx
        .client
        .rate_limiter(gcra())
        .shadow(true)
        .build()
        .expect("limiter");
    let d = shadow
        .check_up_to("shadowed", 8)
        .await
        .expect("check up to");
    assert_eq!(
        (d.allowed, d.granted, d.shadowed, d.remaining),
        (true, 8, true, 0),
        "the store granted 5, shadow mode lets all 8 go: {}",
        brief(&d)
    );
}

/// On a Cluster: grants on subjects in different slots each add up to the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_grants_are_exact_on_a_cluster() {
    let client = shared_cluster_client("upto").await;
    let limiter = client
        .rate_limiter_all([
            Policy::sliding_log("log", Rate::per_minute(50).expect("rate")).expect("policy"),
            Policy::gcra("daily", Rate::per_day(1000).expect("rate")).expect("policy"),
        ])
        .build()
        .expect("valid limiter");
    for subject in ["a", "user:{7}", "}{", "x:y:z"] {
        let total = grant_concurrently(&limiter, subject, 12, 6).await;
        assert_eq!(total, 50, "{subject}");
        let d = limiter.peek(subject).await.expect("peek");
        assert_eq!(
            (d.policies[0].remaining, d.policies[1].remaining),
            (0, 950),
            "{subject}: {}",
            brief(&d)
        );
    }
}
