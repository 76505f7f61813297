//! Helpers shared by the rate-limit tests.
#![allow(dead_code)]

use std::time::Duration;

use distlock::ratelimit::{Algorithm, Decision, Policy, Rate, RateLimiter};
use rand::Rng;
use rand::rngs::StdRng;

use crate::support::fixture::Fixture;

/// A plausible server time in µs (2023-11), so window indexes and TATs have realistic sizes.
pub const EPOCH_US: u64 = 1_700_000_000_000_000;

/// Every algorithm.
pub const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::Gcra,
    Algorithm::TokenBucket,
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingLog,
];

/// A policy named after its algorithm, `count` per `period` (burst = count).
pub fn policy(algorithm: Algorithm, count: u32, period: Duration) -> Policy {
    let name = algorithm.name().replace(' ', "-");
    Policy::new(
        name,
        algorithm,
        Rate::per(count, period).expect("valid rate"),
    )
    .expect("valid policy")
}

/// Where a random trace starts, in µs: up to one `unit` before a multiple of it, so the
/// first steps cross a boundary.
pub fn trace_start(rng: &mut StdRng, unit: i64) -> i64 {
    i64::try_from(EPOCH_US).expect("fits") / unit * unit - rng.random_range(0..unit)
}

/// How a random trace spaces its steps, in percent of the steps: none (a burst at one
/// instant) 30%, less than a quarter `unit` until `short`, less than two units until
/// `medium`, the rest a long idle gap (past every ttl) of less than `idle` units.
pub struct Gaps {
    short: u32,
    medium: u32,
    idle: i64,
}

/// The steps of a trace of checks.
pub const CHECK_GAPS: Gaps = Gaps {
    short: 70,
    medium: 92,
    idle: 10,
};

/// The steps of a trace where checks mix with other operations: more short steps, shorter
/// idle gaps.
pub const OPERATION_GAPS: Gaps = Gaps {
    short: 75,
    medium: 95,
    idle: 6,
};

/// µs to a trace's next step, as `gaps` spaces them.
pub fn gap(rng: &mut StdRng, unit: i64, gaps: &Gaps) -> i64 {
    let roll = rng.random_range(0..100);
    if roll < 30 {
        0
    } else if roll < gaps.short {
        rng.random_range(0..unit / 4 + 1)
    } else if roll < gaps.medium {
        rng.random_range(0..2 * unit)
    } else {
        rng.random_range(0..gaps.idle * unit)
    }
}

/// A random check's cost: 0 (a peek) one time in ten, 1 six times, else up to `min_limit`.
pub fn random_cost(rng: &mut StdRng, min_limit: u32) -> u32 {
    match rng.random_range(0..10) {
        0 => 0,
        1..7 => 1,
        _ => rng.random_range(1..=min_limit),
    }
}

/// How many of `checks` checks of `subject`, one after the other, were allowed.
pub async fn allowed_of(limiter: &RateLimiter, subject: &str, checks: usize) -> usize {
    let mut allowed = 0;
    for _ in 0..checks {
        allowed += usize::from(limiter.check(subject).await.expect("check").allowed);
    }
    allowed
}

/// Two replicas of `policy`'s limiter: one on `fx`'s client whose cached denials answer for
/// at most `max_age`, and one on another client.
pub async fn here_and_elsewhere(
    fx: &Fixture,
    policy: Policy,
    max_age: Duration,
) -> (RateLimiter, RateLimiter) {
    let here = fx
        .client
        .rate_limiter(policy.clone())
        .deny_cache_max_age(max_age)
        .build()
        .expect("limiter");
    let elsewhere = fx
        .another_client()
        .await
        .rate_limiter(policy)
        .build()
        .expect("limiter");
    (here, elsewhere)
}

/// µs of a duration.
pub fn us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).expect("fits")
}

/// A one-line summary of a decision for assertion messages.
pub fn brief(d: &Decision) -> String {
    format!(
        "allowed={} remaining={} retry={:?} reset={:?} origin={:?}",
        d.allowed, d.remaining, d.retry_after, d.reset_after, d.origin
    )
}
