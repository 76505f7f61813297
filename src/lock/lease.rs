//! Leases: a held lock, its fencing token and its lost signal.
//!
//! A lease can be trusted until its **local safety deadline**: the send time of the request
//! that last set its ttl, plus that ttl, minus a drift allowance, all on the monotonic clock.
//! The store cannot expire the key before then (its clock started later), so code that checks
//! [`LeaseHandle::is_lost`] before a step knows the lock was still held when it checked. The
//! watchdog moves the deadline forward with each renewal.
//!
//! A lock's lease mints its **fence** when first asked ([`LeaseHandle::fence`]), in one round
//! trip that mints only while the store still holds the lease's token, and keeps it; an eager
//! lease ([`LockBuilder::fenced`](crate::LockBuilder::fenced)), and every lease of the other
//! primitives, got it with the grant. Either way a fence is above that of every earlier lease
//! on the name that minted one: that lease minted while it held the lock, so before this one
//! was granted.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::context::LockContext;
use super::hold::held_after;
use super::metrics::Primitive;
use super::options::check_ttl;
use super::state::LeaseState;
use super::timing::{Answer, ExpiryOp, OpKind};
use crate::error::{LockError, LossReason, StoreError};
use crate::store::{MintReply, Ownership};

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// The lock was ours and is no longer: it is free (and its waiters were woken), or it
    /// was handed straight to a waiter of the same client.
    Released,
    /// The key had already expired (nobody held it). Whatever ran under the lease may have
    /// overlapped with another holder.
    AlreadyExpired,
    /// Another owner holds the lock now: ours expired and was taken. Nothing was changed.
    HeldByOther,
}

impl From<Ownership> for ReleaseOutcome {
    fn from(held: Ownership) -> Self {
        match held {
            Ownership::Ours => Self::Released,
            Ownership::Expired => Self::AlreadyExpired,
            Ownership::Theirs => Self::HeldByOther,
        }
    }
}

/// A cheap, cloneable view of a lease: its fence and its lost signal, for the code that works
/// under the lock (tasks it spawns, the body of [`LockBuilder::run`](crate::LockBuilder::run)).
/// It cannot release the lease.
#[derive(Clone)]
pub struct LeaseHandle {
    pub(crate) shared: Arc<LeaseState>,
}

impl std::fmt::Debug for LeaseHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseHandle")
            .field("name", &self.shared.hold.name())
            .field("fence", &self.shared.minted_fence())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl LeaseHandle {
    /// The name of what the lease holds: the lock's, the semaphore's or the read-write
    /// lock's.
    #[must_use]
    pub fn name(&self) -> &str {
        self.shared.hold.name()
    }

    /// The fencing token: strictly greater than that of every earlier lease on this name that
    /// has one. Pass it to the resource you protect and have it refuse writes with a smaller
    /// token; that keeps a holder that was paused past its ttl from doing harm.
    ///
    /// A lock's lease mints it here, the first time it is asked for: one round trip, which
    /// mints only while the store still holds this lease (so no lease that has lost its lock
    /// ever gets a fence). Later calls, and every call on an eager lease
    /// ([`LockBuilder::fenced`](crate::LockBuilder::fenced)) or on a lease of a semaphore, a
    /// read-write lock, a multi-lock or an election, answer at once. Concurrent first calls
    /// share one mint.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// let client = distlock::Client::in_memory();
    /// let lease = client.lock("invoice:7").acquire().await?;
    /// assert_eq!(lease.minted_fence(), None); // nothing minted yet
    /// let fence = lease.fence().await?; // minted now, while the lock is held
    /// assert_eq!(lease.fence().await?, fence); // and kept
    /// assert_eq!(lease.minted_fence(), Some(fence));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LockError::LeaseLost`] if the lease is lost, released or past its safety deadline
    /// (its reason is [`LossReason::NotHeld`] when the store said the lock is no longer this
    /// lease's: the lease then ends, as if a renewal had said so); [`LockError::Store`] if
    /// the store did not answer (nothing is known: ask again).
    pub async fn fence(&self) -> Result<u64, LockError> {
        if let Some(fence) = self.shared.minted_fence() {
            return Ok(fence);
        }
        // Boxed: the mint (a round trip on whichever store) would otherwise make every
        // future that awaits a fence as large as the largest store's mint.
        self.shared
            .fence
            .get_or_try_init(|| Box::pin(self.mint()))
            .await
            .copied()
    }

    /// The fence if it has been minted (with the grant, or by an earlier
    /// [`fence`](Self::fence)); `None` otherwise. Never asks the store.
    #[must_use]
    pub fn minted_fence(&self) -> Option<u64> {
        self.shared.minted_fence()
    }

    /// Mints this lease's fence in the store, if the store still holds the lease.
    async fn mint(&self) -> Result<u64, LockError> {
        self.ensure_held()?;
        let shared = &self.shared;
        let Some(keys) = shared.lock_keys() else {
            // Only a lock key's grant leaves its fence for later.
            return Err(LockError::Store(StoreError::Protocol {
                message: "a lease that holds no lock key has no fence to mint".to_owned(),
            }));
        };
        match shared.store.mint(keys, &shared.token).await {
            Ok(MintReply::Minted(fence)) => Ok(fence),
            Ok(MintReply::Not(_)) => {
                shared.end(LossReason::NotHeld);
                Err(self.lost_error())
            }
            Err(err) => Err(LockError::Store(err)),
        }
    }

    /// Whether the lease has ended or can no longer be trusted (past its local safety
    /// deadline, lost, or released). Checks the deadline itself, so it is right even right
    /// after the process resumes from a pause.
    #[must_use]
    pub fn is_lost(&self) -> bool {
        self.shared.check_deadline()
    }

    /// `Err(LeaseLost)` if [`is_lost`](Self::is_lost); call it before each step that needs the
    /// lock.
    pub fn ensure_held(&self) -> Result<(), LockError> {
        if self.is_lost() {
            return Err(self.lost_error());
        }
        Ok(())
    }

    /// Why the lease ended, once it has.
    #[must_use]
    pub fn lost_reason(&self) -> Option<LossReason> {
        self.shared.check_deadline();
        self.shared.reason.get().copied()
    }

    /// How long the lease can still be trusted without another renewal (zero once lost).
    #[must_use]
    pub fn valid_for(&self) -> Duration {
        if self.is_lost() {
            return Duration::ZERO;
        }
        self.shared
            .valid_until()
            .saturating_duration_since(Instant::now())
    }

    /// Resolves when the lease ends or can no longer be trusted: released, taken over, or
    /// past its safety deadline. It watches the deadline itself, so it fires on time even if
    /// no renewal answer ever comes, as long as the runtime runs its timers on time.
    ///
    /// It also reads the clock each time it is polled: a task that races it against its work
    /// (as [`LockBuilder::run`](crate::LockBuilder::run) does, loss first) sees the loss at
    /// its first poll past the deadline, even if the runtime was starved of CPU and has not
    /// yet fired the deadline's timer. A task that only awaits this signal is woken by that
    /// timer, so on a starved machine it can learn of the loss late; check
    /// [`is_lost`](Self::is_lost) before each step that needs the lock.
    pub async fn lost(&self) {
        loop {
            let until = self.shared.valid_until();
            tokio::select! {
                biased;
                () = self.shared.ended.cancelled() => return,
                // Never registers a waker: the two other branches wake this future, and any
                // other wake-up of the task (its work being ready) polls it too.
                () = std::future::poll_fn(|_| {
                    if self.shared.check_deadline() {
                        std::task::Poll::Ready(())
                    } else {
                        std::task::Poll::Pending
                    }
                }) => return,
                () = tokio::time::sleep_until(until) => {
                    if self.shared.check_deadline() {
                        return;
                    }
                }
            }
        }
    }

    /// A token cancelled when the lease is lost, for code built on `tokio_util`'s
    /// `CancellationToken`. It is a child token: cancelling it does not end the lease.
    #[must_use]
    pub fn cancellation_token(&self) -> CancellationToken {
        self.shared.ended.child_token()
    }

    pub(crate) fn lost_error(&self) -> LockError {
        LockError::LeaseLost {
            name: self.shared.hold.name().to_owned(),
            reason: self
                .shared
                .reason
                .get()
                .copied()
                .unwrap_or(LossReason::Expired),
        }
    }
}

/// A held lock. Release it with [`Lease::release`]; dropping it releases it in the background
/// (best effort, never blocking). It dereferences to a [`LeaseHandle`] for the fence and the
/// lost signal.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock::LockError> {
/// use std::time::Duration;
/// use distlock::ReleaseOutcome;
///
/// let client = distlock::Client::in_memory();
/// let lease = client.lock("invoice:7").ttl(Duration::from_secs(5)).acquire().await?;
///
/// // Check before each step that needs the lock, and give the fence to what you write to
/// // (minted now, on first use, while the lock is held).
/// lease.ensure_held()?;
/// let fence = lease.fence().await?;
/// assert!(lease.valid_for() > Duration::ZERO);
///
/// // A step that may take longer: reset the ttl (the watchdog keeps renewing with it).
/// lease.extend(Duration::from_secs(20)).await?;
///
/// // Work spawned elsewhere can watch for loss through a handle.
/// let handle = lease.handle();
/// let watcher = tokio::spawn(async move { handle.lost().await });
///
/// assert_eq!(lease.release().await?, ReleaseOutcome::Released);
/// watcher.await.expect("watcher"); // released: the lost signal fires too
/// # let _ = fence;
/// # Ok(()) }
/// ```
#[must_use = "dropping a Lease releases the lock at once"]
pub struct Lease {
    handle: LeaseHandle,
    client: LockContext,
    /// `None`: granted as the client closed for shutdown, so never watched (see
    /// [`Lease::granted`]).
    watch_id: Option<u64>,
    done: bool,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.handle.fmt(f)
    }
}

impl std::ops::Deref for Lease {
    type Target = LeaseHandle;
    fn deref(&self) -> &LeaseHandle {
        &self.handle
    }
}

impl Lease {
    /// A lease on `shared`, a grant of a `kind` primitive (a multi-lock's locks are each a
    /// lock).
    pub(crate) fn new(client: LockContext, shared: Arc<LeaseState>, kind: Primitive) -> Self {
        // Counted before the watchdog sees it: the watchdog may end it at once.
        shared.metrics.granted(kind);
        shared.event("acquired");
        let watch_id = client.watchdog().watch(shared.clone());
        Self {
            handle: LeaseHandle { shared },
            client,
            watch_id,
            done: false,
        }
    }

    /// [`new`](Self::new), or `Err(ShuttingDown)` if the client closed for shutdown before
    /// the lease could be watched: the grant is then given back in the background (the drain
    /// did not see it, so nobody else would).
    pub(crate) fn granted(
        client: LockContext,
        shared: Arc<LeaseState>,
        kind: Primitive,
    ) -> Result<Self, LockError> {
        let lease = Self::new(client, shared, kind);
        if lease.watch_id.is_none() {
            return Err(LockError::ShuttingDown {
                name: lease.name().to_owned(),
            });
        }
        Ok(lease)
    }

    /// Whether the client closed before this lease could be watched (see
    /// [`granted`](Self::granted)).
    pub(crate) fn refused(&self) -> bool {
        self.watch_id.is_none()
    }

    /// Ends the lease locally: fires its signal and stops the watchdog for it. `None` when a
    /// drain has already given the lease back for its holder (its reason is
    /// [`LossReason::Shutdown`]): nothing is left to send.
    fn finish(&mut self) -> Option<Arc<LeaseState>> {
        self.done = true;
        let shared = self.handle.shared.clone();
        shared.end(LossReason::Released);
        if let Some(id) = self.watch_id {
            self.client.watchdog().unwatch(id);
        }
        (shared.end_reason() != Some(LossReason::Shutdown)).then_some(shared)
    }

    /// A cloneable view of this lease.
    #[must_use]
    pub fn handle(&self) -> LeaseHandle {
        self.handle.clone()
    }

    /// Sets the lease to expire `ttl` from now (the watchdog, if on, keeps renewing with this
    /// ttl). `ttl` has the builder's bounds ([`MIN_TTL`](crate::MIN_TTL) to
    /// [`MAX_TTL`](crate::MAX_TTL)), and the lease never outlives its
    /// [`max_hold`](crate::LockBuilder::max_hold): past what remains of it, the ttl is cut.
    ///
    /// Takes turns with the watchdog: if a renewal is on the wire, this waits for its answer
    /// first, so the two can never be applied out of order. Never re-creates an expired lock:
    /// if the lock is no longer ours, the lease is marked lost and `Err(LeaseLost)` is
    /// returned.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] for a ttl out of bounds, [`LockError::MaxHoldReached`]
    /// once `max_hold` has passed, [`LockError::LeaseLost`], and [`LockError::Store`] (the
    /// outcome is unknown: the local deadline then assumes the earlier of the two expiries).
    pub async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        check_ttl(ttl).map_err(crate::error::InvalidOption::lock_error)?;
        self.ensure_held()?;
        let shared = &self.handle.shared;
        let store = self.client.store();
        let limit = store.op_timeout();
        let permit = tokio::time::timeout(limit, shared.op.take())
            .await
            .map_err(|_| StoreError::Timeout { after: limit })?;
        // A renewal answered meanwhile may have found the lease gone.
        self.ensure_held()?;
        let Some(op) = ExpiryOp::start(&shared.op, permit, OpKind::Extend(ttl)) else {
            return Err(LockError::MaxHoldReached {
                name: shared.hold.name().to_owned(),
            });
        };
        let items = shared
            .hold
            .renewals(&shared.token, op.ttl(), shared.replicas);
        let renewed = store
            .renew(&items)
            .await
            .map(|answers| held_after(&[items.len()], &answers));
        let result = match renewed {
            Ok(Some(held)) if held.as_slice() == [Ownership::Ours] => {
                op.finish(Answer::Held);
                Ok(())
            }
            Ok(_) => {
                op.finish(Answer::NotHeld);
                shared.end(LossReason::NotHeld);
                Err(self.lost_error())
            }
            Err(err) => {
                op.finish(Answer::Unknown);
                Err(LockError::Store(err))
            }
        };
        // The next renewal (or the deadline) moved: let the watchdog look again.
        self.client.watchdog().poke();
        result
    }

    /// Releases the lock (the permits, the read or write hold) if it is still ours: hands a
    /// lock to a waiter of the same client if one is queued for it, else frees it and wakes
    /// the waiters that asked. A lease with a [`min_hold`](crate::LockBuilder::min_hold) that
    /// has not passed yet is not freed but left to expire when it has (its key's expiry is
    /// set to what remains), which counts as released. Bounded by the client's response
    /// timeout; stops the watchdog for this lease whatever the outcome.
    ///
    /// A lease that [`Client::shutdown`](crate::Client::shutdown) already gave back answers
    /// `Released` without a round trip (the drain's report says what its release found).
    pub async fn release(mut self) -> Result<ReleaseOutcome, LockError> {
        let Some(shared) = self.finish() else {
            return Ok(ReleaseOutcome::Released);
        };
        let held = end(&self.client, &shared).await?;
        let outcome = ReleaseOutcome::from(held);
        if outcome != ReleaseOutcome::Released {
            tracing::warn!(lock = %shared.hold.name(), ?outcome, "released a lease that was no longer held");
        }
        Ok(outcome)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let Some(shared) = self.finish() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.client.clone();
        runtime.spawn(async move {
            if let Err(err) = end(&client, &shared).await {
                tracing::debug!(lock = %shared.hold.name(), error = %err, "background release failed; the key expires after its ttl");
            }
        });
    }
}

/// Gives up a lease in the store: keeps it until its minimum hold has passed (setting its
/// expiry to what remains), or hands it off, or releases it. A closed client hands nothing
/// off: its waiters are giving up, and the lock should go to another client at once.
pub(crate) async fn end(
    client: &LockContext,
    shared: &LeaseState,
) -> Result<Ownership, StoreError> {
    let store = client.store();
    let keep = shared.timing().min_hold_left(Instant::now());
    if let Some(keep) = keep {
        let items = shared.hold.renewals(&shared.token, keep, None);
        let answers = store.renew(&items).await?;
        let held = held_after(&[items.len()], &answers);
        return Ok(held
            .and_then(|held| held.first().copied())
            .unwrap_or(Ownership::Expired));
    }
    // Only a lock key can pass to a waiter (waiters queue for locks only). A lease that needs
    // replica acknowledgement is released the ordinary way: a hand-off would give the waiter
    // a grant no replica acknowledged.
    if let Some(keys) = shared.lock_keys()
        && shared.replicas.is_none()
        && !client.core().is_closed()
        && let Some(handed) = super::handoff::pass_on(
            client.handoffs(),
            store,
            keys,
            &shared.token,
            shared.handed_in_row,
        )
        .await
    {
        return handed;
    }
    shared.hold.release(store, &shared.token).await
}
