//! Asking the store: one operation through the circuit breaker, bounded by the deadline and
//! the in-flight limit, the deny cache learning from its answer; what the outage policy does
//! when the store cannot answer; and the decision a reply makes.

use std::sync::Arc;
use std::time::Duration;

use super::RateLimiter;
use crate::error::{RateLimitError, StoreError};
use crate::keys::rate_keys;
use crate::ratelimit::breaker::{Admit, CircuitBreaker};
use crate::ratelimit::decision::Combine;
use crate::ratelimit::deny_cache::{Answer, DenyCache};
use crate::ratelimit::outage::{Outage, Unavailable};
use crate::ratelimit::subject_rates::Effective;
use crate::ratelimit::{Decision, Origin, PolicyDecision};
use crate::store::{RateOp, RateReply, RateRequest};

impl RateLimiter {
    /// One operation on the store, through the circuit breaker, bounded by the deadline and
    /// the in-flight limit; the deny cache learns from the answer.
    pub(super) async fn operate(
        &self,
        subject: &str,
        keys: &[String],
        eff: &Effective,
        op: RateOp,
    ) -> Result<RateReply, Unavailable> {
        let probe = match self.breaker.as_ref().map(CircuitBreaker::admit) {
            Some(Admit::Skip(retry_in)) => return Err(Unavailable::Skipped(retry_in)),
            Some(Admit::Probe(guard)) => Some(guard),
            Some(Admit::Ask) | None => None,
        };
        let cache = self.shared.deny_cache.as_ref();
        let sent = cache.map(DenyCache::sending);
        let result = self.ask_store(keys, eff, op).await;
        let answered = match &result {
            Ok(_) => Some(true),
            Err(Unavailable::Store(_)) => Some(false),
            // Our own limit, not the store's failure.
            Err(_) => None,
        };
        if let Some(ok) = answered {
            match probe {
                Some(guard) => guard.report(ok),
                None => {
                    if let Some(breaker) = &self.breaker {
                        breaker.report(ok);
                    }
                }
            }
        }
        if result.is_ok() {
            self.shared.outage_log.answered();
        }
        if let (Some(cache), Some(sent)) = (cache, sent) {
            let answer = match &result {
                Ok(reply) => Answer::Replied(reply),
                Err(Unavailable::Store(_)) => Answer::Lost,
                // Our own limit or the breaker: nothing was sent.
                Err(_) => Answer::NotSent,
            };
            cache.learn(
                subject,
                op,
                sent,
                answer,
                |reply| self.decision(eff, reply.clone(), Origin::Store),
                &eff.recovery,
            );
        }
        result
    }

    pub(super) fn keys(&self, subject: &str) -> Result<Vec<String>, RateLimitError> {
        Ok(rate_keys(&self.key_heads, subject)?)
    }

    /// One round trip, bounded by the deadline and the in-flight limit.
    pub(super) async fn ask_store(
        &self,
        keys: &[String],
        eff: &Effective,
        op: RateOp,
    ) -> Result<RateReply, Unavailable> {
        let Ok(_permit) = self.shared.in_flight.try_acquire() else {
            return Err(Unavailable::Overloaded(self.shared.max_in_flight));
        };
        #[cfg(feature = "test-util")]
        self.shared
            .store_calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let req = RateRequest {
            keys,
            params: &eff.params,
            op,
        };
        let reply = tokio::time::timeout(self.deadline, self.client.store().rate_limit(&req))
            .await
            .map_err(|_| {
                Unavailable::Store(StoreError::Timeout {
                    after: self.deadline,
                })
            })?
            .map_err(Unavailable::Store)?;
        if reply.verdicts.len() == self.policies.len() {
            Ok(reply)
        } else {
            Err(Unavailable::Store(StoreError::Protocol {
                message: format!(
                    "{} verdicts for {} policies",
                    reply.verdicts.len(),
                    self.policies.len()
                ),
            }))
        }
    }

    /// Applies shadow mode to a decision.
    pub(super) fn enforce(&self, subject: &str, mut decision: Decision) -> Decision {
        if self.shadow && !decision.allowed {
            tracing::info!(
                target: "distlock::ratelimit",
                subject,
                policy = &*decision.policy,
                retry_after_ms = u64::try_from(decision.retry_after.as_millis()).unwrap_or(u64::MAX),
                origin = ?decision.origin,
                "shadow mode: the rate limit would have denied this request"
            );
            decision.allowed = true;
            decision.shadowed = true;
        }
        decision
    }

    pub(super) fn on_unavailable(
        &self,
        subject: &str,
        keys: &[String],
        eff: &Effective,
        op: RateOp,
        why: Unavailable,
    ) -> Result<Decision, RateLimitError> {
        let outage = if self.shadow {
            Outage::FailOpen
        } else {
            self.outage
        };
        self.shared.outage_log.unanswered(&why, Some(outage));
        match outage {
            Outage::FailClosed => Err(why.into()),
            Outage::FailOpen => {
                let per_policy = eff
                    .policies
                    .iter()
                    .map(|p| PolicyDecision {
                        policy: Arc::clone(p.shared_name()),
                        allowed: true,
                        limit: u64::from(p.limit()),
                        remaining: u64::from(p.limit()),
                        retry_after: Duration::ZERO,
                        reset_after: Duration::ZERO,
                        locked_out: false,
                        charged: false,
                        lock_left: Duration::ZERO,
                    })
                    .collect();
                Ok(Decision::combine(
                    per_policy,
                    Origin::FailOpen,
                    self.combine,
                ))
            }
            Outage::LocalFallback => {
                let req = RateRequest {
                    keys,
                    params: &eff.params,
                    op,
                };
                let reply = self.shared.fallback.check_rate(&req);
                Ok(self.enforce(subject, self.decision(eff, reply, Origin::LocalFallback)))
            }
        }
    }
}

impl RateLimiter {
    /// The decision the store's reply makes, with the subject's policies, combined as this
    /// limiter combines them.
    pub(super) fn decision(&self, eff: &Effective, reply: RateReply, origin: Origin) -> Decision {
        decision(eff, reply, origin, self.combine)
    }
}

/// The decision the store's reply makes, with the subject's policies, combined as `how`.
fn decision(eff: &Effective, reply: RateReply, origin: Origin, how: Combine) -> Decision {
    let granted = reply.granted;
    // An applied any-of charged one policy; any other applied operation charged them all.
    let charged = |i: usize| reply.applied && reply.charged.is_none_or(|c| c == i);
    let per_policy = eff
        .policies
        .iter()
        .zip(reply.verdicts)
        .enumerate()
        .map(|(i, (p, v))| PolicyDecision {
            policy: Arc::clone(p.shared_name()),
            allowed: v.allowed,
            limit: u64::from(p.limit()),
            remaining: v.remaining,
            retry_after: Duration::from_micros(v.retry_us),
            reset_after: Duration::from_micros(v.reset_us),
            locked_out: v.locked_us > 0,
            charged: charged(i),
            lock_left: Duration::from_micros(v.locked_us),
        })
        .collect();
    let mut decision = Decision::combine(per_policy, origin, how);
    decision.granted = granted;
    decision
}
