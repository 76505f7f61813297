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

use distlock::ratelimit::{Algorithm, Policy};

/// One policy's parameters in µs.
#[derive(Debug, Clone)]
pub struct ModelPolicy {
    pub algorithm: Algorithm,
    /// Burst (GCRA, token bucket) or limit per window.
    pub limit: i64,
    /// Emission interval (GCRA, token bucket) or period (windows), µs.
    pub unit: i64,
}

impl ModelPolicy {
    pub fn of(policy: &Policy) -> Self {
        let rate = policy.rate();
        let unit = match policy.algorithm() {
            Algorithm::Gcra | Algorithm::TokenBucket => rate.emission_interval(),
            _ => rate.period(),
        };
        Self {
            algorithm: policy.algorithm(),
            limit: i64::from(policy.limit()),
            unit: i64::try_from(unit.as_micros()).expect("fits"),
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
}

/// One policy's history of applied requests `(time, cost)`, in time order.
#[derive(Debug, Clone)]
pub struct Model {
    pub policy: ModelPolicy,
    applied: Vec<(i64, i64)>,
}

impl Model {
    pub fn new(policy: ModelPolicy) -> Self {
        Self {
            policy,
            applied: Vec::new(),
        }
    }

    /// The defining predicate.
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    pub fn allows(&self, t: i64, k: i64) -> bool {
        let p = &self.policy;
        match p.algorithm {
            Algorithm::Gcra | Algorithm::TokenBucket => {
                let mut tat = i64::MIN;
                for &(at, cost) in &self.applied {
                    tat = tat.max(at) + cost * p.unit;
                }
                tat.max(t) + k * p.unit - p.limit * p.unit <= t
            }
            Algorithm::FixedWindow => {
                let w = t / p.unit;
                let count: i64 = self.sum(|at| at / p.unit == w);
                count + k <= p.limit
            }
            Algorithm::SlidingWindow => {
                let w = t / p.unit;
                let curr: i64 = self.sum(|at| at / p.unit == w);
                let prev: i64 = self.sum(|at| at / p.unit == w - 1);
                let e = t - w * p.unit;
                let weighted = (prev as f64 * (p.unit - e) as f64 / p.unit as f64).ceil() as i64;
                weighted + curr + k <= p.limit
            }
            Algorithm::SlidingLog => {
                let count: i64 = self.sum(|at| at > t - p.unit);
                count + k <= p.limit
            }
            other => panic!("no model for {other:?}"),
        }
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
        let mut hi = from + self.policy.horizon();
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
        }
    }

    pub fn apply(&mut self, t: i64, cost: i64) {
        self.applied.push((t, cost));
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

    /// One check: every policy judges; if all allow and `cost > 0`, all apply, and the
    /// reported figures are those after applying.
    pub fn check(&mut self, t: i64, cost: i64) -> Vec<Expected> {
        let mut verdicts: Vec<Expected> = self.0.iter().map(|m| m.judge(t, cost)).collect();
        if cost > 0 && verdicts.iter().all(|v| v.allowed) {
            for (model, verdict) in self.0.iter_mut().zip(&mut verdicts) {
                model.apply(t, cost);
                let after = model.judge(t, 0);
                verdict.remaining = after.remaining;
                verdict.reset_us = after.reset_us;
            }
        }
        verdicts
    }
}
