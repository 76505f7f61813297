//! Helpers shared by the rate-limit tests.
#![allow(dead_code)]

use std::time::Duration;

use distlock::ratelimit::{Algorithm, Decision, Policy, Rate};

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
