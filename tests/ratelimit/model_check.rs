//! Both stores against the reference model (`model.rs`), on random traces with injected
//! time: every field of every policy's verdict must match, to the microsecond.
//!
//! Traces mix bursts at one instant, steps shorter than the emission interval, steps across
//! window boundaries and long idle gaps (past every ttl), costs from 0 (peek) to the limit,
//! and several policies checked all-or-nothing, or any of them (issue 28 §4); a third of the
//! policies have a lockout (issue 28 §2). The seed is printed on failure.

use std::time::Duration;

use distlock::ratelimit::{Algorithm, Lockout, Policy, Rate};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{ALGORITHMS, CHECK_GAPS, OPERATION_GAPS, gap, random_cost, trace_start, us};
use crate::model::{Models, paired};
use crate::support::fixture::{Fixture, on_both_stores};

const TRACES_PER_ALGORITHM: usize = 4;
const MIXED_TRACES: usize = 6;
const STEPS: usize = 120;

pub(crate) fn random_policy(rng: &mut StdRng, algorithm: Algorithm, name: &str) -> Policy {
    let count = rng.random_range(1..=12);
    let period = Duration::from_micros(rng.random_range(2_000..=3_000_000));
    let mut rate = Rate::per(count, period).expect("valid rate");
    if matches!(algorithm, Algorithm::Gcra | Algorithm::TokenBucket) {
        rate = rate.burst(rng.random_range(1..=12)).expect("valid burst");
    }
    Policy::new(name, algorithm, rate).expect("valid policy")
}

/// Two or three policies of random algorithms, named `p0`, `p1`..., a third with a lockout
/// ([`maybe_lockout`]).
pub(crate) fn random_policies(rng: &mut StdRng) -> Vec<Policy> {
    random_policies_of(rng, |rng| ALGORITHMS[rng.random_range(0..ALGORITHMS.len())])
}

/// As [`random_policies`], each of the algorithm `pick` draws.
fn random_policies_of(rng: &mut StdRng, pick: impl Fn(&mut StdRng) -> Algorithm) -> Vec<Policy> {
    let n = rng.random_range(2..=3);
    (0..n)
        .map(|i| {
            let algorithm = pick(rng);
            let policy = random_policy(rng, algorithm, &format!("p{i}"));
            maybe_lockout(rng, policy)
        })
        .collect()
}

/// The model of a trace on `policies`, the largest unit among them and the smallest limit.
fn model_of(policies: &[Policy]) -> (Models, i64, u32) {
    let models = Models::of(policies);
    let unit = models.0.iter().map(|m| m.policy.unit).max().unwrap_or(1);
    let min_limit = policies.iter().map(Policy::limit).min().unwrap_or(1);
    (models, unit, min_limit)
}

/// `policy`, with a random lockout one time in three: one to three growing steps and a
/// memory, each from half the policy's window to a few windows, so traces see breaches
/// escalate, blocks end and breaches be forgotten.
pub(crate) fn maybe_lockout(rng: &mut StdRng, policy: Policy) -> Policy {
    if rng.random_range(0..3) != 0 {
        return policy;
    }
    let lockout = random_lockout(rng, policy.window());
    policy.with_lockout(lockout).expect("valid lockout")
}

/// A lockout for a policy of `window`: see [`maybe_lockout`].
pub(crate) fn random_lockout(rng: &mut StdRng, window: Duration) -> Lockout {
    let window = u64::try_from(window.as_micros()).expect("fits");
    let span = |rng: &mut StdRng| {
        Duration::from_micros(rng.random_range(window / 2..=4 * window).max(1_000))
    };
    let mut steps: Vec<Duration> = (0..rng.random_range(1..=3)).map(|_| span(rng)).collect();
    steps.sort_unstable();
    steps.dedup();
    let memory = span(rng);
    Lockout::after_breach(steps).remember_for(memory)
}

/// A policy's verdict as the model states it: (allowed, remaining, retry µs, reset µs,
/// locked out).
fn verdict(got: &distlock::ratelimit::PolicyDecision) -> (bool, i64, i64, i64, bool) {
    (
        got.allowed,
        i64::try_from(got.remaining).expect("fits"),
        us(got.retry_after),
        us(got.reset_after),
        got.locked_out,
    )
}

fn expected(want: &crate::model::Expected) -> (bool, i64, i64, i64, bool) {
    (
        want.allowed,
        want.remaining,
        want.retry_us,
        want.reset_us,
        want.locked_us > 0,
    )
}

/// Runs one trace of `STEPS` checks on `policies` and compares every verdict with the model.
async fn run_trace(fx: &Fixture, rng: &mut StdRng, seed: u64, trace: usize, policies: Vec<Policy>) {
    let limiter = fx
        .client
        .rate_limiter_all(policies.clone())
        .build()
        .expect("valid policies");
    let (mut models, unit, min_limit) = model_of(&policies);
    let mut now = trace_start(rng, unit);
    let subject = format!("trace:{seed}:{trace}");
    for step in 0..STEPS {
        now += gap(rng, unit, &CHECK_GAPS);
        let cost = random_cost(rng, min_limit);
        let expected = models.check(now, i64::from(cost));
        let decision = limiter
            .__check_at(&subject, cost, u64::try_from(now).expect("positive"))
            .await
            .unwrap_or_else(|e| panic!("seed {seed} trace {trace} step {step}: {e}"));
        for (i, (want, got)) in paired(&expected, &decision.policies, "the check").enumerate() {
            assert_eq!(
                verdict(got),
                self::expected(want),
                "seed {seed} trace {trace} step {step} policy {i} ({:?}) at {now} cost {cost}: \
                 (allowed, remaining, retry µs, reset µs, locked out) differs from the model",
                policies[i]
            );
        }
        assert_eq!(
            decision.allowed,
            expected.iter().all(|e| e.allowed),
            "seed {seed} trace {trace} step {step}: overall verdict"
        );
    }
}

/// Each algorithm alone.
async fn every_algorithm_matches_the_model(fx: Fixture) {
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    for (a, algorithm) in ALGORITHMS.into_iter().enumerate() {
        for trace in 0..TRACES_PER_ALGORITHM {
            let policy = random_policy(&mut rng, algorithm, "p");
            let policy = maybe_lockout(&mut rng, policy);
            run_trace(&fx, &mut rng, seed, a * 10 + trace, vec![policy]).await;
        }
    }
}

/// Two or three policies of random algorithms on one subject, all-or-nothing.
async fn mixed_policies_match_the_model(fx: Fixture) {
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    for trace in 0..MIXED_TRACES {
        let policies = random_policies(&mut rng);
        run_trace(&fx, &mut rng, seed, 100 + trace, policies).await;
    }
}

/// Runs one trace of `STEPS` any-of checks (and a few resets) on `policies` and compares
/// every verdict, the policy charged and the binding policy with the model's. Returns how
/// many checks charged a policy other than the first, and how many of cost > 0 were denied.
async fn run_any_trace(
    fx: &Fixture,
    rng: &mut StdRng,
    seed: u64,
    trace: usize,
    policies: Vec<Policy>,
) -> (usize, usize) {
    use distlock::ratelimit::__TestOp as Op;
    let limiter = fx
        .client
        .rate_limiter_any(policies.clone())
        .build()
        .expect("valid policies");
    let (mut models, unit, min_limit) = model_of(&policies);
    let mut now = trace_start(rng, unit);
    let subject = format!("any:{seed}:{trace}");
    let (mut later, mut denied) = (0, 0);
    // After the random steps, checks of 1 at one instant, one more than the policies hold
    // between them: every trace ends with every policy spent (or blocked) and a denial.
    let drain = STEPS
        + policies
            .iter()
            .map(|p| usize::try_from(p.limit()).expect("fits"))
            .sum::<usize>()
        + 1;
    for step in 0..drain {
        if step < STEPS {
            now += gap(rng, unit, &CHECK_GAPS);
        }
        let at = u64::try_from(now).expect("positive");
        let context = format!("seed {seed} trace {trace} step {step} at {now} on {policies:?}");
        if step < STEPS && rng.random_range(0..40) == 0 {
            let expected = models.reset(now);
            let (d, _, _) = limiter
                .__operate_at(&subject, Op::Reset, at)
                .await
                .unwrap_or_else(|e| panic!("{context}: {e}"));
            for (want, got) in paired(&expected, &d.policies, "the reset") {
                assert_eq!(verdict(got), self::expected(want), "{context}: reset");
            }
            continue;
        }
        let cost = if step < STEPS {
            random_cost(rng, min_limit)
        } else {
            1
        };
        let (want_charged, expected) = models.check_any(now, i64::from(cost));
        let (d, applied, _) = limiter
            .__operate_at(&subject, Op::Check(cost), at)
            .await
            .unwrap_or_else(|e| panic!("{context} cost {cost}: {e}"));
        for (i, (want, got)) in paired(&expected, &d.policies, "the check").enumerate() {
            assert_eq!(
                verdict(got),
                self::expected(want),
                "{context} cost {cost} policy {i}: (allowed, remaining, retry µs, reset µs, \
                 locked out) differs from the model"
            );
        }
        let got_charged = d.policies.iter().position(|p| p.charged);
        assert_eq!(
            (got_charged, applied, d.granted),
            (
                want_charged,
                want_charged.is_some(),
                if want_charged.is_some() { cost } else { 0 }
            ),
            "{context} cost {cost}: (policy charged, applied, granted)"
        );
        assert_eq!(
            d.policies.iter().filter(|p| p.charged).count(),
            usize::from(want_charged.is_some()),
            "{context}: at most one policy charged"
        );
        let allowed = expected.iter().any(|e| e.allowed);
        // The binding policy: the first that allows, else the soonest wait (first on ties).
        let binding = expected.iter().position(|e| e.allowed).unwrap_or_else(|| {
            (0..expected.len())
                .min_by_key(|&i| (expected[i].retry_us, i))
                .expect("policies")
        });
        assert_eq!(
            (d.allowed, &*d.policy, us(d.retry_after)),
            (
                allowed,
                policies[binding].name(),
                if allowed {
                    0
                } else {
                    expected[binding].retry_us
                }
            ),
            "{context} cost {cost}: (allowed, binding policy, retry µs)"
        );
        match want_charged {
            Some(i) if i > 0 => later += 1,
            None if cost > 0 => denied += 1,
            _ => {}
        }
    }
    (later, denied)
}

/// Any of two or three policies of random algorithms (issue 28 §4), a third with a lockout.
async fn any_of_matches_the_model(fx: Fixture) {
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut later, mut denied) = (0, 0);
    for trace in 0..MIXED_TRACES {
        let policies = random_policies(&mut rng);
        let (l, d) = run_any_trace(&fx, &mut rng, seed, 300 + trace, policies).await;
        later += l;
        denied += d;
    }
    // The traces exercised the combination: a later policy took over, and all denied (each
    // trace's drain guarantees the latter).
    assert!(
        later > 0 && denied > 0,
        "seed {seed}: {later} checks charged a later policy, {denied} were denied"
    );
}

on_both_stores!(
    every_algorithm_matches_the_model,
    mixed_policies_match_the_model,
    any_of_matches_the_model
);

/// One operation of an extended trace.
#[derive(Debug, Clone, Copy)]
enum Step {
    Check(u32),
    Refund(u32),
    Penalize(u32),
    Reset,
    /// Cost, max wait µs.
    Reserve(u32, u64),
    /// Switch to the other rate of the subject (GCRA family only).
    SwitchRate,
    /// As many units as fit, at most this many.
    UpTo(u32),
}

/// Checks interleaved with refunds, penalties, resets, reservations (GCRA family) and, when
/// `rates` has two limiters, changes of the subject's rate: every field of every verdict, and
/// a reservation's grant and wait, must match the model.
async fn run_extended_trace(
    rng: &mut StdRng,
    seed: u64,
    trace: usize,
    limiters: &[(distlock::ratelimit::RateLimiter, Vec<Policy>)],
) {
    use distlock::ratelimit::__TestOp as Op;
    let mut current = 0;
    let mut models = Models::of(&limiters[current].1);
    let unit = models.0.iter().map(|m| m.policy.unit).max().unwrap_or(1);
    // Reservations are GCRA-family only; under a lockout they are checks, which the model
    // follows too.
    let family = limiters[current]
        .1
        .iter()
        .all(|p| matches!(p.algorithm(), Algorithm::Gcra | Algorithm::TokenBucket));
    let mut now = trace_start(rng, unit);
    let subject = format!("ops:{seed}:{trace}");
    for step_no in 0..STEPS {
        now += gap(rng, unit, &OPERATION_GAPS);
        let policies = &limiters[current].1;
        let min_limit = policies.iter().map(Policy::limit).min().unwrap_or(1);
        let step = match rng.random_range(0..100) {
            0..50 => Step::Check(random_cost(rng, min_limit)),
            50..55 => Step::UpTo(rng.random_range(1..=min_limit + 3)),
            55..65 => Step::Refund(rng.random_range(0..=min_limit + 2)),
            65..75 => Step::Penalize(rng.random_range(0..=min_limit + 2)),
            75..78 => Step::Reset,
            78..92 if family => Step::Reserve(
                rng.random_range(1..=min_limit),
                rng.random_range(0..=u64::try_from(3 * unit).expect("fits")),
            ),
            92..100 if limiters.len() > 1 => Step::SwitchRate,
            _ => Step::Check(1),
        };
        if let Step::SwitchRate = step {
            current = 1 - current;
            assert_eq!(
                models.0.len(),
                limiters[current].1.len(),
                "one model per policy"
            );
            for (model, policy) in models.0.iter_mut().zip(&limiters[current].1) {
                model.policy = crate::model::ModelPolicy::of(policy);
            }
            continue;
        }
        let limiter = &limiters[current].0;
        let at = u64::try_from(now).expect("positive");
        let mut want_granted = None;
        let (op, expected, want_reserved) = match step {
            Step::Check(cost) => (Op::Check(cost), models.check(now, i64::from(cost)), None),
            Step::UpTo(n) => {
                let (granted, verdicts) = models.check_up_to(now, i64::from(n));
                want_granted = Some(granted);
                (Op::CheckUpTo(n), verdicts, None)
            }
            Step::Refund(n) => (Op::Refund(n), models.refund(now, i64::from(n)), None),
            Step::Penalize(n) => (Op::Penalize(n), models.penalize(now, i64::from(n)), None),
            Step::Reset => (Op::Reset, models.reset(now), None),
            Step::Reserve(cost, max_wait) => {
                let (granted, wait, verdicts) =
                    models.reserve(now, i64::from(cost), i64::try_from(max_wait).expect("fits"));
                (Op::Reserve(cost, max_wait), verdicts, Some((granted, wait)))
            }
            Step::SwitchRate => unreachable!("handled above"),
        };
        let (decision, applied, wait) = limiter
            .__operate_at(&subject, op, at)
            .await
            .unwrap_or_else(|e| panic!("seed {seed} trace {trace} step {step_no} {step:?}: {e}"));
        let context = || {
            format!(
                "seed {seed} trace {trace} step {step_no} {step:?} at {now} on {:?}",
                limiters[current].1
            )
        };
        for (i, (want, got)) in paired(&expected, &decision.policies, "the check").enumerate() {
            assert_eq!(
                verdict(got),
                self::expected(want),
                "{} policy {i}: (allowed, remaining, retry µs, reset µs, locked out) differs from \
                 the model",
                context()
            );
        }
        if let Some(granted) = want_granted {
            assert_eq!(
                (i64::from(decision.granted), applied, decision.allowed),
                (granted, granted > 0, granted > 0),
                "{}: (granted, applied, allowed) of a check up to n",
                context()
            );
        }
        if let Some((granted, want_wait)) = want_reserved {
            assert_eq!(
                (applied, i64::try_from(wait).expect("fits")),
                (granted, want_wait),
                "{}: (granted, wait µs)",
                context()
            );
        }
    }
}

/// Every algorithm alone, and mixed policies, with checks up to n, refunds, penalties, resets
/// and (GCRA family) reservations; GCRA and the token bucket also change rate mid-trace.
async fn operations_and_rate_changes_match_the_model(fx: Fixture) {
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    for (a, algorithm) in ALGORITHMS.into_iter().enumerate() {
        for trace in 0..TRACES_PER_ALGORITHM {
            let mut variants = vec![random_policy(&mut rng, algorithm, "p")];
            if matches!(algorithm, Algorithm::Gcra | Algorithm::TokenBucket) {
                variants.push(random_policy(&mut rng, algorithm, "p"));
            }
            // Both rates of the subject have the same lockout, or none.
            if rng.random_range(0..3) == 0 {
                let lockout = random_lockout(&mut rng, variants[0].window());
                variants = variants
                    .into_iter()
                    .map(|p| p.with_lockout(lockout.clone()).expect("valid lockout"))
                    .collect();
            }
            let limiters: Vec<_> = variants
                .into_iter()
                .map(|p| {
                    let limiter = fx
                        .client
                        .rate_limiter(p.clone())
                        .build()
                        .expect("valid limiter");
                    (limiter, vec![p])
                })
                .collect();
            run_extended_trace(&mut rng, seed, a * 10 + trace, &limiters).await;
        }
    }
    for trace in 0..MIXED_TRACES {
        let family = rng.random_range(0..2) == 0;
        let policies = random_policies_of(&mut rng, |rng| {
            if family {
                [Algorithm::Gcra, Algorithm::TokenBucket][rng.random_range(0..2)]
            } else {
                ALGORITHMS[rng.random_range(0..ALGORITHMS.len())]
            }
        });
        let limiter = fx
            .client
            .rate_limiter_all(policies.clone())
            .build()
            .expect("valid policies");
        run_extended_trace(&mut rng, seed, 200 + trace, &[(limiter, policies)]).await;
    }
}

on_both_stores!(operations_and_rate_changes_match_the_model);
