//! The hybrid mode of a [`RateLimiter`] (see
//! [`RateLimiterBuilder::hybrid`](crate::ratelimit::RateLimiterBuilder::hybrid)): each
//! replica leases a *share* of a subject's budget from the store with one partial grant
//! ([`check_up_to`](RateLimiter::check_up_to)`(share)`), answers the subject's checks from it
//! locally, without a round trip, until it runs out or the sync interval passes, and then
//! gives back what it did not use ([`refund`](RateLimiter::refund)).
//!
//! Why the overshoot is bounded: every unit a replica hands out was charged in the store
//! first, so the store's count is never below what was used. What the store cannot see is
//! *when* a leased unit is used: up to one sync interval after it was charged. At any instant
//! a replica holds at most `share` units charged but not used yet, so over any window the
//! requests that pass exceed what the policy allows in that window by at most
//! `share × replicas` (plus, for a cost above one, the cost's rounding). The default, no
//! share, stays exact.
//!
//! Per subject, one refill is in flight per replica at a time: the checks that find the
//! share empty wait for it rather than each lease a share of their own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::RateLimiter;
use crate::error::{RateLimitError, StoreError};
use crate::ratelimit::{Decision, Origin, Policy};

/// The most subjects a hybrid limiter keeps shares for; beyond it, checks on new subjects
/// are exact (one round trip each) until older shares are given back.
pub const DEFAULT_HYBRID_SUBJECTS: usize = 10_000;

/// The hybrid settings the builder validated.
#[derive(Debug, Clone, Copy)]
pub(in crate::ratelimit) struct HybridSettings {
    pub(in crate::ratelimit) share: u32,
    pub(in crate::ratelimit) sync: Duration,
    pub(in crate::ratelimit) subjects: usize,
}

/// The shares one limiter (and its clones) holds.
pub(super) struct Shares {
    settings: HybridSettings,
    by_subject: Mutex<HashMap<Box<str>, Share>>,
    /// When stale shares are next looked for.
    next_sweep: Mutex<Instant>,
}

/// A subject's leased units on this replica.
struct Share {
    /// Units charged in the store and not handed out yet.
    left: u32,
    /// When they were leased: after `sync`, they go back.
    leased: Instant,
    /// The store's answer to the lease: local answers show its figures.
    template: Option<Decision>,
    /// The units came from the local fallback (the store was away): they are this
    /// process's, so they are never given back to the store.
    fallback: bool,
    /// Held while a refill is in flight.
    refill: Arc<tokio::sync::Mutex<()>>,
}

impl Share {
    fn new(now: Instant) -> Self {
        Self {
            left: 0,
            leased: now,
            template: None,
            fallback: false,
            refill: Arc::new(tokio::sync::Mutex::new(())),
        }
    }
}

/// What a lease did for the check that made it.
enum Taken {
    /// The check's cost was taken from the lease.
    Yes,
    /// Not enough was granted for the cost (what was is in the share).
    No,
    /// The answer was not counted by the store (failing open, shadow mode).
    Uncounted,
}

/// What the local share says about a check.
enum Local {
    /// Answered from the share.
    Granted(Decision),
    /// Not enough units: refill, holding this gate; `stale` units must go back first.
    Refill {
        gate: Arc<tokio::sync::Mutex<()>>,
        stale: u32,
    },
    /// No share for this subject (the map is full): check exactly.
    Exact,
}

impl Shares {
    pub(super) fn new(settings: HybridSettings) -> Self {
        Self {
            settings,
            by_subject: Mutex::new(HashMap::new()),
            next_sweep: Mutex::new(Instant::now() + settings.sync),
        }
    }

    pub(super) fn share(&self) -> u32 {
        self.settings.share
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Share>> {
        self.by_subject
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `cost` units from `subject`'s fresh share, or says what to do instead. Units of
    /// a share older than the sync interval are taken out (`stale`) to be given back.
    fn take(&self, subject: &str, cost: u32, now: Instant) -> Local {
        let mut map = self.map();
        if !map.contains_key(subject) {
            if map.len() >= self.settings.subjects {
                return Local::Exact;
            }
            map.insert(subject.into(), Share::new(now));
        }
        let Some(share) = map.get_mut(subject) else {
            return Local::Exact;
        };
        let mut stale = 0;
        if now.saturating_duration_since(share.leased) >= self.settings.sync {
            stale = std::mem::take(&mut share.left);
            if share.fallback {
                stale = 0;
            }
        }
        if share.left >= cost
            && let Some(template) = &share.template
        {
            share.left -= cost;
            let mut decision = template.clone();
            if !share.fallback {
                decision.origin = Origin::LocalShare;
            }
            decision.granted = cost;
            decision.remaining = decision.remaining.saturating_add(u64::from(share.left));
            return Local::Granted(decision);
        }
        Local::Refill {
            gate: Arc::clone(&share.refill),
            stale,
        }
    }

    /// Adds `granted` units leased now, with the store's answer, and takes `cost` of them
    /// (with what is left) if they reach it. Returns whether `cost` was taken.
    fn add(&self, subject: &str, granted: u32, template: &Decision, cost: u32) -> bool {
        let now = Instant::now();
        let mut map = self.map();
        let share = map.entry(subject.into()).or_insert_with(|| Share::new(now));
        if granted > 0 {
            let fallback = template.origin == Origin::LocalFallback;
            if fallback != share.fallback {
                // Units of the other kind are not mixed in: the store's go back as usual
                // once stale; the fallback's are dropped.
                share.left = 0;
            }
            share.fallback = fallback;
            share.leased = now;
            share.template = Some(template.clone());
        }
        share.left = share.left.saturating_add(granted);
        if share.left >= cost {
            share.left -= cost;
            true
        } else {
            false
        }
    }

    /// Units left in `subject`'s share.
    fn left(&self, subject: &str) -> u32 {
        self.map().get(subject).map_or(0, |s| s.left)
    }

    /// Forgets `subject`'s units without giving them back (its state was reset). The entry
    /// stays, with its gate, so that a lease in flight stays the only one.
    pub(super) fn forget(&self, subject: &str) {
        if let Some(share) = self.map().get_mut(subject) {
            share.left = 0;
            share.template = None;
        }
    }

    /// Takes every share out, with its units, and the shares older than the sync interval
    /// only when `stale_only`.
    fn drain(&self, stale_only: bool) -> Vec<(Box<str>, u32)> {
        let now = Instant::now();
        let sync = self.settings.sync;
        let mut out = Vec::new();
        self.map().retain(|subject, share| {
            let stale = now.saturating_duration_since(share.leased) >= sync;
            if stale_only && !stale {
                return true;
            }
            if share.left > 0 && !share.fallback {
                out.push((subject.clone(), share.left));
            }
            // A share whose refill is in flight stays, emptied, so its gate stays shared.
            share.left = 0;
            Arc::strong_count(&share.refill) > 1
        });
        out
    }

    /// Whether a sweep for stale shares is due at `now` (at most one per sync interval);
    /// if so, the next one is an interval away.
    fn sweep_due(&self, now: Instant) -> bool {
        let mut next = self
            .next_sweep
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if now < *next {
            return false;
        }
        *next = now + self.settings.sync;
        true
    }
}

impl RateLimiter {
    /// A check of `cost` (> 0) under the hybrid mode: from the local share when it has the
    /// units, else after leasing a new share.
    pub(super) async fn check_hybrid(
        &self,
        shares: &Arc<Shares>,
        subject: &str,
        cost: u32,
    ) -> Result<Decision, RateLimitError> {
        if cost > shares.share() {
            // Never served from a share: a share could not hold it.
            return self.check_exact(subject, cost).await;
        }

        loop {
            let (gate, stale) = match shares.take(subject, cost, Instant::now()) {
                Local::Granted(decision) => {
                    // Ready at once: let the other tasks on this worker run now and then.
                    tokio::task::consume_budget().await;
                    return Ok(decision);
                }
                Local::Exact => {
                    self.give_back_stale(shares);
                    return self.check_exact(subject, cost).await;
                }
                Local::Refill { gate, stale } => (gate, stale),
            };
            self.give_back(vec![(subject.into(), stale)]);
            if self.client.is_closed() {
                // The client is shutting down: what is left of its shares still serves, but
                // it leases no new one (the drain gives them back); the check is exact.
                return self.check_exact(subject, cost).await;
            }
            // One lease in flight per subject: a check that finds another one leasing waits
            // for it, then takes from what it leased, or leases itself.
            let leasing = gate.lock_owned().await;
            if shares.left(subject) >= cost {
                continue; // leased while this check waited
            }
            self.give_back_stale(shares);
            // A subject's own rates may be lower than the limiter's: its cost is checked, and
            // its lease capped, against them.
            let eff = self.effective(subject).await?;
            super::validate_cost(&eff, cost)?;
            let least = eff.policies.iter().map(Policy::limit).min().unwrap_or(0);
            let want = shares.share().min(least).max(cost);
            // The lease runs in a task of its own, holding the gate: a caller that gives up
            // (a timeout, a closed connection) does not lose the units the store charged.
            let limiter = self.clone();
            let owned = Arc::clone(shares);
            let subject_owned: Box<str> = subject.into();
            let lease: Result<(Decision, Taken), RateLimitError> = tokio::spawn(async move {
                let _leasing = leasing;
                let lease = limiter.check_up_to_uncounted(&subject_owned, want).await?;
                let counted =
                    lease.allowed && !lease.shadowed && !matches!(lease.origin, Origin::FailOpen);
                let took = counted && owned.add(&subject_owned, lease.granted, &lease, cost);
                if !counted && lease.allowed {
                    return Ok((lease, Taken::Uncounted));
                }
                Ok((lease, if took { Taken::Yes } else { Taken::No }))
            })
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::unreachable("the hybrid lease's task was cancelled").into())
            });
            let (lease, taken) = lease?;
            match taken {
                // Nothing was counted (failing open, shadow mode): pass this one as the
                // answer says, and keep no share.
                Taken::Uncounted => return Ok(super::granting(lease, cost)),
                Taken::Yes => {
                    let mut decision = lease;
                    decision.granted = cost;
                    decision.remaining = decision
                        .remaining
                        .saturating_add(u64::from(shares.left(subject)));
                    return Ok(decision);
                }
                // Nothing at all was left: the store's denial, with when one unit fits.
                Taken::No if cost == 1 => return Ok(super::granting(lease, cost)),
                // Some units, not `cost`: they stay in the share, and the store says when
                // the whole cost fits.
                Taken::No => return self.check_exact(subject, cost).await,
            }
        }
    }

    /// Gives back units that shares did not use: one task, one refund after another, so a
    /// sweep of many subjects never crowds out the checks.
    fn give_back(&self, units: Vec<(Box<str>, u32)>) {
        let units: Vec<_> = units.into_iter().filter(|(_, n)| *n > 0).collect();
        if units.is_empty() {
            return;
        }
        let limiter = self.clone();
        tokio::spawn(async move {
            for (subject, n) in units {
                if let Err(err) = limiter.refund(&subject, n).await {
                    tracing::warn!(subject = %crate::logging::redacted(&subject), units = n, error = %err,
                        "could not give back a hybrid share's unused units; they return as the policy refills");
                }
            }
        });
    }

    /// Gives back the shares older than the sync interval, at most once per interval.
    fn give_back_stale(&self, shares: &Shares) {
        if shares.sweep_due(Instant::now()) {
            self.give_back(shares.drain(true));
        }
    }

    /// Gives back every unit this limiter (and its clones) holds in hybrid shares, and
    /// answers how many: call it when a replica shuts down, so that the units it leased and
    /// did not use serve the other replicas at once rather than when the policy refills.
    /// Nothing for a limiter built without
    /// [`hybrid`](crate::ratelimit::RateLimiterBuilder::hybrid). Failures are those of
    /// [`refund`](Self::refund); the units of a failed refund are not kept.
    ///
    /// [`Client::shutdown`](crate::Client::shutdown) does this for every hybrid limiter of
    /// the client, and a closed client's limiters lease no new share: their checks are exact.
    pub async fn return_shares(&self) -> Result<u64, RateLimitError> {
        let Some(shares) = self.shared.hybrid.as_ref() else {
            return Ok(0);
        };
        let mut returned = 0;
        let mut failed = None;
        for (subject, units) in shares.drain(false) {
            if units == 0 {
                continue;
            }
            match self.refund(&subject, units).await {
                Ok(_) => returned += u64::from(units),
                Err(err) => failed = Some(err),
            }
        }
        failed.map_or(Ok(returned), Err)
    }
}

impl crate::core::HybridShares for RateLimiter {
    fn abandoned(&self) -> bool {
        // The registry's clone is the only one left.
        Arc::strong_count(&self.shared) == 1
    }

    fn return_shares(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<u64, RateLimitError>> + Send + '_>>
    {
        Box::pin(RateLimiter::return_shares(self))
    }
}
