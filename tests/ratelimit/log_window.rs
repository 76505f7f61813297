//! Issue 28: a sliding log whose window becomes longer after a rate change must still count
//! the entries of the old window. Two limiters with one policy name and algorithm share the
//! subject's keys (keys carry the name, not the rate), so building the second one is a
//! change of rate, as a plan lookup or a deploy makes it.

use std::time::Duration;

use distlock::ratelimit::{__TestOp as Op, Algorithm, Policy, Rate, RateLimiter};
use distlock::{InvalidPolicy, RateLimitError};

use crate::common::{EPOCH_US, brief, policy};
use crate::support::fixture::{Fixture, on_both_stores};

on_both_stores!(
    a_longer_window_counts_the_entries_of_the_old_one,
    kept_logs_outlive_their_window_after_an_idle_gap,
    a_log_retention_of_zero_or_beyond_the_longest_period_is_refused,
);

fn limiter(fx: &Fixture, count: u32, window: Duration, keep: Option<Duration>) -> RateLimiter {
    let mut builder = fx
        .client
        .rate_limiter(policy(Algorithm::SlidingLog, count, window))
        .deny_cache(0);
    if let Some(keep) = keep {
        builder = builder.keep_logs_for(keep);
    }
    builder.build().expect("valid limiter")
}

const MS: u64 = 1000;

/// 5 per second: four requests at 0, 300, 600 and 900 ms and a fifth at 1200 ms (the first
/// has left the 1 s window by then). At 1300 ms the window becomes 10 s: all five are in it,
/// so nothing is left. Before the fix the write at 1200 ms had trimmed the entry of 0 ms
/// (older than the old window), and the longer window saw four.
async fn a_longer_window_counts_the_entries_of_the_old_one(fx: Fixture) {
    let short = limiter(&fx, 5, Duration::from_secs(1), None);
    let long = limiter(&fx, 5, Duration::from_secs(10), None);
    for at in [0, 300, 600, 900, 1200] {
        let (d, applied, _) = short
            .__operate_at("sub", Op::Check(1), EPOCH_US + at * MS)
            .await
            .expect("check");
        assert!(applied, "at {at} ms under 5/s: {}", brief(&d));
    }
    let (d, _, _) = long
        .__operate_at("sub", Op::Check(0), EPOCH_US + 1300 * MS)
        .await
        .expect("peek");
    assert_eq!(
        (d.allowed, d.remaining),
        (false, 0),
        "five requests in the last 10 s: {}",
        brief(&d)
    );
    let (d, applied, _) = long
        .__operate_at("sub", Op::Check(1), EPOCH_US + 1300 * MS)
        .await
        .expect("check");
    assert!(!applied && !d.allowed, "a sixth in 10 s: {}", brief(&d));
    // It passes once the first entry (0 ms) leaves the 10 s window.
    assert_eq!(d.retry_after, Duration::from_millis(10_000 - 1300));
    let (d, applied, _) = long
        .__operate_at("sub", Op::Check(1), EPOCH_US + 10_001 * MS)
        .await
        .expect("check");
    assert!(applied, "{}", brief(&d));
}

/// A log kept for 5 s (`keep_logs_for`) outlives its 200 ms window: five requests, an idle
/// gap of 400 ms (past the old window, and past the key's old ttl), then a window of 5 s
/// still sees all five. On real time, so the Redis key's own expiry is what is tested. A
/// log kept for its window only (the default) is gone after the same gap: the default's
/// documented limit.
async fn kept_logs_outlive_their_window_after_an_idle_gap(fx: Fixture) {
    let window = Duration::from_millis(200);
    let long_window = Duration::from_secs(5);
    for (subject, keep) in [("kept", Some(long_window)), ("default", None)] {
        let short = limiter(&fx, 5, window, keep);
        let long = limiter(&fx, 5, long_window, keep);
        for _ in 0..5 {
            let d = short.check(subject).await.expect("check");
            assert!(d.allowed, "{subject}: {}", brief(&d));
        }
        tokio::time::sleep(2 * window).await;
        let d = long.peek(subject).await.expect("peek");
        if keep.is_some() {
            // At most 5 s since the first request (the gap is 400 ms; a stall of the machine
            // longer than 4.6 s would let them leave the window, as it should).
            assert_eq!(
                (d.allowed, d.remaining),
                (false, 0),
                "{subject}: five requests in the last 5 s: {}",
                brief(&d)
            );
        } else {
            assert_eq!(d.remaining, 5, "{subject}: {}", brief(&d));
        }
    }
}

async fn a_log_retention_of_zero_or_beyond_the_longest_period_is_refused(fx: Fixture) {
    let log = || Policy::sliding_log("log", Rate::per_second(5).expect("rate")).expect("policy");
    for keep in [
        Duration::ZERO,
        distlock::ratelimit::MAX_PERIOD + Duration::from_micros(1),
        Duration::MAX,
    ] {
        let built = fx.client.rate_limiter(log()).keep_logs_for(keep).build();
        assert!(
            matches!(
                built,
                Err(RateLimitError::InvalidPolicy(
                    InvalidPolicy::LogRetention { .. }
                ))
            ),
            "{keep:?}: {built:?}"
        );
    }
    fx.client
        .rate_limiter(log())
        .keep_logs_for(distlock::ratelimit::MAX_PERIOD)
        .build()
        .expect("the longest period is a valid retention");
}
