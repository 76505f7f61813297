//! The reference model the stores are checked against: each algorithm reduced to the one
//! predicate that defines it, "given every request applied so far, may a request of cost
//! `k` pass at time `t`?", over the full history (no ttl, no compaction, no encoding).
//!
//! Everything a decision reports is derived from that predicate by search, independently of
//! the closed forms in the Lua and Rust implementations:
//! * `remaining` = the largest `k ≤ limit` that may pass now;
//! * `retry_after` = the earliest `Δ > 0` at which the request may pass (binary search: the
//!   predicate only turns from false to true as time goes on without new requests);
//! * `reset_after` = the earliest `Δ ≥ 0` at which a full-limit request may pass.
//!
//! The token bucket is modelled by GCRA: with whole tokens and a refill of one per emission
//! interval they are the same algorithm, so the bucket's two-field state must reproduce the
//! TAT's answers exactly.
//!
//! The history holds more than checks: a refund takes back the newest units still counted
//! (GCRA: moves the TAT back, never below now), a penalty adds units at its moment, at most
//! what is left (GCRA: never past now + tolerance), a reset forgets everything, and a
//! reservation (GCRA family) applies its cost at the moment it will pass. A check "up to n"
//! takes the largest `k ≤ n` the predicate passes under every policy. For GCRA a change of
//! rate is an event too: the debt left at each event is converted to the interval in force
//! (rounded up, in the stores' double expression), which is the contract of a rate change.
//!
//! A policy's lockout (issue 28 §2) is a second predicate on top: a check of cost > 0 (or a
//! check up to n that fits nothing) that is not applied breaches every lockout policy that
//! denied while its subject was not blocked: blocked until `t + step`, the step of the
//! breach's number among those remembered (a block is remembered until `memory` past its
//! end). While blocked a policy denies, has nothing left, and answers the later of the
//! block's end and its own figures. A reset forgets the block; a reservation is a check.
//!
//! An any-of check (issue 28 §4) judges every policy the same way, then applies the request
//! to the first policy that allows it, alone; when none does, nothing is applied and the
//! lockout policies (all of which denied) are breached as for a refused check.

use distlock::ratelimit::{Algorithm, Policy};

/// One policy's parameters in µs.
#[derive(Debug, Clone)]
pub struct ModelPolicy {
    pub algorithm: Algorithm,
    /// Burst (GCRA, token bucket) or limit per window.
    pub limit: i64,
    /// Emission interval (GCRA, token bucket) or period (windows), µs.
    pub unit: i64,
    /// The lockout's steps and memory, µs.
    pub lockout: Option<(Vec<i64>, i64)>,
}

/// The model's verdicts and a decision's policies, side by side, once they are known to be
/// as many: a decision that answered one policy fewer (or more) than the model would pass a
/// bare `zip` on the ones both have.
#[track_caller]
pub fn paired<'a, W, G>(
    want: &'a [W],
    got: &'a [G],
    context: &str,
) -> impl Iterator<Item = (&'a W, &'a G)> {
    assert_eq!(
        got.len(),
        want.len(),
        "{context}: the decision has {} policies, the model {}",
        got.len(),
        want.len()
    );
    want.iter().zip(got)
}

/// The algorithms the model knows; any other is refused where a policy enters it, so that a
/// new algorithm cannot be judged by another one's rules without anyone noticing.
#[track_caller]
fn known(algorithm: Algorithm) -> Algorithm {
    match algorithm {
        Algorithm::Gcra
        | Algorithm::TokenBucket
        | Algorithm::FixedWindow
        | Algorithm::SlidingWindow
        | Algorithm::SlidingLog => algorithm,
        other => panic!(
            "the reference model does not know {other:?}: add its rules to \
             tests/ratelimit/model.rs before checking it"
        ),
    }
}

impl ModelPolicy {
    pub fn of(policy: &Policy) -> Self {
        let rate = policy.rate();
        let unit = match known(policy.algorithm()) {
            Algorithm::Gcra | Algorithm::TokenBucket => rate.emission_interval(),
            _ => rate.period(),
        };
        let micros = |d: std::time::Duration| i64::try_from(d.as_micros()).expect("fits");
        Self {
            algorithm: policy.algorithm(),
            limit: i64::from(policy.limit()),
            unit: micros(unit),
            lockout: policy.lockout().map(|lockout| {
                (
                    lockout.steps().iter().copied().map(micros).collect(),
                    micros(lockout.memory()),
                )
            }),
        }
    }

    /// The longest any wait can be, to bound the searches.
    fn horizon(&self) -> i64 {
        match self.algorithm {
            Algorithm::Gcra | Algorithm::TokenBucket => self.limit * self.unit + 1,
            _ => 2 * self.unit + 1,
        }
    }
}

/// What the model says for one policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    pub allowed: bool,
    pub remaining: i64,
    pub retry_us: i64,
    pub reset_us: i64,
    /// What is left of the subject's block under the policy's lockout (0: not blocked).
    pub locked_us: i64,
}

impl Expected {
    /// As blocked for `left` more µs.
    fn blocked(self, left: i64) -> Self {
        Self {
            allowed: false,
            remaining: 0,
            retry_us: self.retry_us.max(left),
            reset_us: self.reset_us.max(left),
            locked_us: left,
        }
    }
}

/// One policy's history: the units applied `(time, cost)`, in time order (windows and the log),
/// or the TAT and the interval it was counted in (GCRA and the token bucket, a fold of the
/// same history).
#[derive(Debug, Clone)]
pub struct Model {
    pub policy: ModelPolicy,
    applied: Vec<(i64, i64)>,
    /// GCRA family: (tat, interval), or none.
    tat: Option<(i64, i64)>,
    /// The latest block's end and the breaches that led to it.
    lock: Option<(i64, i64)>,
}

impl Model {
    pub fn new(policy: ModelPolicy) -> Self {
        Self {
            policy,
            applied: Vec::new(),
            tat: None,
            lock: None,
        }
    }

    /// The block's end (0: none) and the breaches remembered at `t`.
    fn lock_at(&self, t: i64) -> (i64, i64) {
        match (&self.policy.lockout, self.lock) {
            (Some((_, memory)), Some((until, breaches))) if t < until + memory => (until, breaches),
            _ => (0, 0),
        }
    }

    /// The verdict on `cost` at `t`, with the lockout: blocked, or the policy's own.
    pub fn judge_locked(&self, t: i64, cost: i64) -> Expected {
        let own = self.judge(t, cost);
        match self.lock_at(t) {
            (until, _) if until > t => own.blocked(until - t),
            _ => own,
        }
    }

    /// A breach at `t` of a policy whose own verdict was `own`: blocked for the step of its
    /// number.
    fn breach(&mut self, t: i64, own: Expected) -> Expected {
        let (steps, _) = self.policy.lockout.clone().expect("a lockout");
        let (_, breaches) = self.lock_at(t);
        let n = breaches + 1;
        let step = steps[usize::try_from(n - 1)
            .expect("positive")
            .min(steps.len() - 1)];
        self.lock = Some((t + step, n));
        own.blocked(step)
    }

    fn is_gcra(&self) -> bool {
        matches!(
            self.policy.algorithm,
            Algorithm::Gcra | Algorithm::TokenBucket
        )
    }

    /// GCRA: the TAT as of `t` in the current interval (at least `t`): the stored debt
    /// converted to the current interval when it was counted in another one.
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    pub fn tat_at(&self, t: i64) -> i64 {
        match self.tat {
            Some((tat, was)) if tat > t => {
                let debt = tat - t;
                if was == self.policy.unit {
                    tat
                } else {
                    t + (debt as f64 * self.policy.unit as f64 / was as f64).ceil() as i64
                }
            }
            _ => t,
        }
    }

    fn set_tat(&mut self, tat: i64, t: i64) {
        self.tat = (tat > t).then_some((tat, self.policy.unit));
    }

    /// The defining predicate.
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    pub fn allows(&self, t: i64, k: i64) -> bool {
        let p = &self.policy;
        match p.algorithm {
            Algorithm::Gcra | Algorithm::TokenBucket => {
                self.tat_at(t) + k * p.unit - p.limit * p.unit <= t
            }
            Algorithm::FixedWindow => self.window_count(t) + k <= p.limit,
            Algorithm::SlidingWindow => self.sliding_used(t) + k <= p.limit,
            Algorithm::SlidingLog => self.log_count(t) + k <= p.limit,
            other => panic!("no model for {other:?}"),
        }
    }

    fn window_count(&self, t: i64) -> i64 {
        let w = t / self.policy.unit;
        self.sum(|at| at / self.policy.unit == w)
    }

    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    fn sliding_used(&self, t: i64) -> i64 {
        let p = &self.policy;
        let w = t / p.unit;
        let curr: i64 = self.sum(|at| at / p.unit == w);
        let prev: i64 = self.sum(|at| at / p.unit == w - 1);
        let e = t - w * p.unit;
        let weighted = (prev as f64 * (p.unit - e) as f64 / p.unit as f64).ceil() as i64;
        weighted + curr
    }

    fn log_count(&self, t: i64) -> i64 {
        self.sum(|at| at > t - self.policy.unit)
    }

    fn sum(&self, pick: impl Fn(i64) -> bool) -> i64 {
        self.applied
            .iter()
            .filter(|(at, _)| pick(*at))
            .map(|(_, c)| c)
            .sum()
    }

    /// The earliest `t' ≥ from` at which `k` may pass.
    fn earliest(&self, from: i64, k: i64) -> i64 {
        let mut hi = from + self.policy.horizon() + (self.tat_at(from) - from);
        assert!(
            self.allows(hi, k),
            "model: {k} never passes within the horizon"
        );
        let mut lo = from;
        if self.allows(lo, k) {
            return lo;
        }
        // allows(lo) is false, allows(hi) is true.
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.allows(mid, k) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    }

    fn remaining(&self, t: i64) -> i64 {
        (0..=self.policy.limit)
            .rev()
            .find(|&k| self.allows(t, k))
            .unwrap_or(0)
    }

    /// This policy's own verdict on `cost` at `t` (figures before anything is applied).
    pub fn judge(&self, t: i64, cost: i64) -> Expected {
        let need = cost.max(1);
        let allowed = self.allows(t, need);
        Expected {
            allowed,
            remaining: self.remaining(t),
            retry_us: if allowed {
                0
            } else {
                self.earliest(t, need) - t
            },
            reset_us: self.earliest(t, self.policy.limit) - t,
            locked_us: 0,
        }
    }

    /// `cost` units pass at `t` (for a reservation, `t` is its turn).
    pub fn apply(&mut self, t: i64, cost: i64) {
        if self.is_gcra() {
            let tat = self.tat_at(t) + cost * self.policy.unit;
            self.set_tat(tat, t);
        } else {
            self.applied.push((t, cost));
        }
    }

    /// A refund of `n` at `t`: the newest units still counted go.
    pub fn refund(&mut self, t: i64, n: i64) {
        if self.is_gcra() {
            let tat = (self.tat_at(t) - n * self.policy.unit).max(t);
            self.set_tat(tat, t);
            return;
        }
        let counted = |at: i64| match self.policy.algorithm {
            Algorithm::FixedWindow => at / self.policy.unit == t / self.policy.unit,
            Algorithm::SlidingWindow => at / self.policy.unit >= t / self.policy.unit - 1,
            _ => at > t - self.policy.unit,
        };
        let mut left = n;
        for entry in self.applied.iter_mut().rev() {
            if left == 0 || !counted(entry.0) {
                break;
            }
            let take = left.min(entry.1);
            entry.1 -= take;
            left -= take;
        }
        self.applied.retain(|(_, c)| *c > 0);
    }

    /// A penalty of `n` at `t`: at most what is left, applied at `t`.
    pub fn penalize(&mut self, t: i64, n: i64) {
        let p = self.policy.clone();
        if self.is_gcra() {
            let tat = self.tat_at(t);
            let moved = (tat + n * p.unit).min(t + p.limit * p.unit).max(tat);
            self.set_tat(moved, t);
            return;
        }
        let used = match p.algorithm {
            Algorithm::FixedWindow => self.window_count(t),
            Algorithm::SlidingWindow => self.sliding_used(t),
            _ => self.log_count(t),
        };
        let add = n.min((p.limit - used).max(0));
        if add > 0 {
            self.applied.push((t, add));
        }
    }

    pub fn reset(&mut self) {
        self.applied.clear();
        self.tat = None;
        self.lock = None;
    }

    /// GCRA: a TAT counted in another interval is rewritten in the current one, as the stores
    /// do whenever they read it (every operation under the new rate).
    pub fn normalize(&mut self, t: i64) {
        if let Some((_, was)) = self.tat
            && was != self.policy.unit
        {
            let tat = self.tat_at(t);
            self.set_tat(tat, t);
        }
    }
}

/// Several policies checked all-or-nothing, as a limiter does.
pub struct Models(pub Vec<Model>);

impl Models {
    pub fn of(policies: &[Policy]) -> Self {
        Self(
            policies
                .iter()
                .map(|p| Model::new(ModelPolicy::of(p)))
                .collect(),
        )
    }

    /// Figures after an adjustment: every policy as a peek.
    pub fn peek(&self, t: i64) -> Vec<Expected> {
        self.0.iter().map(|m| m.judge_locked(t, 0)).collect()
    }

    fn has_lockout(&self) -> bool {
        self.0.iter().any(|m| m.policy.lockout.is_some())
    }

    fn normalize(&mut self, t: i64) {
        for m in &mut self.0 {
            m.normalize(t);
        }
    }

    pub fn refund(&mut self, t: i64, n: i64) -> Vec<Expected> {
        self.normalize(t);
        for m in &mut self.0 {
            m.refund(t, n);
        }
        self.peek(t)
    }

    pub fn penalize(&mut self, t: i64, n: i64) -> Vec<Expected> {
        self.normalize(t);
        for m in &mut self.0 {
            m.penalize(t, n);
        }
        self.peek(t)
    }

    pub fn reset(&mut self, t: i64) -> Vec<Expected> {
        for m in &mut self.0 {
            m.reset();
        }
        self.peek(t)
    }

    /// A reservation of `cost` at `t` on GCRA-family policies: its turn is the first moment
    /// every policy allows it; within `max_wait` every policy applies it then, and the
    /// figures are those after, as of `t`. Returns (granted, wait, verdicts).
    pub fn reserve(&mut self, t: i64, cost: i64, max_wait: i64) -> (bool, i64, Vec<Expected>) {
        if self.has_lockout() {
            let verdicts = self.check(t, cost);
            return (cost > 0 && verdicts.iter().all(|v| v.allowed), 0, verdicts);
        }
        self.normalize(t);
        let turn = self
            .0
            .iter()
            .map(|m| m.earliest(t, cost))
            .max()
            .unwrap_or(t);
        let wait = turn - t;
        if wait > max_wait {
            return (
                false,
                wait,
                self.0.iter().map(|m| m.judge(t, cost)).collect(),
            );
        }
        let mut verdicts = Vec::with_capacity(self.0.len());
        for m in &mut self.0 {
            let tat = m.tat_at(t).max(turn) + cost * m.policy.unit;
            m.set_tat(tat, t);
            let mut after = m.judge(t, 0);
            after.allowed = true;
            after.retry_us = 0;
            verdicts.push(after);
        }
        (true, wait, verdicts)
    }

    /// A check of as many units as every policy allows at `t`, at most `max`: the largest
    /// `k ≤ max` that the predicate passes under every policy (found by search, not from the
    /// stores' `remaining`), then a check of `k` (a peek when it is 0). Returns (k, verdicts).
    pub fn check_up_to(&mut self, t: i64, max: i64) -> (i64, Vec<Expected>) {
        self.normalize(t);
        // No policy passes more than its limit at once.
        let top = self.0.iter().map(|m| m.policy.limit).fold(max, i64::min);
        // A blocked policy passes nothing.
        let k = (0..=top)
            .rev()
            .find(|&k| {
                self.0
                    .iter()
                    .all(|m| m.allows(t, k) && (k == 0 || m.lock_at(t).0 <= t))
            })
            .unwrap_or(0);
        (k, self.check_attempt(t, k, true))
    }

    /// One check: every policy judges; if all allow and `cost > 0`, all apply, and the
    /// reported figures are those after applying.
    pub fn check(&mut self, t: i64, cost: i64) -> Vec<Expected> {
        self.check_attempt(t, cost, cost > 0)
    }

    /// An any-of check (issue 28 §4): every policy judges (with its lockout); the first that
    /// allows, in order, applies `cost` (when above zero) and reports its figures after, the
    /// others their figures before. When none allows and `cost > 0`, every lockout policy
    /// that denied while not blocked is breached. Returns (the policy charged, verdicts).
    pub fn check_any(&mut self, t: i64, cost: i64) -> (Option<usize>, Vec<Expected>) {
        self.normalize(t);
        let mut verdicts: Vec<Expected> = self.0.iter().map(|m| m.judge_locked(t, cost)).collect();
        let first = verdicts.iter().position(|v| v.allowed);
        match first {
            Some(i) if cost > 0 => {
                let model = &mut self.0[i];
                model.apply(t, cost);
                let after = model.judge(t, 0);
                verdicts[i].remaining = after.remaining;
                verdicts[i].reset_us = after.reset_us;
                (Some(i), verdicts)
            }
            Some(_) => (None, verdicts),
            None => {
                if cost > 0 {
                    for (model, verdict) in self.0.iter_mut().zip(&mut verdicts) {
                        if model.policy.lockout.is_some() && verdict.locked_us == 0 {
                            *verdict = model.breach(t, *verdict);
                        }
                    }
                }
                (None, verdicts)
            }
        }
    }

    /// A check; when it is not applied and is an `attempt`, every lockout policy that denied
    /// while not blocked is breached.
    fn check_attempt(&mut self, t: i64, cost: i64, attempt: bool) -> Vec<Expected> {
        self.normalize(t);
        let mut verdicts: Vec<Expected> = self.0.iter().map(|m| m.judge_locked(t, cost)).collect();
        if cost > 0 && verdicts.iter().all(|v| v.allowed) {
            for (model, verdict) in self.0.iter_mut().zip(&mut verdicts) {
                model.apply(t, cost);
                let after = model.judge(t, 0);
                verdict.remaining = after.remaining;
                verdict.reset_us = after.reset_us;
            }
        } else if attempt {
            for (model, verdict) in self.0.iter_mut().zip(&mut verdicts) {
                if model.policy.lockout.is_some() && !verdict.allowed && verdict.locked_us == 0 {
                    *verdict = model.breach(t, *verdict);
                }
            }
        }
        verdicts
    }
}
