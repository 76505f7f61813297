//! Locks: the builder, the acquire loop with waiting, and the scoped `run`.
//!
//! Waiting: after a busy reply the waiter subscribes (once) to the lock's release channel,
//! retries at once (a release may have raced the subscription), then sleeps until a release
//! wakes it or the holder's remaining ttl (plus jitter) has passed, whichever comes first. A
//! lost message therefore costs at most one ttl, never the whole wait. If the subscription
//! cannot be made, it polls with jittered exponential backoff, still never sleeping past the
//! holder's ttl.
//!
//! A listening waiter's attempts mark a busy lock as waited for, and a release publishes only
//! for a marked lock, so uncontended locks cost no PUBLISH. A waiter woken while other local
//! waiters still sleep marks the lock it is granted, for them (see `acquire.lua`).
//!
//! A waiter also queues with its client for a hand-off: a release by a lease of the same
//! client passes the lock straight to the first queued waiter (see `handoff.rs`).

pub(crate) mod handoff;
pub(crate) mod lease;
pub(crate) mod reentrant;
pub(crate) mod timing;
pub(crate) mod watchdog;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use self::handoff::{Handed, Ticket};
pub use self::lease::{Lease, LeaseHandle, ReleaseOutcome, safety_margin};
use self::lease::{LeaseShared, release_in_background};
use crate::Client;
use crate::error::{LockError, StoreError};
use crate::keys::LockKeys;
use crate::store::{AcquireReply, Replicas, Store, Subscription, Waits};
use crate::token::Token;

/// The shortest lease ttl accepted.
pub const MIN_TTL: Duration = Duration::from_millis(10);
/// The longest lease ttl accepted (a lease should be renewed, not set for ever).
pub const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// The default lease ttl.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// A release's wake-up taken by one local waiter. Only the woken waiter's next attempt marks
/// the lock for the waiters still asleep (see `acquire.lua`), so if that attempt never
/// answers (a store error, or the caller gives up), the wake-up is passed on to one of them.
struct WakeUp(Option<Arc<tokio::sync::Notify>>);

impl Drop for WakeUp {
    fn drop(&mut self) {
        if let Some(notify) = self.0.take() {
            notify.notify_one();
        }
    }
}

/// A waiter that has waited this long marks the lock so that its next release reserves it for
/// such waiters, of any client (see `acquire.lua`): a client that releases and re-takes a lock
/// at once cannot keep another client's waiter out for longer than about this, plus a release
/// and a round trip.
pub(crate) const STARVE_AFTER: Duration = Duration::from_millis(20);

/// First and largest sleep of the polling fallback.
const BACKOFF_MIN: Duration = Duration::from_millis(5);
const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// How long to wait for a busy lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Try once; `Busy` if held.
    No,
    /// Up to this long; `Timeout` after.
    Upto(Duration),
    /// Until acquired (or an error).
    Forever,
}

/// Options for one lock acquisition. Start with [`Client::lock`].
///
/// Defaults: ttl 30 s with the watchdog renewing it while held; try once (no waiting); no
/// maximum hold; not reentrant.
#[must_use = "a LockBuilder does nothing until acquire() or run() is awaited"]
#[derive(Debug)]
pub struct LockBuilder {
    client: Client,
    name: String,
    ttl: Duration,
    wait: Wait,
    watchdog: bool,
    max_hold: Option<Duration>,
    reentrant: bool,
    replicas: Option<Replicas>,
}

impl LockBuilder {
    pub(crate) fn new(client: Client, name: String) -> Self {
        let replicas = client.default_replicas();
        Self {
            client,
            name,
            ttl: DEFAULT_TTL,
            wait: Wait::No,
            watchdog: true,
            max_hold: None,
            reentrant: false,
            replicas,
        }
    }

    /// Replica acknowledgement (a single primary with replicas, plain or behind Sentinel):
    /// after the grant, and after every renewal and `extend`, `WAIT count timeout` on the
    /// same connection. A grant fewer than `count` replicas acknowledged within `timeout` is
    /// released and the acquire fails with
    /// [`StoreError::NotReplicated`](crate::StoreError::NotReplicated); such a renewal
    /// counts as failed (retried until the lease's deadline). `count` 0 turns it off (the
    /// default, unless the client sets one). The timeout must be above zero and below the
    /// ttl. See the README ("Failover") for what this buys and what it does not.
    pub fn replicas(mut self, count: u32, timeout: Duration) -> Self {
        self.replicas = (count > 0).then_some(Replicas { count, timeout });
        self
    }

    /// The lease's time to live in the store ([`MIN_TTL`]..=[`MAX_TTL`]). With the watchdog on
    /// it is renewed every ttl/3 while held, so it only bounds how long a crashed holder keeps
    /// the lock.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Waits up to `wait` for a busy lock; `Duration::ZERO` tries once, and `Duration::MAX`
    /// (or any wait too long to be a point in time) waits forever, as
    /// [`wait_forever`](Self::wait_forever).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = if wait.is_zero() {
            Wait::No
        } else if Instant::now().checked_add(wait).is_none() || wait == Duration::MAX {
            Wait::Forever
        } else {
            Wait::Upto(wait)
        };
        self
    }

    /// Waits as long as it takes.
    pub fn wait_forever(mut self) -> Self {
        self.wait = Wait::Forever;
        self
    }

    /// Renew the lease in the background while it is held (default on). Off: the lease
    /// simply expires after its ttl, and its lost signal fires at its safety deadline.
    pub fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = on;
        self
    }

    /// Stops renewing once the lease has been held this long, so a stuck holder cannot keep
    /// the lock for ever. The lease then runs out its last ttl and is lost. The last renewal
    /// (and any [`extend`](Lease::extend)) is cut so that the key expires at `max_hold`.
    /// Zero is refused; `Duration::MAX` (or anything too long to be a point in time) means no
    /// limit.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// For [`run`](Self::run): if this task is already inside a `run` on the same lock of the
    /// same client, join that lease instead of waiting for it (default off here; on in
    /// `#[distributed_lock]`).
    pub fn reentrant(mut self, on: bool) -> Self {
        self.reentrant = on;
        self
    }

    fn validate(&self) -> Result<LockKeys, LockError> {
        let keys = self.client.lock_keys(&self.name)?;
        check_ttl(self.ttl)?;
        if self.max_hold.is_some_and(|m| m.is_zero()) {
            return Err(LockError::InvalidConfig {
                reason: "max_hold must be greater than zero".to_owned(),
            });
        }
        if let Some(r) = self.replicas {
            if r.timeout.is_zero() || r.timeout >= self.ttl {
                return Err(LockError::InvalidConfig {
                    reason: format!(
                        "replicas timeout {:?} must be above zero and below the ttl {:?}",
                        r.timeout, self.ttl
                    ),
                });
            }
            if !self.client.store().waits_for_replicas() {
                return Err(LockError::InvalidConfig {
                    reason: format!(
                        "replica acknowledgement needs a single primary (plain or behind \
                         Sentinel); this client's store is `{}`",
                        self.client.store_kind()
                    ),
                });
            }
        }
        Ok(keys)
    }

    /// Acquires the lock, waiting as configured.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    /// use distlock::LockError;
    ///
    /// let client = distlock::Client::in_memory();
    /// let lease = client.lock("report:daily").ttl(Duration::from_secs(10)).acquire().await?;
    ///
    /// // Without `wait`, a second owner is refused at once, told how long the lock may last.
    /// match client.lock("report:daily").acquire().await {
    ///     Err(LockError::Busy { retry_after, .. }) => assert!(retry_after <= Duration::from_secs(10)),
    ///     other => panic!("expected Busy, got {other:?}"),
    /// }
    ///
    /// // With `wait`, it is handed the lock when the holder releases it.
    /// let waiter = tokio::spawn({
    ///     let client = client.clone();
    ///     async move { client.lock("report:daily").wait(Duration::from_secs(5)).acquire().await }
    /// });
    /// let first_fence = lease.fence();
    /// lease.release().await?;
    /// let next = waiter.await.expect("waiter task")?;
    /// assert!(next.fence() > first_fence);
    /// # Ok(()) }
    /// ```
    ///
    /// Cancel-safe: if this future is dropped at any point after the store may have granted
    /// the lock, the grant is released in the background.
    ///
    /// # Errors
    /// [`LockError::Busy`] (not waiting), [`LockError::Timeout`], [`LockError::Store`] (the
    /// store failed or did not answer in time; no lease was started), [`LockError::InvalidName`]
    /// and [`LockError::InvalidConfig`].
    pub async fn acquire(self) -> Result<Lease, LockError> {
        let keys = self.validate()?;
        let span = tracing::debug_span!("distlock.acquire", lock = %keys.name);
        self.acquire_keys(keys).instrument(span).await
    }

    async fn acquire_keys(&self, keys: LockKeys) -> Result<Lease, LockError> {
        let store = self.client.store();
        let mut token = Token::generate();
        let started = Instant::now();
        let deadline = match self.wait {
            // `wait` made sure it fits.
            Wait::Upto(d) => started.checked_add(d),
            Wait::No | Wait::Forever => None,
        };
        let mut subscription: Option<Subscription> = None;
        let mut subscribe_failed = false;
        let mut backoff = BACKOFF_MIN;
        let mut attempts = 0u32;
        let mut woken_by = "start";
        // The release wake-up this waiter took, if its next attempt has not answered yet.
        let mut wake_up: Option<WakeUp> = None;
        // This waiter's place in its client's queue for a hand-off (see `handoff.rs`).
        let mut ticket: Option<Ticket> = None;
        // Set once this waiter has waited long: releases reserved for such waiters wake it.
        let mut starving: Option<Arc<tokio::sync::Notify>> = None;
        // Set once this waiter has marked the lock as starving.
        let mut unmark: Option<Unmark<'_>> = None;
        loop {
            attempts += 1;
            let starves = started.elapsed() >= STARVE_AFTER;
            if starves
                && starving.is_none()
                && let Some(subscription) = subscription.as_mut()
            {
                starving = Some(subscription.starve());
            }
            // Registered before the attempt, so a release that lands between the attempt and
            // the sleep still wakes us.
            let notify = subscription.as_ref().map(|s| s.notify().clone());
            let mut notified = notify.as_ref().map(|n| Box::pin(n.notified()));
            if let Some(n) = notified.as_mut() {
                n.as_mut().enable();
            }
            let mut notified_starving = starving.as_ref().map(|n| Box::pin(n.notified()));
            if let Some(n) = notified_starving.as_mut() {
                n.as_mut().enable();
            }

            // A listening waiter marks a busy lock, so its release publishes; one that has
            // waited long marks it so that its release reserves it (acquire.lua).
            let waits = match &subscription {
                None if starves && subscribe_failed => Waits::Starving,
                None => Waits::No,
                Some(_) if starves => Waits::Starving,
                Some(_) if store.wakeups().waiters(&keys.channel) > 1 => Waits::WithOthers,
                Some(_) => Waits::Listening,
            };
            let attempt = match self.attempt(store, &keys, &token, waits).await {
                Ok(attempt) => attempt,
                // A quorum that could not decide (nodes down or slow) is retried within the
                // wait, with backoff; the wait ends with this error, which names the nodes.
                Err(LockError::Store(err @ StoreError::NoQuorum { .. })) => {
                    let remaining = match (self.wait, deadline) {
                        (Wait::No, _) => None,
                        (_, Some(deadline)) => deadline.checked_duration_since(Instant::now()),
                        (_, None) => Some(Duration::MAX),
                    };
                    let Some(remaining) = remaining.filter(|r| !r.is_zero()) else {
                        return Err(LockError::Store(err));
                    };
                    tokio::time::sleep((backoff + jitter_for(backoff)).min(remaining)).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    continue;
                }
                Err(err) => return Err(err),
            };
            // A busy attempt as a starving waiter marked the lock for us: if we give up, the
            // mark is taken back (see `unmark.lua`).
            if waits == Waits::Starving && matches!(attempt, Attempt::Busy(_)) && unmark.is_none() {
                unmark = Some(Unmark {
                    client: &self.client,
                    keys: &keys,
                    armed: true,
                });
            }

            // Answered: granted, or busy and marked (the wake-up did its work).
            if let Some(mut used) = wake_up.take() {
                used.0 = None;
            }
            let pttl = match attempt {
                Attempt::Granted(shared) => {
                    // Ours now: any mark went with the old holder's value.
                    disarm(&mut unmark);
                    return Ok(self.acquired(shared, attempts, started, woken_by));
                }
                Attempt::Busy(pttl) => pttl,
            };
            // Handed the lock while this attempt was on the wire (it found its own new token).
            if let Some(handed) = ticket.as_mut().and_then(Ticket::try_handed) {
                ticket = None;
                if let Some(lease) = self.take(&keys, handed, &mut token, attempts, started) {
                    disarm(&mut unmark);
                    return Ok(lease);
                }
                continue;
            }
            let now = Instant::now();
            let busy_for = pttl.unwrap_or(BACKOFF_MAX);
            let remaining = match (self.wait, deadline) {
                (Wait::No, _) => {
                    return Err(LockError::Busy {
                        name: keys.name.clone(),
                        retry_after: busy_for,
                    });
                }
                (_, Some(deadline)) if now >= deadline => {
                    if let Some(unmark) = unmark.as_mut() {
                        let others = subscription
                            .as_ref()
                            .is_some_and(Subscription::others_starving);
                        unmark.now(others).await;
                    }
                    return Err(LockError::Timeout {
                        name: keys.name.clone(),
                        waited: now - started,
                    });
                }
                (_, Some(deadline)) => deadline - now,
                (_, None) => Duration::MAX,
            };
            if subscription.is_none() && !subscribe_failed {
                match store.wakeups().subscribe(&keys.channel).await {
                    Ok(s) => {
                        subscription = Some(s);
                        woken_by = "subscribed";
                        continue;
                    }
                    Err(err) => {
                        tracing::debug!(error = %err, "distlock: cannot subscribe to releases; polling");
                        subscribe_failed = true;
                    }
                }
            }
            if ticket.is_none() && store.hands_off() {
                ticket = Some(Ticket::join(&self.client, &keys, self.ttl));
            }
            let jitter = jitter_for(busy_for);
            let mut sleep = busy_for.saturating_add(jitter);
            if subscription.is_none() {
                sleep = sleep.min(backoff + jitter_for(backoff));
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
            let sleep = sleep.min(remaining);
            let handed = async {
                match ticket.as_mut() {
                    Some(ticket) => ticket.handed().await,
                    None => std::future::pending().await,
                }
            };
            let released = async {
                match notified {
                    Some(n) => n.await,
                    None => std::future::pending().await,
                }
            };
            let reserved = async {
                match notified_starving {
                    Some(n) => n.await,
                    None => std::future::pending().await,
                }
            };
            woken_by = tokio::select! {
                // A grant handed over wins a tie with the timer: it is already ours.
                biased;
                handed = handed => {
                    ticket = None;
                    if let Some(lease) = self.take(&keys, handed, &mut token, attempts, started) {
                        disarm(&mut unmark);
                        return Ok(lease);
                    }
                    "release"
                }
                () = reserved => {
                    wake_up = starving.as_ref().map(|n| WakeUp(Some(n.clone())));
                    "reserved"
                }
                () = released => {
                    wake_up = notify.as_ref().map(|n| WakeUp(Some(n.clone())));
                    "release"
                }
                () = tokio::time::sleep(sleep) => "timer",
            };
        }
    }

    /// A releaser's word to this waiter (see `handoff.rs`): the lease if it was handed the
    /// lock, else `None` to try again at once (with the token the word names, if any). A
    /// grant already past its safety deadline (this future was not polled for a long time)
    /// is given back rather than used.
    fn take(
        &self,
        keys: &LockKeys,
        handed: Handed,
        token: &mut Token,
        attempts: u32,
        started: Instant,
    ) -> Option<Lease> {
        match handed {
            Handed::Granted {
                token: given,
                fence,
                sent_at,
                in_row,
            } => {
                let mut shared = self.shared(keys, given, fence, sent_at);
                if shared.valid_until() <= Instant::now() {
                    release_in_background(self.client.clone(), keys.clone(), shared.token);
                    return None;
                }
                shared.handed_in_row = in_row;
                Some(self.acquired(Arc::new(shared), attempts, started, "handoff"))
            }
            Handed::Retry { token: given } => {
                if let Some(given) = given {
                    *token = given;
                }
                None
            }
        }
    }

    /// The state of a lease granted under `token` and `fence`, its ttl counted from `sent_at`.
    fn shared(&self, keys: &LockKeys, token: Token, fence: u64, sent_at: Instant) -> LeaseShared {
        let mut shared = LeaseShared::new(
            keys.clone(),
            token,
            fence,
            self.ttl,
            sent_at,
            self.watchdog,
            self.max_hold,
        );
        shared.replicas = self.replicas;
        shared
    }

    /// Starts the lease just granted.
    fn acquired(
        &self,
        shared: Arc<LeaseShared>,
        attempts: u32,
        started: Instant,
        woken_by: &str,
    ) -> Lease {
        tracing::debug!(
            fence = shared.fence,
            attempts,
            waited_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            woken_by,
            "distlock: acquired"
        );
        Lease::new(self.client.clone(), shared)
    }

    /// One acquire round trip, released in the background if it is cancelled or its outcome
    /// is unknown.
    async fn attempt(
        &self,
        store: &Store,
        keys: &LockKeys,
        token: &Token,
        waits: Waits,
    ) -> Result<Attempt, LockError> {
        let mut guard = GrantGuard {
            client: &self.client,
            keys,
            token,
            armed: true,
        };
        let sent_at = Instant::now();
        // An error (not replicated, no answer) leaves the guard armed: a grant it may have
        // made is released.
        let reply = store
            .acquire(keys, token, self.ttl, waits, self.replicas)
            .await?;
        guard.armed = false;
        Ok(match reply {
            AcquireReply::Granted { fence } => {
                Attempt::Granted(Arc::new(self.shared(keys, token.clone(), fence, sent_at)))
            }
            AcquireReply::Busy { pttl } => Attempt::Busy(pttl),
            AcquireReply::Unreplicated { acked, wanted } => {
                guard.armed = true;
                return Err(LockError::Store(StoreError::NotReplicated {
                    acked,
                    wanted,
                }));
            }
        })
    }

    /// Acquires the lock, runs `body` while it is held, and releases it.
    ///
    /// The body is raced against the lease's lost signal: if the lease is lost, the body is
    /// dropped at its next await point and `Err(LeaseLost)` is returned. A body that runs to
    /// completion first returns its value, **whatever the release then finds**: its work is
    /// done (a caller that retried on an error would do it twice), and it finished while the
    /// lease was, as far as this process could tell, still valid. A release that finds the
    /// lock already gone or taken (the key was deleted or evicted behind the holder's back)
    /// is logged at WARN; [`run_reporting`](Self::run_reporting) returns it. Inside the body,
    /// [`current_lease`](crate::current_lease) returns the lease.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock::LockError> {
    /// let client = distlock::Client::in_memory();
    /// let fence = client.lock("job:nightly").run(|lease| async move { lease.fence() }).await?;
    /// assert!(fence > 0);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// Those of [`acquire`](Self::acquire), and [`LockError::LeaseLost`] if the lease was lost
    /// before the body finished.
    pub async fn run<F, Fut, T>(self, body: F) -> Result<T, LockError>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        Ok(self.run_reporting(body).await?.value)
    }

    /// As [`run`](Self::run), and also says what the release found.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock::LockError> {
    /// use distlock::ReleaseOutcome;
    ///
    /// let client = distlock::Client::in_memory();
    /// let report = client.lock("job:nightly").run_reporting(|_| async { 42 }).await?;
    /// assert_eq!(report.value, 42);
    /// assert!(matches!(report.release, Some(Ok(ReleaseOutcome::Released))));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub async fn run_reporting<F, Fut, T>(self, body: F) -> Result<RunReport<T>, LockError>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let keys = self.validate()?;
        let client_id = self.client.inner.id;
        if self.reentrant
            && let Some(outer) = reentrant::find(client_id, &keys.lock)
        {
            outer.ensure_held()?;
            let fence = outer.fence();
            let value = guarded(outer.clone(), body(outer)).await?;
            return Ok(RunReport {
                value,
                fence,
                release: None,
            });
        }
        let lock_key = keys.lock.clone();
        let lease = self.acquire().await?;
        let handle = lease.handle();
        let fence = handle.fence();
        let value = reentrant::scope(
            client_id,
            lock_key,
            handle.clone(),
            guarded(handle.clone(), body(handle)),
        )
        .await?;
        let release = lease.release().await;
        match &release {
            Ok(ReleaseOutcome::Released) => {}
            Ok(outcome) => {
                tracing::warn!(lock = %keys.name, fence, ?outcome, "distlock: the body finished, but the release found the lock no longer ours; returning the body's value");
            }
            Err(err) => {
                // The work is done; the key expires after its ttl.
                tracing::warn!(lock = %keys.name, fence, error = %err, "distlock: release after run failed");
            }
        }
        Ok(RunReport {
            value,
            fence,
            release: Some(release),
        })
    }
}

/// What [`LockBuilder::run_reporting`] ran: the body's value, and what the release found.
#[derive(Debug)]
#[non_exhaustive]
pub struct RunReport<T> {
    /// The body's value.
    pub value: T,
    /// The fence of the lease the body ran under.
    pub fence: u64,
    /// What the release found: `Released` normally; `AlreadyExpired` or `HeldByOther` if the
    /// key was gone or taken when the body had finished; an error if the store did not
    /// answer. `None` when the run joined an enclosing lease (reentrant) and released
    /// nothing.
    pub release: Option<Result<ReleaseOutcome, LockError>>,
}

/// Refuses a lease ttl outside [`MIN_TTL`]`..=`[`MAX_TTL`] (the builder's and `extend`'s
/// bounds).
pub(crate) fn check_ttl(ttl: Duration) -> Result<(), LockError> {
    if (MIN_TTL..=MAX_TTL).contains(&ttl) {
        return Ok(());
    }
    Err(LockError::InvalidConfig {
        reason: format!(
            "ttl {ttl:?} is out of range: it must be between {MIN_TTL:?} and {MAX_TTL:?}"
        ),
    })
}

/// Runs `body` until it finishes or the lease is lost, whichever is first (loss wins a tie).
async fn guarded<Fut: Future>(handle: LeaseHandle, body: Fut) -> Result<Fut::Output, LockError> {
    tokio::select! {
        biased;
        () = handle.lost() => Err(handle.lost_error()),
        value = body => Ok(value),
    }
}

/// The lease held by the innermost [`LockBuilder::run`] (or `#[distributed_lock]` function)
/// this task is inside of: its fence, its lost signal.
#[must_use]
pub fn current_lease() -> Option<LeaseHandle> {
    reentrant::innermost()
}

enum Attempt {
    Granted(Arc<LeaseShared>),
    Busy(Option<Duration>),
}

/// The starving mark a waiter left on a lock (see `unmark.lua`): taken back when it gives up,
/// at once when it times out, in the background when it is cancelled.
struct Unmark<'a> {
    client: &'a Client,
    keys: &'a LockKeys,
    armed: bool,
}

impl Unmark<'_> {
    /// The waiter timed out: take the mark back before saying so, unless another waiter of
    /// this client still starves on the lock (`others`). Best effort.
    async fn now(&mut self, others: bool) {
        if !std::mem::take(&mut self.armed) || others {
            return;
        }
        if let Err(err) = self.client.store().unmark(self.keys).await {
            tracing::debug!(lock = %self.keys.name, error = %err, "distlock: could not take a starving mark back; the next release reserves the lock for a claim");
        }
    }
}

/// The waiter got the lock: there is no mark of its own to take back.
fn disarm(unmark: &mut Option<Unmark<'_>>) {
    if let Some(unmark) = unmark {
        unmark.armed = false;
    }
}

impl Drop for Unmark<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (client, keys) = (self.client.clone(), self.keys.clone());
        runtime.spawn(async move {
            // Another waiter of this client may still starve on it; its next attempt marks
            // the lock again.
            let _ = client.store().unmark(&keys).await;
        });
    }
}

/// Releases a possible grant if the attempt is cancelled or fails without a clear answer.
struct GrantGuard<'a> {
    client: &'a Client,
    keys: &'a LockKeys,
    token: &'a Token,
    armed: bool,
}

impl Drop for GrantGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            release_in_background(self.client.clone(), self.keys.clone(), self.token.clone());
        }
    }
}

/// A random extra sleep of up to a tenth of `base` (at most 50 ms), so waiters spread out.
fn jitter_for(base: Duration) -> Duration {
    let max = u64::try_from((base / 10).min(Duration::from_millis(50)).as_micros()).unwrap_or(0);
    Duration::from_micros(rand::random_range(0..=max))
}
