//! The local deny cache: after the store denies a subject, later checks on it that the store
//! would deny too are answered locally, with the figures the store would report, and no
//! round trip.
//!
//! # Why a hit is exact
//!
//! Write `T_k` for the moment from which a request needing `k` units (a peek needs 1) would
//! pass if nothing more were consumed. Every algorithm has two properties, which the
//! reference model of `tests/ratelimit/model.rs` is built on and the stores are checked
//! against:
//! * time only helps: while nothing is consumed, a request that can pass stays passable, so
//!   `T_k` is a fixed moment, and it grows with `k`;
//! * the figures are readings of the `T_k`: at time `n`, `retry_after = T_k − n` for the
//!   request's own `k` (zero once it passes), `reset_after = T_limit − n` (zero once full),
//!   and `remaining` is the largest `k` with `T_k ≤ n`.
//!
//! So one denial, seen at `s` for a request needing `c`, states per policy that
//! `T_c = s + retry_after` (if that policy denied), `T_limit = s + reset_after`, and
//! `T_r ≤ s < T_{r+1}` for `r = remaining`. While nothing is consumed these moments stay
//! put, and the figures at a later `n`, for a request needing `k`, follow wherever the
//! policy's algorithm pins the `T_k` involved ([`Recovery`]):
//! * **GCRA and the token bucket**: `T_k = tat + k·T − burst·T` with `tat = s + reset_after`
//!   (the bucket is GCRA with whole tokens), so every figure for every `k` is exact:
//!   `reset` shrinks with time, `retry = reset + k·T − burst·T`,
//!   `remaining = ⌊(burst·T − reset) / T⌋`.
//! * **Fixed window**: the count stays until the window ends and then counts as zero, so
//!   `T_k = s` for `k ≤ r` and `T_k = s + reset_after` (the window's end) for every larger
//!   `k`: exact for every `k` too.
//! * **Sliding window counter and sliding log**: the previous window's weight shrinks and
//!   logged requests slide out at moments the figures do not tell, so only the moments above
//!   are known. A hit is served only if its `retry` is one of them (`k = c`, or
//!   `k = limit`) and `remaining` is pinned: `r` at `s` itself; otherwise between what
//!   passes (`r`, and `c` once `T_c` is past) and what still waits (`c − 1` before `T_c`,
//!   `limit − 1` before `T_limit`), which must meet. Anything else asks the store.
//!
//! A check with several policies is answered only if every policy's figures follow and at
//! least one policy denies (for an any-of limiter: every policy denies, since one that allows
//! would be charged); its binding policy is then chosen as for the store's answer.
//!
//! # Lockouts
//!
//! While a subject is blocked by a policy's lockout until `L`, that policy's `T_k` is
//! `max(L, T_k of its algorithm)`: still fixed moments while nothing is consumed, and the
//! store reports them (`retry_after` for the request's own `k`, `reset_after` for the
//! limit) with `L` itself (`lock_left`). Until `L` the policy has nothing `remaining`; its
//! `retry` is exact for `k = c` and `k = limit`, and is `L − n` for every `k` when
//! `T_limit = L`, or for `k < c` when `T_c = L`. Past `L` the store decides again. A policy
//! with a lockout that is *not* blocked in the entry is served only when it would pass the
//! request (or the request is a peek): a check it denies is a breach, which only the store
//! can record. Breaches only move moments later, as other processes' requests do.
//!
//! # Keeping "nothing consumed" true
//!
//! Every answer of the store for a subject replaces or removes its entry: a denial (a peek
//! too) restates the figures, anything allowed removes them, and so does a check that got
//! no answer (the store may have applied it). An entry is never replaced by the figures of
//! a check sent before its own, and an allowed check that consumed removes the entry
//! whenever it was sent (it may have been applied after the entry's check). A denial that
//! arrives after a consuming answer it was in flight with is not cached at all: which of
//! the two the store decided first is unknown. That is tracked per hash slot of the
//! subject ([`CONSUMED_SLOTS`]), so it costs no memory per subject; a collision only
//! leaves a denial uncached.
//!
//! Requests from *other* processes only consume more: the true `T_k` move later, so a local
//! denial stays right; only its figures may be optimistic, as the store's own `retry_after`
//! is ("assuming nobody else consumes meanwhile").
//!
//! Times are counted from when the check was *sent*, which is no later than when the store
//! decided: every moment the cache derives is at most the true one, so it never denies
//! what the store would allow, and its waits are short by at most the round trip.
//!
//! # Bounds
//!
//! At most `capacity` subjects. An entry expires when the denial it was made from would
//! pass, or `max_age` after its check was sent, whichever comes first (a reset, refund or
//! rate change made elsewhere is seen then at the latest) (a larger cost may wait longer; the store answers it then). When full, expired
//! entries are swept, but only once the earliest expiry has passed (so a full cache of live
//! entries costs nothing per insert); if it is still full, the new denial is simply not
//! cached. A hit is one hash lookup and arithmetic on the cached figures; it allocates
//! only the returned decision's list of policies.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::decision::Combine;
use super::{Algorithm, Decision, Origin, Policy, PolicyDecision};
use crate::store::{RateOp, RateReply};

/// How many slots remember the latest consuming answer, by hash of the subject.
const CONSUMED_SLOTS: usize = 256;

pub(crate) struct DenyCache {
    capacity: usize,
    /// The longest an entry answers, from when its check was sent.
    max_age: Duration,
    /// How each policy's figures move with time, for the unit tests' `record` (the limiter
    /// passes each subject's own to `record_with`).
    #[cfg(test)]
    recovery: Arc<[Recovery]>,
    /// How the limiter combines its policies (see [`combine`](Self::combine)).
    combine: Combine,
    /// Consuming answers (or unanswered checks) recorded so far; a check reads it when sent.
    consumed: AtomicU64,
    inner: Mutex<Inner>,
}

struct Inner {
    entries: HashMap<String, Entry>,
    /// No entry expires before this; sweeping earlier would free nothing.
    earliest: Option<Instant>,
    /// Per hash slot of the subject, the value of `consumed` after the latest consuming
    /// answer recorded for a subject in that slot.
    last_consumed: Box<[u64]>,
}

struct Entry {
    /// When the check was sent; the cached figures are as of then.
    sent: Instant,
    until: Instant,
    /// Units the denied check needed (a peek needs 1).
    need: u32,
    decision: Decision,
    /// How the subject's policies recover.
    recovery: Arc<[Recovery]>,
}

/// When a check was sent, as the cache needs it to judge the answer: taken just before the
/// round trip with [`DenyCache::sending`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sent {
    at: Instant,
    /// [`DenyCache::consumed`] at the time.
    consumed: u64,
}

/// How a policy's figures move while nothing is consumed (see the module doc): what the
/// cache must know of an algorithm to age a denial exactly, and no more; and whether the
/// policy has a lockout (see [Lockouts](self#lockouts)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Recovery {
    shape: Shape,
    lockout: bool,
}

/// How an algorithm's figures move while nothing is consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// GCRA and the token bucket: one unit back every `interval`, up to `tolerance`
    /// (`burst · interval`); every figure for every cost follows from `reset_after`.
    Linear {
        interval: Duration,
        tolerance: Duration,
    },
    /// The fixed window: nothing changes until the window ends (`reset_after` from the
    /// denial, when anything was counted), then everything is back.
    WindowEnd,
    /// The sliding window counter and the sliding log: only the moments the figures state.
    Observed,
}

impl Recovery {
    fn of(policy: &Policy) -> Self {
        Self {
            shape: Shape::of(policy),
            lockout: policy.lockout().is_some(),
        }
    }

    /// One policy's figures `elapsed` after it reported `seen` for a request needing
    /// `seen_need`, for a request of `cost` (needing `need`); `None` when they do not follow
    /// exactly, or when the request must reach the store (it would breach a lockout).
    fn project(
        self,
        seen: &PolicyDecision,
        seen_need: u32,
        cost: u32,
        elapsed: Duration,
    ) -> Option<Figures> {
        let need = cost.max(1);
        if seen.locked_out {
            return locked(seen, seen_need, need, elapsed);
        }
        let figures = self.shape.project(seen, seen_need, need, elapsed)?;
        // A check this policy denies is a breach, which only the store can record.
        if self.lockout && cost > 0 && !figures.retry.is_zero() {
            return None;
        }
        Some(figures)
    }
}

/// The figures of a policy whose subject was blocked for `seen.lock_left` when it reported
/// `seen` for a request needing `seen_need`, `elapsed` later, for a request needing `need`
/// (see [Lockouts](self#lockouts)); `None` once the block is over or when they do not follow.
fn locked(seen: &PolicyDecision, seen_need: u32, need: u32, elapsed: Duration) -> Option<Figures> {
    let lock = seen
        .lock_left
        .checked_sub(elapsed)
        .filter(|l| !l.is_zero())?;
    let reset = seen.reset_after.saturating_sub(elapsed);
    let retry = if need == seen_need {
        seen.retry_after.saturating_sub(elapsed)
    } else if u64::from(need) == seen.limit {
        reset
    } else if seen.reset_after == seen.lock_left
        || (need < seen_need && seen.retry_after == seen.lock_left)
    {
        lock
    } else {
        return None;
    };
    Some(Figures {
        remaining: 0,
        retry,
        reset,
        lock,
    })
}

impl Shape {
    fn of(policy: &Policy) -> Self {
        match policy.algorithm() {
            Algorithm::Gcra | Algorithm::TokenBucket => {
                // Validated rates have an interval of at least 1 µs.
                let interval = policy
                    .rate()
                    .emission_interval()
                    .max(Duration::from_micros(1));
                Self::Linear {
                    interval,
                    tolerance: interval.saturating_mul(policy.rate().capacity()),
                }
            }
            Algorithm::FixedWindow => Self::WindowEnd,
            Algorithm::SlidingWindow | Algorithm::SlidingLog => Self::Observed,
        }
    }

    /// One policy's figures `elapsed` after it reported `seen` for a request needing
    /// `seen_need`, for a request needing `need`; `None` when they do not follow exactly.
    fn project(
        self,
        seen: &PolicyDecision,
        seen_need: u32,
        need: u32,
        elapsed: Duration,
    ) -> Option<Figures> {
        let reset = seen.reset_after.saturating_sub(elapsed);
        let k = u64::from(need);
        match self {
            Self::Linear {
                interval,
                tolerance,
            } => {
                let retry = reset
                    .checked_add(interval.checked_mul(need)?)?
                    .saturating_sub(tolerance);
                // In u64 nanoseconds (centuries), a cheaper division than u128's.
                let nanos = |d: Duration| u64::try_from(d.as_nanos()).ok();
                let remaining = nanos(tolerance.saturating_sub(reset))? / nanos(interval)?;
                Some(Figures {
                    remaining,
                    retry,
                    reset,
                    lock: Duration::ZERO,
                })
            }
            Self::WindowEnd if reset > Duration::ZERO => Some(Figures {
                remaining: seen.remaining,
                retry: if k <= seen.remaining {
                    Duration::ZERO
                } else {
                    reset
                },
                reset,
                lock: Duration::ZERO,
            }),
            // The window has ended (or nothing was counted): everything is back.
            Self::WindowEnd => Some(Figures {
                remaining: seen.limit,
                retry: Duration::ZERO,
                reset,
                lock: Duration::ZERO,
            }),
            Self::Observed => {
                let c = u64::from(seen_need);
                let full = reset.is_zero();
                let c_waits = !seen.allowed && elapsed < seen.retry_after;
                // `remaining` lies in low..=high: what is known to pass, and less than what
                // is known to wait.
                let low = if full {
                    seen.limit
                } else if seen.allowed || c_waits {
                    seen.remaining
                } else {
                    seen.remaining.max(c)
                };
                let mut high = if full {
                    seen.limit
                } else {
                    seen.limit.saturating_sub(1)
                };
                if c_waits {
                    high = high.min(c - 1);
                }
                if elapsed.is_zero() {
                    high = high.min(seen.remaining);
                }
                if low != high {
                    return None;
                }
                let retry = if k <= low {
                    Duration::ZERO
                } else if c_waits && k == c {
                    seen.retry_after - elapsed
                } else if k == seen.limit {
                    reset
                } else {
                    return None;
                };
                Some(Figures {
                    remaining: low,
                    retry,
                    reset,
                    lock: Duration::ZERO,
                })
            }
        }
    }
}

/// One policy's figures at some moment, for some cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Figures {
    remaining: u64,
    /// Zero when the request passes.
    retry: Duration,
    reset: Duration,
    /// What is left of the subject's block (zero: not blocked).
    lock: Duration,
}

/// How each of `policies` recovers, for [`DenyCache::record_with`].
pub(super) fn recoveries(policies: &[Policy]) -> Arc<[Recovery]> {
    policies.iter().map(Recovery::of).collect()
}

impl DenyCache {
    /// A cache of up to `capacity` subjects for a limiter with these policies.
    pub(crate) fn new(capacity: usize, policies: &[Policy]) -> Self {
        #[cfg(not(test))]
        let _ = policies;
        Self {
            capacity,
            max_age: Duration::MAX,
            #[cfg(test)]
            recovery: recoveries(policies),
            combine: Combine::All,
            consumed: AtomicU64::new(0),
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                earliest: None,
                last_consumed: vec![0; CONSUMED_SLOTS].into_boxed_slice(),
            }),
        }
    }

    /// Bounds how long one denial answers (see the builder's `deny_cache_max_age`).
    pub(crate) fn max_age(mut self, max_age: Duration) -> Self {
        self.max_age = max_age;
        self
    }

    /// How the limiter combines its policies: an any-of limiter's hits need every policy to
    /// deny (default: all or nothing, one denier is enough).
    pub(crate) fn combine(mut self, combine: Combine) -> Self {
        self.combine = combine;
        self
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks a check as sent now; pass the mark to [`record`](Self::record) with its answer.
    pub(crate) fn sending(&self) -> Sent {
        Sent {
            at: Instant::now(),
            consumed: self.consumed.load(Ordering::Acquire),
        }
    }

    /// What the store would answer a request of `cost` (0 peeks) on `subject` at `now`, if
    /// that is a denial the cached figures pin down exactly.
    #[cfg(test)]
    pub(crate) fn lookup(&self, subject: &str, cost: u32, now: Instant) -> Option<Decision> {
        let recovery = Arc::clone(&self.recovery);
        self.lookup_for(subject, cost, now, &recovery)
    }

    /// [`lookup`](Self::lookup) for a subject whose policies now recover as `recovery` says:
    /// an entry recorded under other policies (its rates changed since) is dropped, not
    /// served.
    pub(crate) fn lookup_for(
        &self,
        subject: &str,
        cost: u32,
        now: Instant,
        recovery: &Arc<[Recovery]>,
    ) -> Option<Decision> {
        let mut inner = self.inner();
        let entry = inner.entries.get(subject)?;
        if now >= entry.until || !Arc::ptr_eq(&entry.recovery, recovery) {
            inner.entries.remove(subject);
            return None;
        }
        let elapsed = now.saturating_duration_since(entry.sent);
        let seen = &entry.decision.policies;
        let mut policies = Vec::with_capacity(seen.len());
        let mut denied = false;
        for (seen, recovery) in seen.iter().zip(entry.recovery.iter()) {
            let figures = recovery.project(seen, entry.need, cost, elapsed)?;
            denied |= !figures.retry.is_zero();
            policies.push(PolicyDecision {
                policy: Arc::clone(&seen.policy),
                allowed: figures.retry.is_zero(),
                limit: seen.limit,
                remaining: figures.remaining,
                retry_after: figures.retry,
                reset_after: figures.reset,
                locked_out: !figures.lock.is_zero(),
                charged: false,
                lock_left: figures.lock,
            });
        }
        drop(inner);
        // All or nothing: a denial of one policy denies; any of them: only every policy's.
        let hit = match self.combine {
            Combine::All => denied,
            Combine::Any => policies.iter().all(|p| !p.allowed),
        };
        hit.then(|| Decision::combine(policies, Origin::DenyCache, self.combine))
    }

    /// Takes the store's answer to a check of `cost` on `subject` (see the module doc): a
    /// denial is remembered, anything else forgets the subject.
    #[cfg(test)]
    pub(crate) fn record(&self, subject: &str, cost: u32, sent: Sent, decision: &Decision) {
        self.record_with(subject, cost, sent, decision, &Arc::clone(&self.recovery));
    }

    /// [`record`](Self::record) for a subject whose policies recover as `recovery` says.
    pub(crate) fn record_with(
        &self,
        subject: &str,
        cost: u32,
        sent: Sent,
        decision: &Decision,
        recovery: &Arc<[Recovery]>,
    ) {
        if decision.allowed && cost > 0 {
            self.consumed_at_most_now(subject);
            return;
        }
        let mut inner = self.inner();
        if inner
            .entries
            .get(subject)
            .is_some_and(|entry| entry.sent > sent.at)
        {
            return; // It states newer figures.
        }
        inner.entries.remove(subject);
        if decision.allowed {
            return;
        }
        let slot = slot(&inner, subject);
        if inner.last_consumed[slot] > sent.consumed {
            return; // A consuming answer arrived while this check was in flight.
        }
        let until = sent.at + decision.retry_after.min(self.max_age);
        let now = Instant::now();
        if until <= now {
            return;
        }
        if inner.entries.len() >= self.capacity {
            if inner.earliest.is_some_and(|e| e <= now) {
                inner.entries.retain(|_, e| e.until > now);
                inner.earliest = inner.entries.values().map(|e| e.until).min();
            }
            if inner.entries.len() >= self.capacity {
                return;
            }
        }
        inner.earliest = Some(inner.earliest.map_or(until, |e| e.min(until)));
        inner.entries.insert(
            subject.to_owned(),
            Entry {
                sent: sent.at,
                until,
                need: cost.max(1),
                decision: decision.clone(),
                recovery: Arc::clone(recovery),
            },
        );
    }

    /// Learns from what the store did with `op` on `subject`, sent at `sent`: a consuming
    /// answer, or an operation that may have consumed without an answer, forgets the
    /// subject; a check's answer (or a refused reservation's) is recorded, remembering a
    /// denial with the figures `decide` makes of the reply.
    pub(crate) fn learn(
        &self,
        subject: &str,
        op: RateOp,
        sent: Sent,
        answer: Answer<'_>,
        decide: impl FnOnce(&RateReply) -> Decision,
        recovery: &Arc<[Recovery]>,
    ) {
        match (answer, op) {
            (Answer::Replied(reply), RateOp::Check { .. }) if reply.applied => {
                self.consumed(subject);
            }
            // Every answer refreshes or drops the subject's entry, so the cache never serves
            // figures the store has moved past.
            (Answer::Replied(reply), RateOp::Check { cost }) => {
                self.record_with(subject, cost, sent, &decide(reply), recovery);
            }
            (Answer::Replied(reply), RateOp::Reserve { cost, .. }) if !reply.applied => {
                self.record_with(subject, cost, sent, &decide(reply), recovery);
            }
            (Answer::Replied(reply), RateOp::CheckUpTo { .. }) if reply.applied => {
                self.consumed(subject);
            }
            // Nothing fitted: the reply is a peek's.
            (Answer::Replied(reply), RateOp::CheckUpTo { .. }) => {
                self.record_with(subject, 0, sent, &decide(reply), recovery);
            }
            (Answer::Replied(reply), RateOp::AnyOf { .. }) if reply.applied => {
                self.consumed(subject);
            }
            // `decide` makes it a denial only when no policy allowed.
            (Answer::Replied(reply), RateOp::AnyOf { cost }) => {
                self.record_with(subject, cost, sent, &decide(reply), recovery);
            }
            // It changed the subject's state (a reservation, a refund, a penalty, a reset).
            (Answer::Replied(_), _) => self.unanswered(subject),
            // Sent but unanswered (a timeout, a dropped connection): the store may have
            // applied it, so the cached figures may be stale.
            (Answer::Lost, op) if op.consumes() => self.unanswered(subject),
            (Answer::Lost | Answer::NotSent, _) => {}
        }
    }

    /// A check on `subject` consumed (the store said so): forget the subject.
    pub(crate) fn consumed(&self, subject: &str) {
        self.consumed_at_most_now(subject);
    }

    /// A check on `subject` that may have consumed got no answer: forget the subject.
    pub(crate) fn unanswered(&self, subject: &str) {
        self.consumed_at_most_now(subject);
    }

    /// Something was consumed from `subject`, at the latest now: its entry, and any denial
    /// still in flight for it, may predate that.
    fn consumed_at_most_now(&self, subject: &str) {
        let mut inner = self.inner();
        inner.entries.remove(subject);
        let slot = slot(&inner, subject);
        inner.last_consumed[slot] = self.consumed.fetch_add(1, Ordering::AcqRel) + 1;
    }

    #[cfg(feature = "test-util")]
    pub(crate) fn len(&self) -> usize {
        self.inner().entries.len()
    }
}

/// What became of one operation on the store, for [`DenyCache::learn`].
pub(crate) enum Answer<'a> {
    /// The store answered.
    Replied(&'a RateReply),
    /// It was sent but not answered: it may have been applied.
    Lost,
    /// It never left (the in-flight limit, the circuit breaker).
    NotSent,
}

/// The subject's slot in [`Inner::last_consumed`].
fn slot(inner: &Inner, subject: &str) -> usize {
    let hash = inner.entries.hasher().hash_one(subject);
    // The remainder is below CONSUMED_SLOTS, so it fits.
    usize::try_from(hash % CONSUMED_SLOTS as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::ratelimit::Rate;

    /// A policy: for GCRA and the token bucket, an emission interval of `unit_ms` and a
    /// burst of `count`; for the window algorithms, `count` per `unit_ms`.
    fn spec(algorithm: Algorithm, unit_ms: u64, count: u32) -> Policy {
        let unit = Duration::from_millis(unit_ms);
        let rate = if matches!(algorithm, Algorithm::Gcra | Algorithm::TokenBucket) {
            Rate::per(1, unit).and_then(|r| r.burst(count))
        } else {
            Rate::per(count, unit)
        };
        Policy::new("p", algorithm, rate.expect("valid rate")).expect("valid policy")
    }

    fn figures(
        allowed: bool,
        limit: u64,
        remaining: u64,
        retry_ms: u64,
        reset_ms: u64,
    ) -> PolicyDecision {
        PolicyDecision {
            policy: Arc::from("p"),
            allowed,
            limit,
            remaining,
            retry_after: Duration::from_millis(retry_ms),
            reset_after: Duration::from_millis(reset_ms),
            locked_out: false,
            charged: false,
            lock_left: Duration::ZERO,
        }
    }

    fn denial(limit: u64, remaining: u64, retry_ms: u64, reset_ms: u64) -> Decision {
        Decision::from_policies(
            vec![figures(false, limit, remaining, retry_ms, reset_ms)],
            Origin::Store,
        )
    }

    fn allowed() -> Decision {
        Decision::from_policies(vec![figures(true, 1, 0, 0, 100)], Origin::Store)
    }

    /// (allowed, remaining, retry ms, reset ms) of a hit.
    fn seen(d: &Decision) -> (bool, u64, u64, u64) {
        let ms = |d: Duration| u64::try_from(d.as_millis()).expect("fits");
        (d.allowed, d.remaining, ms(d.retry_after), ms(d.reset_after))
    }

    async fn advance_ms(ms: u64) {
        tokio::time::advance(Duration::from_millis(ms)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_denial_answers_no_longer_than_the_max_age() {
        // Denied for 10 s (a lockout, say); a reset elsewhere must be seen within 1 s.
        let cache =
            DenyCache::new(4, &[spec(Algorithm::Gcra, 100, 5)]).max_age(Duration::from_secs(1));
        cache.record("a", 1, cache.sending(), &denial(5, 0, 10_000, 10_400));
        let at = || cache.lookup("a", 1, Instant::now()).map(|d| seen(&d));
        assert_eq!(at(), Some((false, 0, 10_000, 10_400)));
        advance_ms(999).await;
        assert_eq!(at(), Some((false, 0, 9_001, 9_401)));
        advance_ms(1).await;
        assert_eq!(at(), None, "past the max age the store decides again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lockout_answers_until_its_block_ends_and_a_breach_goes_to_the_store() {
        let locked = spec(Algorithm::Gcra, 100, 5)
            .with_lockout(crate::ratelimit::Lockout::after_breach([
                Duration::from_secs(10),
            ]))
            .expect("valid lockout");
        let cache = DenyCache::new(4, &[locked]);
        // Blocked for 10 s; the policy alone would pass a cost of 1 in 80 ms.
        let blocked = |retry_ms: u64, reset_ms: u64, lock_ms: u64| {
            let mut p = figures(false, 5, 0, retry_ms, reset_ms);
            p.locked_out = true;
            p.lock_left = Duration::from_millis(lock_ms);
            Decision::from_policies(vec![p], Origin::Store)
        };
        cache.record("a", 1, cache.sending(), &blocked(10_000, 10_000, 10_000));
        let at = |cost| {
            cache
                .lookup("a", cost, Instant::now())
                .map(|d| (seen(&d), d.locked_out))
        };
        assert_eq!(at(1), Some(((false, 0, 10_000, 10_000), true)));
        assert_eq!(at(0), Some(((false, 0, 10_000, 10_000), true)));
        assert_eq!(
            at(5),
            Some(((false, 0, 10_000, 10_000), true)),
            "every cost: the block"
        );
        advance_ms(9_999).await;
        assert_eq!(at(3), Some(((false, 0, 1, 1), true)));
        advance_ms(1).await;
        assert_eq!(at(1), None, "the block is over: the store decides");

        // The policy's own wait outlasts the block for a cost of 5: only the costs the
        // figures pin are served.
        cache.record("b", 1, cache.sending(), &blocked(10_000, 12_000, 10_000));
        let at = |cost| cache.lookup("b", cost, Instant::now()).map(|d| seen(&d));
        assert_eq!(at(1), Some((false, 0, 10_000, 12_000)));
        assert_eq!(at(5), Some((false, 0, 12_000, 12_000)));
        assert_eq!(at(3), None, "when a cost of 3 passes is not known");

        // Denied but not blocked (a peek): served to peeks, but a check would breach.
        cache.record("c", 0, cache.sending(), &denial(5, 0, 80, 480));
        assert!(cache.lookup("c", 0, Instant::now()).is_some());
        assert!(cache.lookup("c", 1, Instant::now()).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn gcra_answers_every_cost_exactly() {
        // One per 100 ms, burst 5; the store saw 4.8 intervals queued: cost 1 waits 80 ms.
        let cache = DenyCache::new(4, &[spec(Algorithm::Gcra, 100, 5)]);
        cache.record("a", 1, cache.sending(), &denial(5, 0, 80, 480));
        let at = |cost| cache.lookup("a", cost, Instant::now()).map(|d| seen(&d));
        assert_eq!(at(1), Some((false, 0, 80, 480)));
        assert_eq!(at(0), Some((false, 0, 80, 480)), "a peek needs 1");
        assert_eq!(at(3), Some((false, 0, 280, 480)), "two intervals more");
        advance_ms(60).await;
        assert_eq!(at(1), Some((false, 0, 20, 420)));
        assert_eq!(
            at(5),
            Some((false, 0, 420, 420)),
            "the full burst waits for the reset"
        );
        advance_ms(30).await;
        assert_eq!(at(1), None, "cost 1 passes now: the store decides");
        assert_eq!(
            cache.len(),
            0,
            "and the entry expired with the denial it held"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_fixed_window_holds_until_its_end() {
        let cache = DenyCache::new(4, &[spec(Algorithm::FixedWindow, 1000, 5)]);
        // 3 counted, cost 4 denied until the window ends in 300 ms.
        cache.record("a", 4, cache.sending(), &denial(5, 2, 300, 300));
        let at = |cost| cache.lookup("a", cost, Instant::now()).map(|d| seen(&d));
        assert_eq!(at(3), Some((false, 2, 300, 300)));
        assert_eq!(at(5), Some((false, 2, 300, 300)));
        assert_eq!(at(2), None, "fits: the store decides");
        advance_ms(100).await;
        assert_eq!(at(3), Some((false, 2, 200, 200)));
    }

    #[tokio::test(start_paused = true)]
    async fn sliding_algorithms_answer_only_what_the_figures_pin() {
        let cache = DenyCache::new(4, &[spec(Algorithm::SlidingLog, 1000, 5)]);
        // Cost 3 denied with 1 left: `remaining` could grow to 2 before the wait is over.
        cache.record("a", 3, cache.sending(), &denial(5, 1, 300, 900));
        let at = |cost| cache.lookup("a", cost, Instant::now()).map(|d| seen(&d));
        assert_eq!(at(3), Some((false, 1, 300, 900)), "at the same instant");
        assert_eq!(at(5), Some((false, 1, 900, 900)));
        assert_eq!(at(2), None, "its wait is not known");
        advance_ms(1).await;
        assert_eq!(at(3), None, "remaining is no longer pinned");
        // Cost 2 denied with 1 left: remaining stays 1 until cost 2 passes.
        cache.record("a", 2, cache.sending(), &denial(5, 1, 300, 900));
        advance_ms(100).await;
        assert_eq!(at(2), Some((false, 1, 200, 800)));
        assert_eq!(at(4), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hit_needs_every_policy_pinned_and_one_denying() {
        let cache = DenyCache::new(
            4,
            &[
                spec(Algorithm::Gcra, 100, 5),
                spec(Algorithm::SlidingWindow, 1000, 10),
            ],
        );
        let both = |second: PolicyDecision| {
            Decision::from_policies(vec![figures(false, 5, 0, 80, 480), second], Origin::Store)
        };
        // The counter allowed with 9 left of 10: pinned until its reset.
        cache.record("a", 1, cache.sending(), &both(figures(true, 10, 9, 0, 700)));
        advance_ms(10).await;
        let hit = cache.lookup("a", 1, Instant::now()).expect("both pinned");
        assert_eq!(seen(&hit), (false, 0, 70, 470));
        assert_eq!(hit.policies[1].remaining, 9);
        assert_eq!(hit.policies[1].reset_after, Duration::from_millis(690));
        // With 5 left it may have more by now: not served.
        cache.record("a", 1, cache.sending(), &both(figures(true, 10, 5, 0, 700)));
        advance_ms(10).await;
        assert!(cache.lookup("a", 1, Instant::now()).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn any_answer_replaces_the_entry_but_never_with_older_figures() {
        let cache = DenyCache::new(4, &[spec(Algorithm::Gcra, 100, 5)]);
        let older = cache.sending();
        advance_ms(1).await;
        let newer = cache.sending();
        cache.record("a", 1, newer, &denial(5, 0, 80, 480));
        cache.record("a", 1, older, &denial(5, 0, 50, 450));
        let hit = cache.lookup("a", 1, Instant::now()).expect("cached");
        assert_eq!(
            seen(&hit),
            (false, 0, 80, 480),
            "the older answer was ignored"
        );
        // An allowed peek sent later forgets it.
        cache.record("a", 0, cache.sending(), &allowed());
        assert!(cache.lookup("a", 1, Instant::now()).is_none());
        // A consuming answer forgets it whenever it was sent.
        cache.record("a", 1, cache.sending(), &denial(5, 0, 80, 480));
        cache.record("a", 1, older, &allowed());
        assert!(cache.lookup("a", 1, Instant::now()).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_denial_in_flight_with_a_consuming_answer_is_not_cached() {
        let cache = DenyCache::new(4, &[spec(Algorithm::Gcra, 100, 5)]);
        let in_flight = cache.sending();
        cache.record("a", 1, cache.sending(), &allowed());
        cache.record("a", 3, in_flight, &denial(5, 2, 80, 280));
        assert_eq!(cache.len(), 0, "it may predate the consumption");
        cache.record("a", 3, cache.sending(), &denial(5, 2, 80, 280));
        assert_eq!(cache.len(), 1, "sent after it: cached");
        cache.unanswered("a");
        assert_eq!(
            cache.len(),
            0,
            "a check without an answer may have consumed"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn stays_bounded_and_sweeps_only_when_something_expired() {
        let cache = DenyCache::new(3, &[spec(Algorithm::Gcra, 100, 1)]);
        let sent = cache.sending();
        for (i, ms) in [10, 20, 30].into_iter().enumerate() {
            cache.record(&format!("s{i}"), 1, sent, &denial(1, 0, ms, ms));
        }
        cache.record("late", 1, sent, &denial(1, 0, 50, 50));
        assert_eq!(cache.len(), 3, "full of live entries: not cached");
        assert!(cache.lookup("late", 1, Instant::now()).is_none());
        advance_ms(15).await;
        cache.record("late", 1, cache.sending(), &denial(1, 0, 50, 50));
        assert_eq!(cache.len(), 3, "one expired entry made room");
        assert!(cache.lookup("late", 1, Instant::now()).is_some());
        assert!(cache.lookup("s0", 1, Instant::now()).is_none());
    }
}
