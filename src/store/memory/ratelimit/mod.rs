//! The five algorithms in Rust, for the in-memory store (and as the readable twin of the
//! Lua in `src/store/scripts/ratelimit/`): pure functions of (parameters, stored state, now,
//! cost) with no clock and no I/O.
//!
//! Every function mirrors its Lua counterpart step by step, in integer microseconds (`i64`;
//! every value stays below 2^53, so Lua's doubles hold them exactly) and, where the sliding
//! window counter needs a fraction, the same `f64` expression evaluated in the same order,
//! so both stores give bit-identical answers. A check is two-phase: every policy *decides*
//! first, and only if all allow (and the cost is not zero) does every policy *apply* its
//! write. That is what makes several policies all-or-nothing.
//!
//! Conventions shared by all five:
//! * `cost == 0` is a peek: the decision a cost-1 request would get, with nothing written.
//! * State that is past its reset time behaves exactly like no state, so a key that
//!   outlives its ttl (a slow expiry, an injected clock) never changes an answer.
//! * A clock that steps back never makes anything pass earlier.

mod fixed_window;
mod gcra;
mod sliding_log;
mod sliding_window;
mod token_bucket;

use std::collections::VecDeque;

use crate::store::scripts::ratelimit::{Kind, PolicyParams, RateReply, Verdict};

/// What the store keeps for one policy and subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    /// GCRA: the theoretical arrival time.
    Tat(i64),
    /// Token bucket: whole tokens left, and the time they were counted at.
    Bucket { tokens: i64, at: i64 },
    /// Fixed window: the window's index (`now / period`) and its count.
    Window { index: i64, count: i64 },
    /// Sliding window counter: the current window's index, the previous and current counts.
    Sliding { index: i64, prev: i64, curr: i64 },
    /// Sliding log: the allowed requests' times, ascending.
    Log(VecDeque<i64>),
}

/// Figures at one moment: cost-1 requests left, µs until fully reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) remaining: i64,
    pub(crate) reset: i64,
}

/// How a policy's state changes if the check is applied.
#[derive(Debug)]
pub(crate) enum Write {
    /// Store this state.
    Replace(State),
    /// Sliding log: drop entries older than the window, add `cost` entries at `now`, cap.
    LogAppend,
}

/// One policy's decision.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) allowed: bool,
    /// µs until the request would be allowed; 0 when allowed.
    pub(crate) retry: i64,
    /// Figures if nothing is applied.
    pub(crate) before: Snapshot,
    /// Figures and write if the check is applied (allowed with a cost above zero).
    pub(crate) after: Option<(Snapshot, Write)>,
}

impl Outcome {
    fn deny(retry: i64, before: Snapshot) -> Self {
        Self {
            allowed: false,
            retry,
            before,
            after: None,
        }
    }

    fn allow(before: Snapshot, after: Option<(Snapshot, Write)>) -> Self {
        Self {
            allowed: true,
            retry: 0,
            before,
            after,
        }
    }
}

/// Decides one policy (phase one): reads `state`, writes nothing.
pub(crate) fn decide(p: &PolicyParams, state: Option<&State>, now: i64, cost: i64) -> Outcome {
    let (unit, count) = (p.unit_us, p.count);
    match p.kind {
        Kind::Gcra => gcra::decide(unit, count, state, now, cost),
        Kind::TokenBucket => token_bucket::decide(unit, count, state, now, cost),
        Kind::FixedWindow => fixed_window::decide(unit, count, state, now, cost),
        Kind::SlidingWindow => sliding_window::decide(unit, count, state, now, cost),
        Kind::SlidingLog => sliding_log::decide(unit, count, state, now, cost),
    }
}

/// Applies one policy's write (phase two).
fn apply(p: &PolicyParams, slot: &mut Option<State>, write: Write, now: i64, cost: i64) {
    match write {
        Write::Replace(state) => *slot = Some(state),
        Write::LogAppend => sliding_log::append(p.unit_us, p.count, slot, now, cost),
    }
}

/// A whole check over several policies: decide all, then apply all if all allow and
/// `cost > 0`. `states[i]` is policy `i`'s state (updated in place); returns the reply and,
/// per policy, the time its state expires (its reset time), or `None` if it was not written.
pub(crate) fn check(
    params: &[PolicyParams],
    states: &mut [Option<State>],
    now: i64,
    cost: u32,
) -> (RateReply, Vec<Option<i64>>) {
    let cost = i64::from(cost);
    let outcomes: Vec<Outcome> = params
        .iter()
        .zip(states.iter())
        .map(|(p, state)| decide(p, state.as_ref(), now, cost))
        .collect();
    let applied = cost > 0 && outcomes.iter().all(|o| o.allowed);
    let mut verdicts = Vec::with_capacity(outcomes.len());
    let mut expiries = Vec::with_capacity(outcomes.len());
    for ((p, slot), outcome) in params.iter().zip(states.iter_mut()).zip(outcomes) {
        let figures = match outcome.after {
            Some((after, write)) if applied => {
                apply(p, slot, write, now, cost);
                expiries.push(Some(now + after.reset));
                after
            }
            _ => {
                expiries.push(None);
                outcome.before
            }
        };
        verdicts.push(Verdict::new(
            outcome.allowed,
            figures.remaining,
            outcome.retry,
            figures.reset,
        ));
    }
    (RateReply { applied, verdicts }, expiries)
}

/// `max(x, 0)`.
fn non_negative(x: i64) -> i64 {
    x.max(0)
}
