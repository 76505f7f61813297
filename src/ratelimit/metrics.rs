//! The rate limiters' metrics (the `metrics` feature): decisions, check latency, checks the
//! store did not answer and what the outage policy made of them, and the circuit breaker's
//! state. Each function compiles to nothing without the feature.
//!
//! Labels are bounded: a policy name, an outcome, an origin, a reason. A subject is never a
//! label (there are as many as the application makes, and one may be a user's identity).

use std::sync::Arc;
#[cfg(feature = "metrics")]
use tokio::time::Instant;

use super::Decision;
#[cfg(feature = "metrics")]
use super::Origin;

#[cfg(feature = "metrics")]
mod names {
    pub(super) const DECISIONS: &str = "distlock_ratelimit_decisions_total";
    pub(super) const CHECK: &str = "distlock_ratelimit_check_seconds";
    pub(super) const UNAVAILABLE: &str = "distlock_ratelimit_unavailable_total";
    pub(super) const BREAKER_OPEN: &str = "distlock_ratelimit_breaker_open";
}

/// Describes the rate limiters' metrics (see [`describe_metrics`](crate::describe_metrics)).
#[cfg(feature = "metrics")]
pub(crate) fn describe() {
    use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        names::DECISIONS,
        "Rate-limit decisions, by binding policy, outcome (allowed, denied, locked_out: denied by a lockout's block, shadow_denied) and origin (store, deny_cache, local_fallback, fail_open)"
    );
    describe_histogram!(
        names::CHECK,
        Unit::Seconds,
        "Duration of a rate-limit check or reservation, deny-cache hits and fallbacks included (label policy: the limiter's first)"
    );
    describe_counter!(
        names::UNAVAILABLE,
        "Rate-limit operations the store did not answer, by reason (store: an error or a missed deadline; overloaded: too many checks in flight; circuit_open: the breaker skipped the store) and what the outage policy made of them (failed_closed, failed_open, local_fallback; error for a reset, refund or penalty) (label policy: the limiter's first)"
    );
    describe_gauge!(
        names::BREAKER_OPEN,
        "Limiters whose circuit breaker skips the store now, until it answers again: 1 for a limiter alone under its first policy's name (label policy: the limiter's first)"
    );
}

/// A rate-limit decision given to the caller (a check, a reservation, an `acquire`'s
/// outcome): counted under its binding policy. Peeks (cost 0) consume nothing and are not
/// counted.
pub(crate) fn decided(decision: &Decision, cost: u32) {
    #[cfg(feature = "metrics")]
    {
        if cost == 0 {
            return;
        }
        let outcome = if decision.shadowed {
            "shadow_denied"
        } else if decision.allowed {
            "allowed"
        } else if decision.locked_out {
            "locked_out"
        } else {
            "denied"
        };
        let origin = match decision.origin {
            Origin::Store => "store",
            Origin::DenyCache => "deny_cache",
            Origin::LocalFallback => "local_fallback",
            Origin::FailOpen => "fail_open",
            Origin::LocalShare => "local_share",
        };
        ::metrics::counter!(
            names::DECISIONS,
            "policy" => Arc::clone(&decision.policy),
            "outcome" => outcome,
            "origin" => origin,
        )
        .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (decision, cost);
}

/// Times one rate-limit check or reservation, for `distlock_ratelimit_check_seconds`.
pub(crate) struct CheckTimer {
    #[cfg(feature = "metrics")]
    started: Instant,
}

impl CheckTimer {
    pub(crate) fn start() -> Self {
        Self {
            #[cfg(feature = "metrics")]
            started: Instant::now(),
        }
    }

    /// The check is over, for the limiter whose first policy is `policy`.
    pub(crate) fn done(self, policy: &Arc<str>) {
        #[cfg(feature = "metrics")]
        ::metrics::histogram!(names::CHECK, "policy" => Arc::clone(policy))
            .record(self.started.elapsed().as_secs_f64());
        #[cfg(not(feature = "metrics"))]
        let _ = policy;
    }
}

/// Why the store gave no answer, as a label.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reason {
    Store,
    Overloaded,
    CircuitOpen,
}

/// What came of an operation the store did not answer, as a label.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outcome {
    FailedClosed,
    FailedOpen,
    LocalFallback,
    /// A reset, refund or penalty: only the store can do them.
    Error,
}

/// The store did not answer an operation of the limiter whose first policy is `policy`.
pub(crate) fn unavailable(policy: &Arc<str>, reason: Reason, outcome: Outcome) {
    #[cfg(feature = "metrics")]
    {
        let reason = match reason {
            Reason::Store => "store",
            Reason::Overloaded => "overloaded",
            Reason::CircuitOpen => "circuit_open",
        };
        let outcome = match outcome {
            Outcome::FailedClosed => "failed_closed",
            Outcome::FailedOpen => "failed_open",
            Outcome::LocalFallback => "local_fallback",
            Outcome::Error => "error",
        };
        ::metrics::counter!(
            names::UNAVAILABLE,
            "policy" => Arc::clone(policy),
            "reason" => reason,
            "outcome" => outcome,
        )
        .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (policy, reason, outcome);
}

/// A limiter whose first policy is `policy` saw its circuit breaker skip the store (`true`),
/// or the store answer again after that. The gauge counts such limiters (1 for a limiter
/// alone under its policy name), up and down like every gauge of distlock's.
pub(crate) fn breaker_open(policy: &Arc<str>, open: bool) {
    #[cfg(feature = "metrics")]
    {
        let gauge = ::metrics::gauge!(names::BREAKER_OPEN, "policy" => Arc::clone(policy));
        if open {
            gauge.increment(1.0);
        } else {
            gauge.decrement(1.0);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (policy, open);
}
