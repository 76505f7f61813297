//! Each rate-limit algorithm's decision function, property-tested (issue 26 §3): over every
//! generated sequence of checks (time steps, costs), the store's verdicts equal the reference
//! model's (`tests/ratelimit/model.rs`) field by field, and what it allows never exceeds the
//! algorithm's own budget (the checker's definitions, `checker.rs`), which is stated
//! independently of both implementations.
//!
//! The in-memory store's decision (the Rust twin) runs on every case; the Lua scripts on a
//! real `redis-server` on fewer cases (a round trip each). Time is injected (`__check_at`, the
//! `test-util` hook), so the sequences cover idle gaps, bursts at one instant and window
//! boundaries without sleeping.

use std::future::Future;
use std::time::Duration;

use distlock::Client;
use distlock::ratelimit::{Algorithm, Policy, Rate};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use crate::checker::{Allowed, sliding_excess, span_excess, window_excess};
use crate::model::Models;
use crate::support::RedisServer;

/// A plausible server time in µs.
const EPOCH_US: i64 = 1_700_000_000_000_000;

const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::Gcra,
    Algorithm::TokenBucket,
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingLog,
];

/// A policy: algorithm, count per period (ms), burst (GCRA family).
fn policy() -> impl Strategy<Value = Policy> {
    (0..ALGORITHMS.len(), 1u32..=8, 5u64..=2_000, 1u32..=8).prop_map(
        |(a, count, period_ms, burst)| {
            let algorithm = ALGORITHMS[a];
            let mut rate = Rate::per(count, Duration::from_millis(period_ms)).expect("valid rate");
            if matches!(algorithm, Algorithm::Gcra | Algorithm::TokenBucket) {
                rate = rate.burst(burst).expect("valid burst");
            }
            Policy::new("p", algorithm, rate).expect("valid policy")
        },
    )
}

/// One check: the time step (µs, as a fraction of the policy's unit, to hit boundaries) and
/// its cost (0 is a peek).
fn steps() -> impl Strategy<Value = Vec<(u32, u32, u32)>> {
    prop::collection::vec((0u32..100, 0u32..1_000, 0u32..10), 1..80)
}

/// The step in µs for `unit` µs: none, a fraction, across a boundary, or a long idle gap.
fn step_us(kind: u32, frac: u32, unit: i64) -> i64 {
    let frac = i64::from(frac);
    match kind {
        0..30 => 0,
        30..70 => unit * frac / 4_000,
        70..92 => unit * frac / 500,
        _ => unit * frac / 100,
    }
}

fn cost_of(c: u32, limit: u32) -> u32 {
    match c {
        0 => 0,
        1..7 => 1,
        _ => 1 + c % limit.max(1),
    }
}

/// Runs one sequence on `client`; fails on the first verdict that differs from the model or
/// on an allowance past the budget.
async fn one_case(
    client: &Client,
    case: u64,
    policy: &Policy,
    steps: &[(u32, u32, u32)],
) -> Result<(), TestCaseError> {
    let limiter = client
        .rate_limiter(policy.clone())
        .build()
        .expect("valid limiter");
    let mut models = Models::of(std::slice::from_ref(policy));
    let unit = models.0[0].policy.unit;
    let limit = models.0[0].policy.limit;
    let subject = format!("prop:{case}");
    let mut now = EPOCH_US / unit * unit - unit / 3;
    let mut allowed: Vec<Allowed> = Vec::new();
    for (i, &(kind, frac, c)) in steps.iter().enumerate() {
        now += step_us(kind, frac, unit);
        let cost = cost_of(c, policy.limit());
        let want = models.check(now, i64::from(cost));
        let got = limiter
            .__check_at(&subject, cost, u64::try_from(now).expect("positive"))
            .await
            .map_err(|e| TestCaseError::fail(format!("step {i}: {e}")))?;
        let p = &got.policies[0];
        let got_tuple = (
            p.allowed,
            i64::try_from(p.remaining).expect("fits"),
            i64::try_from(p.retry_after.as_micros()).expect("fits"),
            i64::try_from(p.reset_after.as_micros()).expect("fits"),
        );
        let w = &want[0];
        prop_assert_eq!(
            got_tuple,
            (w.allowed, w.remaining, w.retry_us, w.reset_us),
            "step {} at {} cost {}: (allowed, remaining, retry µs, reset µs) differs from the model",
            i,
            now,
            cost
        );
        if p.allowed && cost > 0 {
            allowed.push((now, now, i64::from(cost), (0, i as u64)));
        }
    }
    let excess = match policy.algorithm() {
        Algorithm::Gcra | Algorithm::TokenBucket => span_excess(
            &allowed,
            |span| limit + span / unit,
            limit * unit + 4 * unit,
        ),
        Algorithm::SlidingLog => span_excess(
            &allowed,
            |span| if span < unit { limit } else { i64::MAX },
            unit,
        ),
        Algorithm::FixedWindow => window_excess(&allowed, limit, unit),
        _ => sliding_excess(&allowed, limit, unit),
    };
    prop_assert!(
        excess.is_empty(),
        "over the budget: {:?}",
        excess.first().map(|e| (e.0, e.1, e.2, &e.4))
    );
    Ok(())
}

/// Runs `cases` proptest cases drawn from `strategy` (no failure persistence), each as
/// `case(number, value)` on the current tokio runtime, and panics with the first failure (as
/// proptest shrank it).
pub(crate) fn run_numbered_cases<S, F, Fut>(cases: u32, strategy: &S, case: F)
where
    S: Strategy,
    F: Fn(u64, S::Value) -> Fut,
    Fut: Future<Output = Result<(), TestCaseError>>,
{
    let rt = tokio::runtime::Handle::current();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let number = std::sync::atomic::AtomicU64::new(0);
    let result = runner.run(strategy, |value| {
        let n = number.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::task::block_in_place(|| rt.block_on(case(n, value)))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

fn run_cases(client: &Client, cases: u32) {
    run_numbered_cases(
        cases,
        &(policy(), steps()),
        |n, (policy, steps)| async move { one_case(client, n, &policy, &steps).await },
    );
}

/// The in-memory store's decision functions against the model and the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn memory_store_decisions_match_the_model_and_the_budget() {
    let client = Client::in_memory();
    run_cases(&client, 768);
}

/// The Lua scripts on a real server, fewer cases (each check is a round trip).
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn redis_scripts_match_the_model_and_the_budget() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.expect("connect");
    run_cases(&client, 64);
}
