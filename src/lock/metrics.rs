//! The locks' metrics (the `metrics` feature; [`describe_metrics`](crate::describe_metrics)
//! describes them with the rate limiters', which live in `ratelimit/metrics.rs`). Each
//! function here compiles to nothing without the feature, so the code that decides (the
//! acquire loop, a lease's end, a hand-off) calls it unconditionally.
//!
//! Labels are bounded: a primitive's kind, a loss reason, a policy name, an outcome and an
//! origin. A lock name, a subject or a token is never a label: there are as many of them as
//! the application makes (one series each), and a subject may be a user's identity.

#[cfg(feature = "metrics")]
use std::sync::OnceLock;
use std::time::Duration;

#[cfg(feature = "metrics")]
use tokio::time::Instant;

use crate::error::LossReason;

#[cfg(feature = "metrics")]
mod names {
    pub(super) const ACQUIRED: &str = "distlock_lock_acquired_total";
    pub(super) const BUSY: &str = "distlock_lock_busy_total";
    pub(super) const TIMEOUT: &str = "distlock_lock_timeout_total";
    pub(super) const LOST: &str = "distlock_lock_lost_total";
    pub(super) const HANDOFF: &str = "distlock_lock_handoff_total";
    pub(super) const WAIT: &str = "distlock_lock_wait_seconds";
    pub(super) const HOLD: &str = "distlock_lock_hold_seconds";
    pub(super) const HELD: &str = "distlock_leases_held";
    pub(super) const WAITERS: &str = "distlock_lock_waiters";
}

/// Describes the locks' metrics (see [`describe_metrics`](crate::describe_metrics)).
#[cfg(feature = "metrics")]
pub(crate) fn describe() {
    use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        names::ACQUIRED,
        "Grants: locks, semaphore permits, read and write holds, multi-locks (label kind)"
    );
    describe_counter!(
        names::BUSY,
        "Acquires that did not wait and found the lock held (label kind)"
    );
    describe_counter!(
        names::TIMEOUT,
        "Acquires whose wait ran out before a grant (label kind)"
    );
    describe_counter!(
        names::LOST,
        "Leases that ended without being released: not_held (the store no longer holds it for this owner) or expired (no renewal before the safety deadline) (labels kind, reason)"
    );
    describe_counter!(
        names::HANDOFF,
        "Releases that passed a lock straight to a waiter of the same client"
    );
    describe_histogram!(
        names::WAIT,
        Unit::Seconds,
        "From the start of an acquire to its grant (label kind)"
    );
    describe_histogram!(
        names::HOLD,
        Unit::Seconds,
        "From a grant to the end of its lease, released or lost (label kind)"
    );
    describe_gauge!(names::HELD, "Leases this process holds now (label kind)");
    describe_gauge!(
        names::WAITERS,
        "Acquires of this process waiting for a busy lock now (label kind)"
    );
}

/// The primitive a lock metric is about: its `kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Primitive {
    Lock,
    Semaphore,
    Read,
    Write,
    Multi,
    Hierarchy,
}

#[cfg(feature = "metrics")]
impl Primitive {
    fn label(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Semaphore => "semaphore",
            Self::Read => "read",
            Self::Write => "write",
            Self::Multi => "multi",
            Self::Hierarchy => "hierarchy",
        }
    }
}

/// An acquire was granted after waiting `waited` (from its start).
pub(crate) fn acquired(kind: Primitive, waited: Duration) {
    #[cfg(feature = "metrics")]
    {
        ::metrics::counter!(names::ACQUIRED, "kind" => kind.label()).increment(1);
        ::metrics::histogram!(names::WAIT, "kind" => kind.label()).record(waited.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, waited);
}

/// An acquire that does not wait found the lock held.
pub(crate) fn busy(kind: Primitive) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(names::BUSY, "kind" => kind.label()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = kind;
}

/// An acquire's wait ran out.
pub(crate) fn timed_out(kind: Primitive) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(names::TIMEOUT, "kind" => kind.label()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = kind;
}

/// A release passed a lock to a waiter of its client.
pub(crate) fn handed_off() {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(names::HANDOFF).increment(1);
}

/// One waiter counted in `distlock_lock_waiters` from [`start`](Self::start) until it is
/// dropped: granted, refused, failed or cancelled.
pub(crate) struct Waiting {
    #[cfg(feature = "metrics")]
    kind: Primitive,
}

impl Waiting {
    pub(crate) fn start(kind: Primitive) -> Self {
        #[cfg(feature = "metrics")]
        {
            ::metrics::gauge!(names::WAITERS, "kind" => kind.label()).increment(1.0);
            Self { kind }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = kind;
            Self {}
        }
    }
}

#[cfg(feature = "metrics")]
impl Drop for Waiting {
    fn drop(&mut self) {
        ::metrics::gauge!(names::WAITERS, "kind" => self.kind.label()).decrement(1.0);
    }
}

/// A lease's part in `distlock_leases_held`, `distlock_lock_hold_seconds` and
/// `distlock_lock_lost_total`: counted once it is a [`Lease`](crate::Lease)
/// ([`granted`](Self::granted)), and uncounted once, when it ends ([`ended`](Self::ended),
/// which the lease calls for its first end only), however it ends.
pub(crate) struct LeaseMetrics {
    #[cfg(feature = "metrics")]
    granted: OnceLock<(Primitive, Instant)>,
}

impl LeaseMetrics {
    pub(crate) fn new() -> Self {
        Self {
            #[cfg(feature = "metrics")]
            granted: OnceLock::new(),
        }
    }

    /// The lease was granted and handed to its holder.
    pub(crate) fn granted(&self, kind: Primitive) {
        #[cfg(feature = "metrics")]
        if self.granted.set((kind, Instant::now())).is_ok() {
            ::metrics::gauge!(names::HELD, "kind" => kind.label()).increment(1.0);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = kind;
    }

    /// The lease ended for `reason` (called once).
    pub(crate) fn ended(&self, reason: LossReason) {
        #[cfg(feature = "metrics")]
        if let Some((kind, since)) = self.granted.get() {
            let kind = kind.label();
            ::metrics::gauge!(names::HELD, "kind" => kind).decrement(1.0);
            ::metrics::histogram!(names::HOLD, "kind" => kind)
                .record(since.elapsed().as_secs_f64());
            let reason = match reason {
                LossReason::Released | LossReason::Shutdown => return,
                LossReason::NotHeld => "not_held",
                LossReason::Expired => "expired",
            };
            ::metrics::counter!(names::LOST, "kind" => kind, "reason" => reason).increment(1);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = reason;
    }
}
