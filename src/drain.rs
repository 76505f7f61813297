//! A graceful drain: closing a client for shutdown, listing the leases it holds, and giving
//! them all back before the process exits, so that the waiters of other processes get them at
//! once instead of after their ttl.
//!
//! The list is the watchdog's: every lease of a client is watched from its grant to its end
//! (renewed if it renews, its deadline enforced either way), so the watchdog's map is the
//! client's own leases, with or without renewal. Closing is a cancellation token in the
//! client's core: the one acquire loop gives up when it fires, and the watchdog refuses to
//! watch a lease once it has fired (checked under the map's lock), so a drain that empties the
//! map after firing it misses no lease: a grant that raced the close is refused and given back
//! by the acquire that made it.

use std::time::{Duration, SystemTime};

use futures_util::future::join_all;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{LockError, LossReason, RateLimitError, StoreError};
pub use crate::lock::kind::LeaseKind;
use crate::lock::state::LeaseState;
use crate::store::Ownership;

/// One lease this client holds, as [`Client::own_leases`] and [`ShutdownReport`] list it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OwnLease {
    /// The name of what it holds (the lock's, the semaphore's, the election's, ...).
    pub name: String,
    /// What it is.
    pub kind: LeaseKind,
    /// When it was granted, on this process's wall clock.
    pub since: SystemTime,
    /// Its fence, if minted (with the grant, or by a `fence()` call since). Listing never
    /// mints one.
    pub fence: Option<u64>,
}

impl OwnLease {
    fn of(lease: &LeaseState) -> Self {
        Self {
            name: lease.hold.name().to_owned(),
            kind: lease.kind(),
            since: lease.granted_at,
            fence: lease.minted_fence(),
        }
    }
}

/// A lease a drain could not give back, and why. Its key expires after its ttl (what the
/// watchdog had last set), at the latest.
#[derive(Debug)]
#[non_exhaustive]
pub struct NotReleased {
    /// The lease.
    pub lease: OwnLease,
    /// Why: [`LockError::Store`] when the store failed or the deadline passed first
    /// ([`StoreError::Timeout`] with the deadline); [`LockError::LeaseLost`] when the store
    /// no longer held it for this client (it had expired or been taken: nothing to give back).
    pub error: LockError,
}

/// What [`Client::shutdown`] did. Empty for a second shutdown (nothing was left).
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// The leases given back (waiters of other clients woken; a lease with a
    /// [`min_hold`](crate::LockBuilder::min_hold) not yet over is left to expire when it is
    /// over, which counts as given back).
    pub released: Vec<OwnLease>,
    /// The leases it could not give back before the deadline, or found no longer held.
    pub not_released: Vec<NotReleased>,
    /// Units the client's hybrid rate limiters held in shares and gave back
    /// ([`RateLimiter::return_shares`](crate::ratelimit::RateLimiter::return_shares)), so that
    /// the other replicas can use them at once.
    pub shares_returned: u64,
    /// Why some shares could not be given back (one error per limiter that failed, the
    /// deadline's as [`StoreError::Timeout`]); their units return as the policies refill.
    pub share_errors: Vec<RateLimitError>,
    /// How long the drain took.
    pub took: Duration,
}

impl ShutdownReport {
    /// Whether the drain found nothing to give back.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.released.is_empty()
            && self.not_released.is_empty()
            && self.shares_returned == 0
            && self.share_errors.is_empty()
    }
}

impl Client {
    /// Closes the client for shutdown, without giving anything back yet: from now on this
    /// client and its clones grant no new lease (locks, semaphore permits, read and write
    /// holds, multi-locks, campaigns, job runs refuse with [`LockError::ShuttingDown`]), and
    /// the acquires and campaigns waiting now end with that error at once. Leases already held
    /// stay held, renewed as before, so work in flight finishes under them; then call
    /// [`shutdown`](Self::shutdown) to give them back. Idempotent; there is no reopening
    /// (build another client).
    ///
    /// Rate limiters, Bloom filters and fenced resources keep working: a shutting-down
    /// service still answers the requests it has (a hybrid limiter leases no new share: what
    /// its shares cannot answer is checked exactly). A client built with
    /// [`counting_on`](crate::ClientBuilder::counting_on) takes its semaphores and read-write
    /// locks on the other client: close (and shut down) that one too.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock::LockError> {
    /// use distlock::LockError;
    ///
    /// let client = distlock::Client::in_memory();
    /// let in_flight = client.lock("order:1").acquire().await?;
    /// client.close();
    /// assert!(matches!(
    ///     client.lock("order:2").acquire().await,
    ///     Err(LockError::ShuttingDown { .. })
    /// ));
    /// in_flight.ensure_held()?; // still held: finish the work, then release or drain
    /// # Ok(()) }
    /// ```
    pub fn close(&self) {
        let core = self.core();
        if !core.is_closed() {
            tracing::info!(prefix = core.prefix(), "client closed: no new leases");
        }
        core.closing().cancel();
    }

    /// Whether [`close`](Self::close) or [`shutdown`](Self::shutdown) was called on this
    /// client or a clone.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.core().is_closed()
    }

    /// The leases this client (with its clones) holds now: every lease granted through it and
    /// not yet released or lost, whether the watchdog renews it or not, with its name, kind,
    /// grant time and fence if minted. No round trip: what this process knows (a lease can
    /// be lost in the store before this process learns it). For the holders of a name across
    /// every client, ask the store ([`Client::lock_state`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock::LockError> {
    /// use distlock::LeaseKind;
    ///
    /// let client = distlock::Client::in_memory();
    /// let lease = client.lock("order:1").acquire().await?;
    /// let permit = client.semaphore("exports", 2).acquire().await?;
    /// let mut held = client.own_leases();
    /// held.sort_by(|a, b| a.name.cmp(&b.name));
    /// assert_eq!((held[0].name.as_str(), held[0].kind), ("exports", LeaseKind::Permits));
    /// assert_eq!((held[1].name.as_str(), held[1].kind), ("order:1", LeaseKind::Lock));
    /// assert_eq!(held[1].fence, None); // not minted yet
    /// # drop((lease, permit)); Ok(()) }
    /// ```
    #[must_use]
    pub fn own_leases(&self) -> Vec<OwnLease> {
        self.locks()
            .watchdog()
            .live()
            .iter()
            .map(|lease| OwnLease::of(lease))
            .collect()
    }

    /// Drains the client for a graceful shutdown: [closes](Self::close) it (nothing new is
    /// granted, waiting acquires and campaigns end with [`LockError::ShuttingDown`]), then
    /// gives back every lease it holds, all at once, and returns what it gave back and what it
    /// could not before `deadline` (from now). Each lease's lost signal fires first, with
    /// [`LossReason::Shutdown`], so the work under it stops; then its release wakes the
    /// waiters of every other client at once (nothing is handed to this client's own
    /// waiters, which are giving up). An election's leader resigns this way: a campaigner
    /// elsewhere takes over without waiting out the ttl. The client's hybrid rate limiters
    /// give their unused shares back (and, from the close on, lease no new ones: checks a
    /// share cannot answer are exact). A lease whose
    /// [`min_hold`](crate::LockBuilder::min_hold) (a job's `at_least`) has not passed is kept
    /// until it has, as its holder's release would.
    ///
    /// The guards the application still holds become lost leases: their `release()` answers
    /// `Released` without a round trip, and dropping them sends nothing. What the drain could
    /// not give back expires after its ttl. A second call (or a concurrent one) finds nothing
    /// left and returns an empty report.
    ///
    /// Call it last, once the work in flight has finished (after axum's graceful shutdown,
    /// say): the leases it gives back are no longer held, whatever still runs under them.
    /// See the guide's [graceful drain](crate::guide::coordination#a-graceful-drain).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    /// use distlock::LossReason;
    ///
    /// let client = distlock::Client::in_memory();
    /// let lease = client.lock("order:1").acquire().await?;
    /// let report = client.shutdown(Duration::from_secs(5)).await;
    /// assert_eq!(report.released.len(), 1);
    /// assert_eq!(lease.lost_reason(), Some(LossReason::Shutdown));
    /// assert!(client.shutdown(Duration::from_secs(5)).await.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self, deadline: Duration) -> ShutdownReport {
        let started = Instant::now();
        self.close();
        let context = self.locks();
        let leases = context.watchdog().take_all();
        // Everyone working under a lease stops first; the releases follow.
        for lease in &leases {
            lease.end(LossReason::Shutdown);
        }
        let until = started.checked_add(deadline);
        let releases = leases.iter().map(|lease| async move {
            let release = crate::lock::lease::end(context, lease);
            let outcome = match until {
                Some(until) => tokio::time::timeout_at(until, release)
                    .await
                    .unwrap_or(Err(StoreError::Timeout { after: deadline })),
                None => release.await,
            };
            (OwnLease::of(lease), outcome)
        });
        let limiters = self.inner.hybrids.take();
        let returns = limiters.iter().map(|limiter| async move {
            match until {
                Some(until) => tokio::time::timeout_at(until, limiter.return_shares())
                    .await
                    .unwrap_or_else(|_| Err(StoreError::Timeout { after: deadline }.into())),
                None => limiter.return_shares().await,
            }
        });
        let (released, returned) = tokio::join!(join_all(releases), join_all(returns));
        let mut report = ShutdownReport::default();
        for result in returned {
            match result {
                Ok(units) => report.shares_returned += units,
                Err(err) => {
                    tracing::warn!(error = %err, "shutdown could not give back a hybrid rate limiter's shares; they return as the policy refills");
                    report.share_errors.push(err);
                }
            }
        }
        for (lease, outcome) in released {
            let error = match outcome {
                Ok(Ownership::Ours) => {
                    report.released.push(lease);
                    continue;
                }
                Ok(Ownership::Expired | Ownership::Theirs) => LockError::LeaseLost {
                    name: lease.name.clone(),
                    reason: LossReason::NotHeld,
                },
                Err(err) => LockError::Store(err),
            };
            tracing::warn!(lock = %lease.name, kind = %lease.kind, %error, "shutdown could not give a lease back; it expires after its ttl");
            report.not_released.push(NotReleased { lease, error });
        }
        report.took = started.elapsed();
        let counting = self.counting();
        if !std::sync::Arc::ptr_eq(&counting.inner, &self.inner) {
            let held = counting.own_leases().len();
            if held > 0 {
                tracing::warn!(
                    held,
                    "the client this one counts on (counting_on) still holds leases (semaphores, \
                     read-write locks); shut it down too to give them back"
                );
            }
        }
        if !report.is_empty() {
            tracing::info!(
                released = report.released.len(),
                not_released = report.not_released.len(),
                shares_returned = report.shares_returned,
                took_ms = u64::try_from(report.took.as_millis()).unwrap_or(u64::MAX),
                "client drained"
            );
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::LeaseKind;

    #[test]
    fn a_kind_survives_its_index() {
        for kind in [
            LeaseKind::Lock,
            LeaseKind::Permits,
            LeaseKind::Read,
            LeaseKind::Write,
            LeaseKind::MultiLock,
            LeaseKind::ElectionTerm,
            LeaseKind::JobRun,
            LeaseKind::Hierarchy,
        ] {
            assert_eq!(LeaseKind::from_index(kind.index()), kind);
        }
    }
}
