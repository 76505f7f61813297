//! A granted lease's state, shared by the [`Lease`](super::Lease), its handles and the
//! watchdog: what it holds, under which token and fence, its timing, and its lost signal.
//! Below the lease and the watchdog, so that both can take it without importing each other.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{MutexGuard, OnceLock};
use std::time::{Duration, SystemTime};

use tokio::sync::OnceCell;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::hold::Hold;
use super::kind::LeaseKind;
use super::metrics::LeaseMetrics;
use super::timing::{OpGate, Timing};
use crate::error::LossReason;
use crate::keys::LockKeys;
use crate::store::{Replicas, Store};
use crate::token::Token;

/// A grant, as the store made it: what it holds, under which token (and fence, if the grant
/// minted one), and when the request that made it was sent and answered (a hand-off's word
/// counts as its answer).
pub(crate) struct Grant {
    pub(crate) hold: Hold,
    pub(crate) token: Token,
    /// `None`: the lease mints its fence when first asked (a lazy lock lease).
    pub(crate) fence: Option<u64>,
    pub(crate) sent_at: Instant,
    pub(crate) answered_at: Instant,
}

/// How a granted lease is kept: the builder's options, once validated.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terms {
    /// The ttl renewals ask for.
    pub(crate) ttl: Duration,
    pub(crate) renews: bool,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) min_hold: Option<Duration>,
    pub(crate) replicas: Option<Replicas>,
    /// Mint the fence with the grant (an eager lease), rather than when first asked.
    pub(crate) fenced: bool,
}

impl Terms {
    /// The ttl the grant itself asks for: the ttl, or the minimum hold if that is longer, so
    /// that a holder that dies right after the grant still keeps it that long.
    pub(crate) fn grant_ttl(&self) -> Duration {
        self.ttl.max(self.min_hold.unwrap_or_default())
    }
}

/// State shared by a lease, its handles and the watchdog.
pub(crate) struct LeaseState {
    pub(crate) hold: Hold,
    pub(crate) token: Token,
    /// The lease's fence once minted: with the grant (an eager lease, and every lease that is
    /// not a lock's), or at the first `fence()` (see `lease.rs`), once.
    pub(crate) fence: OnceCell<u64>,
    /// Where a lazy lease mints its fence.
    pub(crate) store: Store,
    /// How many times in a row the lock had been handed off when this lease got it (0 when
    /// it was acquired the ordinary way; see `handoff.rs`).
    pub(crate) handed_in_row: u32,
    /// The lease's timing, and one expiry-setting op (renewal or extend) on the wire at a
    /// time (see `timing.rs`).
    pub(crate) op: OpGate,
    /// Replica acknowledgement every renewal and extend needs, if any.
    pub(crate) replicas: Option<Replicas>,
    pub(super) ended: CancellationToken,
    pub(super) reason: OnceLock<LossReason>,
    pub(super) metrics: LeaseMetrics,
    /// What the lease is, as [`Client::own_leases`](crate::Client::own_leases) names it
    /// ([`LeaseKind`] as its index): set by whoever hands the lease out.
    kind: AtomicU8,
    /// When the grant was answered, on the wall clock (for listings only: the lease's timing
    /// is on the monotonic clock).
    pub(crate) granted_at: SystemTime,
}

impl LeaseState {
    /// The state of `grant`, kept on `terms`, minting its fence (if it has none yet) on
    /// `store`.
    pub(crate) fn new(grant: Grant, terms: &Terms, store: &Store) -> Self {
        // Counted from the answer: the grant was made no later than that, so the key lives
        // at least `min_hold` past it whatever the clocks of this process and the store.
        let min_hold_until = terms
            .min_hold
            .and_then(|min| grant.answered_at.checked_add(min));
        Self {
            hold: grant.hold,
            token: grant.token,
            fence: OnceCell::new_with(grant.fence),
            store: store.clone(),
            handed_in_row: 0,
            op: OpGate::new(Timing::granted(
                terms.ttl,
                terms.grant_ttl(),
                grant.sent_at,
                terms.renews,
                terms.max_hold,
                min_hold_until,
            )),
            replicas: terms.replicas,
            ended: CancellationToken::new(),
            reason: OnceLock::new(),
            metrics: LeaseMetrics::new(),
            kind: AtomicU8::new(LeaseKind::Lock.index()),
            granted_at: SystemTime::now(),
        }
    }

    /// What the lease is, for listings.
    pub(crate) fn kind(&self) -> LeaseKind {
        LeaseKind::from_index(self.kind.load(Ordering::Relaxed))
    }

    /// Names what the lease is (an election's term, a job's run, a multi-lock's part).
    pub(crate) fn set_kind(&self, kind: LeaseKind) {
        self.kind.store(kind.index(), Ordering::Relaxed);
    }

    /// Why the lease ended, if it has.
    pub(crate) fn end_reason(&self) -> Option<LossReason> {
        self.reason.get().copied()
    }

    /// The lock's keys, for a lease that holds a lock key.
    pub(crate) fn lock_keys(&self) -> Option<&LockKeys> {
        match &self.hold {
            Hold::Key(keys) => Some(keys),
            Hold::Writer(_) | Hold::Entries { .. } | Hold::Path { .. } => None,
        }
    }

    /// The lease's timing; changed only through [`ExpiryOp`](super::timing::ExpiryOp).
    pub(crate) fn timing(&self) -> MutexGuard<'_, Timing> {
        self.op.timing()
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.timing().valid_until()
    }

    pub(crate) fn is_ended(&self) -> bool {
        self.ended.is_cancelled()
    }

    /// Ends the lease for `reason` (the first reason wins) and fires the lost signal.
    /// The fence, if minted.
    pub(crate) fn minted_fence(&self) -> Option<u64> {
        self.fence.get().copied()
    }

    pub(crate) fn end(&self, reason: LossReason) {
        if self.reason.set(reason).is_ok() {
            if !matches!(reason, LossReason::Released | LossReason::Shutdown) {
                tracing::warn!(lock = %self.hold.name(), fence = self.minted_fence(), %reason, "lease lost");
            }
            let event = match reason {
                LossReason::Released => "released",
                LossReason::NotHeld => "lost",
                LossReason::Expired => "expired",
                LossReason::Shutdown => "drained",
            };
            self.event(event);
            self.metrics.ended(reason);
        }
        self.ended.cancel();
    }

    /// A lock event for dashboards (`distlock::events` at DEBUG; see the guide's
    /// operations): what happened, to which lock, for which holder. Never the token.
    pub(crate) fn event(&self, event: &'static str) {
        tracing::debug!(
            target: "distlock::events",
            event,
            lock = %self.hold.name(),
            holder = crate::holder::parse_token(self.token.as_str())
                .map(|h| h.identity)
                .as_deref()
                .unwrap_or(""),
            fence = self.minted_fence(),
        );
    }

    pub(super) fn check_deadline(&self) -> bool {
        if self.is_ended() {
            return true;
        }
        if Instant::now() >= self.valid_until() {
            self.end(LossReason::Expired);
            return true;
        }
        false
    }
}
