//! Rate limiting as the stores see it: the contract every store keeps ([`PolicyParams`],
//! [`RateOp`], [`RateRequest`], [`RateReply`]), and each algorithm twice, side by side: in Lua
//! (`<algorithm>.lua`, run by Redis through [`script`]) and in Rust (`<algorithm>.rs`, run
//! by the in-memory store and by a limiter's local fallback). Neither store owns it, so both
//! import it and it imports neither.
//!
//! ```text
//! ratelimit/
//!   mod.rs            the contract; the Rust algorithms' shared machinery (below)
//!   script.rs         the Lua side: the scripts, their arguments and replies, the batch
//!   ratelimit.lua     the driver; clock.lua, common.lua its helpers
//!   gcra.rs           gcra.lua, gcra_debt.lua, gcra_checks.lua (the lean checks)
//!   fixed_window.rs   fixed_window.lua
//!   sliding_window.rs sliding_window.lua
//!   sliding_log.rs    sliding_log.lua
//!   lockout.rs        lockout.lua: a policy's lockout after a breach, any algorithm
//! ```
//!
//! The Rust twins are pure functions of (parameters, stored state, now, operation) with no
//! clock and no I/O. The token bucket is GCRA counted in whole tokens (the same figures to the
//! microsecond), so it runs GCRA's code.
//!
//! Every function mirrors its Lua counterpart step by step, in integer microseconds (`i64`;
//! every value stays below 2^53, so Lua's doubles hold them exactly) and, where the sliding
//! window counter needs a fraction, the same `f64` expression evaluated in the same order,
//! so both stores give bit-identical answers. A check is two-phase: every policy *decides*
//! first, and only if all allow (and the cost is not zero) does every policy *apply* its
//! write. That is what makes several policies all-or-nothing. An any-of operation
//! ([`RateOp::AnyOf`]) decides every policy the same way, then applies only the first that
//! allows.
//!
//! Conventions shared by all five:
//! * `cost == 0` is a peek: the decision a cost-1 request would get, with nothing written.
//! * State that is past its reset time behaves exactly like no state, so a key that
//!   outlives its ttl (a slow expiry, an injected clock) never changes an answer.
//! * A clock that steps back never makes anything pass earlier.
//! * State carries the unit it was counted in, so a subject whose rate changed keeps what it
//!   used (see each algorithm); the first operation under the new rate (a peek too) rewrites
//!   it in the new unit, meaning the same, so from then on it drains at the new rate.
//!
//! A policy with a lockout (`lockout.rs`) has a second key, right after its own: the
//! subject's block and remembered breaches. A check decides every policy, then masks the
//! decision of each policy whose subject is blocked (denied, nothing left); if the check is
//! not applied and it is an attempt (a check of cost above zero, or an up-to that fits
//! nothing), each lockout policy that denied while not blocked records a breach and answers
//! blocked. A reservation under a lockout is a check, and a reset deletes the lock too.

mod fixed_window;
mod gcra;
mod lockout;
pub(crate) mod script;
mod sliding_log;
mod sliding_window;

use std::collections::VecDeque;

pub(crate) use self::lockout::LockoutParams;

/// The algorithms, as the script numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ScriptAlgorithm {
    Gcra,
    TokenBucket,
    FixedWindow,
    SlidingWindow,
    SlidingLog,
}

impl ScriptAlgorithm {
    /// The algorithm's number in the script's ARGV.
    pub(super) fn code(self) -> u8 {
        match self {
            Self::Gcra => 1,
            Self::TokenBucket => 2,
            Self::FixedWindow => 3,
            Self::SlidingWindow => 4,
            Self::SlidingLog => 5,
        }
    }
}

/// One policy as the stores see it. For GCRA and the token bucket, `unit_us` is the emission
/// interval and `count` the burst; for the window algorithms, `unit_us` is the period and
/// `count` the limit. `keep_us` is how long a sliding log outlives its newest entry (at
/// least its period; see `sliding_log.rs`); the other algorithms ignore it. With a
/// `lockout`, the policy has two keys: its own, then its lock's (see `lockout.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PolicyParams {
    pub(crate) kind: ScriptAlgorithm,
    pub(crate) unit_us: i64,
    pub(crate) count: i64,
    pub(crate) keep_us: i64,
    pub(crate) lockout: Option<LockoutParams>,
}

impl PolicyParams {
    /// How long a sliding log outlives its newest entry: `keep_us`, and at least the period.
    pub(crate) fn log_keep_us(&self) -> i64 {
        self.keep_us.max(self.unit_us)
    }
}

/// What one rate-limit operation does to a subject's policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RateOp {
    /// Consume `cost` units if every policy allows; 0 peeks (decides for a cost of 1,
    /// consumes nothing).
    Check { cost: u32 },
    /// As a check, but a request of GCRA-family policies that would pass within
    /// `max_wait_us` consumes now, at the moment it will pass, and is told to wait.
    Reserve { cost: u32, max_wait_us: u64 },
    /// Give back units (never fuller than full), then peek.
    Refund(u32),
    /// Charge units (never beyond empty), then peek.
    Penalize(u32),
    /// Delete every policy's state (a lockout's too), then peek.
    Reset,
    /// Consume as many units as every policy allows now, at most `max` (at least 1), in one
    /// step: the largest `k ≤ max` that a check of cost `k` would pass. None fit: a peek.
    CheckUpTo { max: u32 },
    /// Any of the policies: each decides in order without writing, and the first that allows
    /// is charged `cost`, alone; if none allows nothing is written (and, for a cost above
    /// zero, lockouts breach as for a refused check). 0 peeks.
    AnyOf { cost: u32 },
}

impl RateOp {
    /// The op's (code, amount, extra) in the script's ARGV.
    pub(super) fn encode(self) -> (u8, u32, u64) {
        match self {
            Self::Check { cost } => (0, cost, 0),
            Self::Reserve { cost, max_wait_us } => (1, cost, max_wait_us),
            Self::Refund(n) => (2, n, 0),
            Self::Penalize(n) => (3, n, 0),
            Self::Reset => (4, 0, 0),
            Self::CheckUpTo { max } => (5, max, 0),
            Self::AnyOf { cost } => (6, cost, 0),
        }
    }

    /// Whether this op may consume (and so make a cached denial's figures stale).
    pub(crate) fn consumes(self) -> bool {
        match self {
            Self::Check { cost } | Self::Reserve { cost, .. } | Self::AnyOf { cost } => cost > 0,
            Self::Refund(_) | Self::Penalize(_) | Self::Reset | Self::CheckUpTo { .. } => true,
        }
    }
}

/// Test-only: one rate-limit operation decided at `now_us` (µs since the epoch) instead of the
/// store's clock.
#[cfg(feature = "test-util")]
pub(crate) struct RateAt<'a> {
    pub(crate) req: &'a RateRequest<'a>,
    pub(crate) now_us: u64,
}

/// One rate-limit operation: per policy, its key, and its lock's key when it has a lockout
/// (in the order of `params`); all keys in one hash slot.
pub(crate) struct RateRequest<'a> {
    pub(crate) keys: &'a [String],
    pub(crate) params: &'a [PolicyParams],
    pub(crate) op: RateOp,
}

/// The answer to a rate-limit operation: whether a check or reservation was applied (every
/// policy allowed and the cost was above zero; for [`RateOp::AnyOf`], one policy allowed and
/// was charged), how long a reservation waits for its turn (µs), how many units it consumed,
/// which policy alone was charged, and each policy's verdict, in request order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RateReply {
    pub(crate) applied: bool,
    pub(crate) wait_us: u64,
    /// Units consumed: an applied check's or reservation's cost, a [`RateOp::CheckUpTo`]'s
    /// grant; 0 otherwise.
    pub(crate) granted: u32,
    /// For an applied [`RateOp::AnyOf`], the index of the one policy charged; `None` for
    /// every other op (an applied one charged every policy).
    pub(crate) charged: Option<usize>,
    pub(crate) verdicts: Vec<Verdict>,
}

/// One policy's verdict; times in microseconds. `locked_us` is how long the subject's block
/// under the policy's lockout lasts from now (0: not blocked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub(crate) allowed: bool,
    pub(crate) remaining: u64,
    pub(crate) retry_us: u64,
    pub(crate) reset_us: u64,
    pub(crate) locked_us: u64,
}

impl Verdict {
    /// From the algorithms' signed arithmetic; negatives (never produced) clamp to zero.
    pub(crate) fn new(allowed: bool, remaining: i64, retry_us: i64, reset_us: i64) -> Self {
        let clamp = |x: i64| u64::try_from(x).unwrap_or(0);
        Self {
            allowed,
            remaining: clamp(remaining),
            retry_us: clamp(retry_us),
            reset_us: clamp(reset_us),
            locked_us: 0,
        }
    }

    /// The verdict of a subject blocked for `locked_us` more.
    pub(crate) fn locked(mut self, locked_us: i64) -> Self {
        self.locked_us = u64::try_from(locked_us).unwrap_or(0);
        self
    }
}

/// What the store keeps for one policy and subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    /// GCRA and the token bucket: the theoretical arrival time, and the emission interval it
    /// was counted in.
    Tat { tat: i64, interval: i64 },
    /// Fixed window: the window's index (`now / period`), its count, and the period.
    Window { index: i64, count: i64, period: i64 },
    /// Sliding window counter: the current window's index, the previous and current counts,
    /// and the period.
    Sliding {
        index: i64,
        prev: i64,
        curr: i64,
        period: i64,
    },
    /// Sliding log: the allowed requests' times, ascending.
    Log(VecDeque<i64>),
    /// A lockout's key: the end of the subject's latest block and how many breaches are
    /// remembered.
    Lock { until: i64, breaches: i64 },
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
    /// Store this state (none: delete it).
    Replace(Option<State>),
    /// Sliding log: add `cost` entries at `now`, cap.
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
    match p.kind {
        ScriptAlgorithm::Gcra | ScriptAlgorithm::TokenBucket => gcra::decide(p, state, now, cost),
        ScriptAlgorithm::FixedWindow => fixed_window::decide(p, state, now, cost),
        ScriptAlgorithm::SlidingWindow => sliding_window::decide(p, state, now, cost),
        ScriptAlgorithm::SlidingLog => sliding_log::decide(p, state, now, cost),
    }
}

/// Applies one policy's write (phase two).
fn apply(p: &PolicyParams, slot: &mut Option<State>, write: Write, now: i64, cost: i64) {
    match write {
        Write::Replace(state) => *slot = state,
        Write::LogAppend => sliding_log::append(p.count, slot, now, cost),
    }
}

/// Gives back (`delta < 0`) or charges (`delta > 0`) units of one policy.
fn adjust(p: &PolicyParams, slot: &mut Option<State>, now: i64, delta: i64) {
    let (unit, count) = (p.unit_us, p.count);
    match p.kind {
        ScriptAlgorithm::Gcra | ScriptAlgorithm::TokenBucket => {
            gcra::adjust(unit, count, slot, now, delta)
        }
        ScriptAlgorithm::FixedWindow => fixed_window::adjust(unit, count, slot, now, delta),
        ScriptAlgorithm::SlidingWindow => sliding_window::adjust(unit, count, slot, now, delta),
        ScriptAlgorithm::SlidingLog => sliding_log::adjust(unit, count, slot, now, delta),
    }
}

/// One operation over several policies, as `ratelimit.lua` runs it. `states` holds each
/// key's state (per policy, its own, then its lock's when it has a lockout; updated in
/// place); returns the reply and, per key, the time its state now expires (its reset time),
/// or `None` if it was not written.
pub(crate) fn run(
    params: &[PolicyParams],
    states: &mut [Option<State>],
    now: i64,
    op: RateOp,
) -> (RateReply, Vec<Option<i64>>) {
    // Each policy's own state, and its lock's.
    let mut counters = Vec::with_capacity(params.len());
    let mut locks = Locks {
        states: Vec::with_capacity(params.len()),
        written: vec![None; params.len()],
    };
    let mut slots = states.iter_mut();
    for p in params {
        counters.push(slots.next().and_then(Option::take));
        locks.states.push(match p.lockout {
            Some(_) => slots.next().and_then(Option::take),
            None => None,
        });
    }
    // A state counted in another unit is rewritten in the current one first, as the Lua does
    // when it reads one.
    let normalized: Vec<Option<i64>> = params
        .iter()
        .zip(counters.iter_mut())
        .map(|(p, slot)| {
            normalize(p, slot, now).then(|| now + decide(p, slot.as_ref(), now, 0).before.reset)
        })
        .collect();
    let (reply, written) = operate(params, &mut counters, &mut locks, now, op);
    let mut expiries = Vec::with_capacity(states.len());
    let mut slots = states.iter_mut();
    let policies = params
        .iter()
        .zip(counters)
        .zip(written.into_iter().zip(normalized))
        .zip(locks.states.into_iter().zip(locks.written));
    for (((p, counter), (w, n)), (lock, lock_written)) in policies {
        if let Some(slot) = slots.next() {
            *slot = counter;
            expiries.push(w.or(n));
        }
        if p.lockout.is_some()
            && let Some(slot) = slots.next()
        {
            *slot = lock;
            expiries.push(lock_written);
        }
    }
    (reply, expiries)
}

/// The policies' locks during one operation: each policy's lock state (none without a
/// lockout), and when a written one expires.
struct Locks {
    states: Vec<Option<State>>,
    written: Vec<Option<i64>>,
}

/// Decides one policy (phase one) with its lock: the algorithm's decision, masked while the
/// subject is blocked; the block's end (0: none) and the breaches remembered.
fn decide_locked(
    p: &PolicyParams,
    state: Option<&State>,
    lock: Option<&State>,
    now: i64,
    cost: i64,
) -> (Outcome, i64, i64) {
    let outcome = decide(p, state, now, cost);
    let Some(lockout) = &p.lockout else {
        return (outcome, 0, 0);
    };
    let (until, breaches) = lockout::read(lockout, lock, now);
    if until > now {
        (lockout::mask(outcome, until - now), until, breaches)
    } else {
        (outcome, 0, breaches)
    }
}

/// Rewrites, in the same meaning, a state counted in another unit than `p`'s (the subject's
/// rate changed); answers whether it did.
fn normalize(p: &PolicyParams, slot: &mut Option<State>, now: i64) -> bool {
    let unit = p.unit_us;
    let converted = match (p.kind, slot.as_ref()) {
        (
            ScriptAlgorithm::Gcra | ScriptAlgorithm::TokenBucket,
            Some(State::Tat { tat, interval }),
        ) if *interval != unit && *tat > now => {
            gcra::state(gcra::tat(slot.as_ref(), now, unit), now, unit)
        }
        (ScriptAlgorithm::FixedWindow, Some(State::Window { period, .. })) if *period != unit => {
            fixed_window::normalized(unit, slot.as_ref(), now)
        }
        (ScriptAlgorithm::SlidingWindow, Some(State::Sliding { period, .. }))
            if *period != unit =>
        {
            sliding_window::normalized(unit, slot.as_ref(), now)
        }
        _ => return false,
    };
    *slot = converted;
    true
}

fn operate(
    params: &[PolicyParams],
    states: &mut [Option<State>],
    locks: &mut Locks,
    now: i64,
    op: RateOp,
) -> (RateReply, Vec<Option<i64>>) {
    match op {
        RateOp::Check { cost } => check(params, states, locks, now, cost, cost > 0),
        RateOp::Reserve { cost, max_wait_us } => {
            let family = params.iter().all(|p| {
                matches!(p.kind, ScriptAlgorithm::Gcra | ScriptAlgorithm::TokenBucket)
                    && p.lockout.is_none()
            });
            if cost > 0 && family {
                reserve(params, states, now, i64::from(cost), max_wait_us)
            } else {
                check(params, states, locks, now, cost, cost > 0)
            }
        }
        RateOp::CheckUpTo { max } => check_up_to(params, states, locks, now, max),
        RateOp::AnyOf { cost } => any_of(params, states, locks, now, cost),
        RateOp::Refund(_) | RateOp::Penalize(_) | RateOp::Reset => {
            let delta = match op {
                RateOp::Refund(n) => -i64::from(n),
                RateOp::Penalize(n) => i64::from(n),
                _ => 0,
            };
            let mut written = Vec::with_capacity(params.len());
            for ((p, slot), lock) in params.iter().zip(states.iter_mut()).zip(&mut locks.states) {
                if op == RateOp::Reset {
                    *slot = None;
                    *lock = None;
                } else if delta != 0 {
                    adjust(p, slot, now, delta);
                } else {
                    written.push(None);
                    continue;
                }
                if p.kind == ScriptAlgorithm::SlidingLog {
                    // As the script: a charge appends (and sets the ttl), a refund only takes
                    // entries away (the ttl stays).
                    written.push(if delta > 0 {
                        sliding_log::expires(p.log_keep_us(), slot.as_ref())
                    } else {
                        None
                    });
                    continue;
                }
                let reset = decide(p, slot.as_ref(), now, 0).before.reset;
                written.push(Some(now + reset));
            }
            let (reply, _) = check(params, states, locks, now, 0, false);
            (reply, written)
        }
    }
}

/// A whole check over several policies: decide all (masked by their locks), then apply all
/// if all allow and `cost > 0`. If nothing is applied and the check is an `attempt`, each
/// lockout policy that denied while not blocked records a breach and answers blocked.
fn check(
    params: &[PolicyParams],
    states: &mut [Option<State>],
    locks: &mut Locks,
    now: i64,
    cost: u32,
    attempt: bool,
) -> (RateReply, Vec<Option<i64>>) {
    let outcomes = decide_all(params, states, locks, now, cost);
    let applied = cost > 0 && outcomes.iter().all(|(o, _, _)| o.allowed);
    let decided = Decided {
        outcomes,
        charge: if applied {
            Charge::Every
        } else {
            Charge::Nothing
        },
        breach: attempt && !applied,
    };
    settle(params, states, locks, now, cost, decided)
}

/// Any of the policies: each decides in order (masked by its lock) without writing; the
/// first that allows is charged `cost` (when above zero) and answers its figures after, the
/// others their figures before. If none allows and the cost is above zero, each lockout
/// policy that denied while not blocked records a breach and answers blocked, as for a
/// refused check.
fn any_of(
    params: &[PolicyParams],
    states: &mut [Option<State>],
    locks: &mut Locks,
    now: i64,
    cost: u32,
) -> (RateReply, Vec<Option<i64>>) {
    let outcomes = decide_all(params, states, locks, now, cost);
    let first = outcomes.iter().position(|(o, _, _)| o.allowed);
    let charge = match first {
        Some(i) if cost > 0 => Charge::One(i),
        _ => Charge::Nothing,
    };
    let decided = Decided {
        outcomes,
        charge,
        breach: cost > 0 && first.is_none(),
    };
    settle(params, states, locks, now, cost, decided)
}

/// What a check decided, before anything is written.
struct Decided {
    /// Each policy's outcome, its block's end and its breaches (`decide_all`).
    outcomes: Vec<(Outcome, i64, i64)>,
    charge: Charge,
    /// Whether each lockout policy that denied while not blocked records a breach.
    breach: bool,
}

/// Which policies a decision charges.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Charge {
    Nothing,
    /// Every policy (a whole check that all allowed).
    Every,
    /// This one alone (the first of an any-of check that allowed).
    One(usize),
}

impl Charge {
    fn pays(self, policy: usize) -> bool {
        match self {
            Self::Nothing => false,
            Self::Every => true,
            Self::One(i) => i == policy,
        }
    }
}

/// Each policy's decision of `cost` (its outcome, its block's end, its breaches), masked by
/// its lock, without writing.
fn decide_all(
    params: &[PolicyParams],
    states: &[Option<State>],
    locks: &Locks,
    now: i64,
    cost: u32,
) -> Vec<(Outcome, i64, i64)> {
    params
        .iter()
        .zip(states)
        .zip(&locks.states)
        .map(|((p, state), lock)| {
            decide_locked(p, state.as_ref(), lock.as_ref(), now, i64::from(cost))
        })
        .collect()
}

/// Writes what was `decided`: the policies its charge names pay `cost` and answer their
/// figures after, the others their figures before; when it says so, each lockout policy that
/// denied while not blocked records a breach and answers blocked. Answers the reply and each
/// policy's new expiry (`None`: its state was not written).
fn settle(
    params: &[PolicyParams],
    states: &mut [Option<State>],
    locks: &mut Locks,
    now: i64,
    cost: u32,
    decided: Decided,
) -> (RateReply, Vec<Option<i64>>) {
    let Decided {
        outcomes,
        charge,
        breach,
    } = decided;
    let mut verdicts = Vec::with_capacity(outcomes.len());
    let mut expiries = Vec::with_capacity(outcomes.len());
    let policies = params
        .iter()
        .zip(states.iter_mut())
        .zip(locks.states.iter_mut().zip(&mut locks.written));
    for (i, (((p, slot), (lock, lock_written)), (mut outcome, mut until, breaches))) in
        policies.zip(outcomes).enumerate()
    {
        if let Some(lockout) = &p.lockout
            && breach
            && !outcome.allowed
            && until == 0
        {
            let (state, new_until, expires) = lockout::breach(lockout, breaches, now);
            *lock = Some(state);
            *lock_written = Some(expires);
            until = new_until;
            outcome = lockout::mask(outcome, until - now);
        }
        let figures = match outcome.after {
            Some((after, write)) if charge.pays(i) => {
                apply(p, slot, write, now, i64::from(cost));
                expiries.push(if p.kind == ScriptAlgorithm::SlidingLog {
                    sliding_log::expires(p.log_keep_us(), slot.as_ref())
                } else {
                    Some(now + after.reset)
                });
                after
            }
            _ => {
                expiries.push(None);
                outcome.before
            }
        };
        verdicts.push(
            Verdict::new(
                outcome.allowed,
                figures.remaining,
                outcome.retry,
                figures.reset,
            )
            .locked(if until > now { until - now } else { 0 }),
        );
    }
    let applied = charge != Charge::Nothing;
    (
        RateReply {
            applied,
            wait_us: 0,
            granted: if applied { cost } else { 0 },
            charged: match charge {
                Charge::One(i) => Some(i),
                _ => None,
            },
            verdicts,
        },
        expiries,
    )
}

/// A check of as many units as every policy allows now, at most `max`: each policy's
/// `remaining` is exactly the largest cost it passes now (see `decide`; 0 while blocked), so
/// the grant is the least of them; a grant of 0 is a peek (it answers when one unit would
/// pass), but an attempt: a lockout policy that fits nothing is breached.
fn check_up_to(
    params: &[PolicyParams],
    states: &mut [Option<State>],
    locks: &mut Locks,
    now: i64,
    max: u32,
) -> (RateReply, Vec<Option<i64>>) {
    let fits = params
        .iter()
        .zip(states.iter())
        .zip(&locks.states)
        .map(|((p, state), lock)| {
            decide_locked(p, state.as_ref(), lock.as_ref(), now, 0)
                .0
                .before
                .remaining
        })
        .fold(i64::from(max), i64::min);
    check(
        params,
        states,
        locks,
        now,
        u32::try_from(fits).unwrap_or(0),
        true,
    )
}

/// A reservation over GCRA-family policies: the request passes at the first moment every
/// policy allows it; if that is within `max_wait_us`, every policy consumes it at that moment.
fn reserve(
    params: &[PolicyParams],
    states: &mut [Option<State>],
    now: i64,
    cost: i64,
    max_wait_us: u64,
) -> (RateReply, Vec<Option<i64>>) {
    let tats: Vec<i64> = params
        .iter()
        .zip(states.iter())
        .map(|(p, s)| gcra::tat(s.as_ref(), now, p.unit_us))
        .collect();
    let allow_at = params
        .iter()
        .zip(&tats)
        .map(|(p, &tat)| tat + cost * p.unit_us - p.unit_us * p.count)
        .fold(now, i64::max);
    let wait = allow_at - now;
    let granted = u64::try_from(wait).is_ok_and(|w| w <= max_wait_us);
    let mut verdicts = Vec::with_capacity(params.len());
    let mut expiries = Vec::with_capacity(params.len());
    for ((p, slot), &tat) in params.iter().zip(states.iter_mut()).zip(&tats) {
        let (interval, burst) = (p.unit_us, p.count);
        if granted {
            let new_tat = tat.max(allow_at) + cost * interval;
            *slot = gcra::state(new_tat, now, interval);
            let after = gcra::figures(new_tat, now, interval, burst);
            expiries.push(Some(new_tat));
            verdicts.push(Verdict::new(true, after.remaining, 0, after.reset));
        } else {
            let before = gcra::figures(tat, now, interval, burst);
            let retry = non_negative(tat + cost * interval - interval * burst - now);
            expiries.push(None);
            verdicts.push(Verdict::new(
                retry == 0,
                before.remaining,
                retry,
                before.reset,
            ));
        }
    }
    let reply = RateReply {
        applied: granted,
        wait_us: u64::try_from(wait).unwrap_or(0),
        granted: if granted {
            u32::try_from(cost).unwrap_or(0)
        } else {
            0
        },
        charged: None,
        verdicts,
    };
    (reply, expiries)
}

/// `max(x, 0)`.
fn non_negative(x: i64) -> i64 {
    x.max(0)
}
