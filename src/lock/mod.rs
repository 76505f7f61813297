//! Locks and the primitives built on the same leases: the lock builder and its scoped `run`,
//! semaphores ([`semaphore`]), read-write locks ([`rwlock`]), multi-locks ([`multi`]) and
//! scheduled jobs ([`job`]). Each is a [`Claim`](wait::Claim) that the one acquire loop
//! (`wait.rs`) waits for, and each grant is a [`Lease`] whose [`Hold`](hold::Hold) says what
//! its renewals and its release send: the watchdog, the lost signal, fencing and waiting with
//! wake-ups are the same for all of them.

pub(crate) mod context;
pub(crate) mod fair;
pub(crate) mod handoff;
pub(crate) mod hierarchy;
pub(crate) mod hold;
pub(crate) mod job;
pub(crate) mod kind;
pub(crate) mod lease;
pub(crate) mod metrics;
pub(crate) mod multi;
pub(crate) mod options;
pub(crate) mod reentrant;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
pub(crate) mod state;
pub(crate) mod timing;
pub(crate) mod wait;
pub(crate) mod watchdog;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use self::context::LockContext;
use self::handoff::Handed;
use self::hold::{Hold, release_in_background};
use self::kind::LeaseKind;
pub use self::lease::{Lease, LeaseHandle, ReleaseOutcome};
use self::metrics::Primitive;
pub use self::options::LockOptions;
#[cfg(feature = "serde")]
pub(crate) use self::options::OptionValue;
use self::options::lease_options;
use self::state::{Grant, LeaseState, Terms};
pub use self::timing::safety_margin;
use self::wait::{Attempt, Claim};
pub use crate::error::InvalidOption;
use crate::error::{InvalidName, LockError};
use crate::keys::LockKeys;
use crate::store::{Acquire, Capability, Waits};
use crate::token::Token;

pub use distlock_grammar::{DEFAULT_TTL, MAX_TTL, MIN_TTL};

/// Options for one lock acquisition. Start with [`Client::lock`](crate::Client::lock).
///
/// Defaults: ttl 30 s with the watchdog renewing it while held; try once (no waiting); no
/// maximum or minimum hold; not reentrant; the fence minted when first asked for
/// ([`fenced`](Self::fenced) mints it with the grant).
#[must_use = "a LockBuilder does nothing until acquire() or run() is awaited"]
#[derive(Debug)]
pub struct LockBuilder {
    client: LockContext,
    /// The lock's keys, built once with the builder (an invalid name fails `acquire`).
    keys: Result<LockKeys, InvalidName>,
    options: LockOptions,
    /// What the lease is, as the client lists it: a lock, or an election's term or a job's
    /// run built on one.
    kind: LeaseKind,
}

impl LockBuilder {
    pub(crate) fn new(client: LockContext, name: String) -> Self {
        let keys = client.core().lock_keys_of(name);
        Self {
            client,
            keys,
            options: LockOptions::new(),
            kind: LeaseKind::Lock,
        }
    }

    /// Names the lease this builder grants as `kind` in the client's listing (elections and
    /// jobs are locks underneath).
    pub(crate) fn listed_as(mut self, kind: LeaseKind) -> Self {
        self.kind = kind;
        self
    }

    /// Replica acknowledgement (a single primary with replicas, plain or behind Sentinel):
    /// after the grant, and after every renewal and `extend`, `WAIT count timeout` on the
    /// same connection. A grant fewer than `count` replicas acknowledged within `timeout` is
    /// released and the acquire fails with
    /// [`StoreError::NotReplicated`](crate::StoreError::NotReplicated); such a renewal
    /// counts as failed (retried until the lease's deadline). `count` 0 turns it off (the
    /// default, unless the client sets one). The timeout must be above zero and below the
    /// ttl. See the guide's
    /// [replica acknowledgement](crate::guide::guarantees#replica-acknowledgement) for what
    /// this buys, what it costs and what it does not buy.
    pub fn replicas(mut self, count: u32, timeout: Duration) -> Self {
        self.options = self.options.replicas(count, timeout);
        self
    }

    lease_options!(options);

    /// The options set so far (for `LockConfig::apply`, which changes only those it sets).
    #[cfg(feature = "serde")]
    pub(crate) fn current_options(&self) -> &LockOptions {
        &self.options
    }

    /// Every option at once, as a service keeps them (from a configuration file's
    /// [`LockConfig::options`](crate::config::LockConfig::options), say): replaces what
    /// earlier setters set; later setters change single options again.
    pub fn options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// Keeps the lock at least this long after it was granted, even once released: a
    /// release before then does not free the key but sets its expiry to what remains, and
    /// the grant, every renewal and every `extend` ask for at least that much, so a holder
    /// that crashes keeps it as long too. This is ShedLock's `lockAtLeastFor`: a job that ran
    /// quickly on one replica is not run again by another whose clock is a little behind
    /// (see [`Client::job`](crate::Client::job)). Counted from when the grant's answer arrived; waiters learn the
    /// new expiry at their next attempt. At most [`MAX_TTL`], and not longer than
    /// [`max_hold`](Self::max_hold) (which wins); zero means none.
    pub fn min_hold(mut self, min_hold: Duration) -> Self {
        self.options = self.options.min_hold(min_hold);
        self
    }

    /// An eager lease: the grant mints the lease's fence, so
    /// [`fence`](LeaseHandle::fence) answers at once and
    /// [`minted_fence`](LeaseHandle::minted_fence) has it from the start.
    ///
    /// By default a lease mints its fence when first asked for (one round trip, only while
    /// the lock is held), so a lease that never asks pays nothing for it: its uncontended
    /// acquire is the `SET key token NX PX ttl` a raw client sends. An eager grant is a
    /// script instead (the `SET`, the server's `TIME` and a write of the fence key), which
    /// costs the server about four times as much per acquire; choose it when every holder
    /// writes under its fence, to save the mint's round trip. Both kinds of fence are
    /// ordered together: see the guide's
    /// [fencing tokens](crate::guide::guarantees#fencing-tokens).
    pub fn fenced(mut self) -> Self {
        self.options = self.options.fenced(true);
        self
    }

    /// A fair lock: granted in the order its waiters arrived, across processes, as Redisson's
    /// `RFairLock`. Each waiter holds a place in a queue kept beside the lock, and the lock
    /// goes only to the first in line (an acquire that does not wait is refused while anyone
    /// queues). A waiter keeps its place by asking again at least every second; one that
    /// vanished (killed, cut off) is skipped once its place runs out, within 3 s, and one that
    /// gives up (its wait ran out, its future was dropped) leaves at once. The lease is a
    /// lock's: the same watchdog, lost signal, fence and release.
    ///
    /// Every acquirer of the name must ask for it fair: a plain acquire of the same name
    /// takes the lock whenever it is free, queue or not. A fair acquire costs a script call
    /// where a plain one is a `SET` (see the benchmarks), and a release wakes every waiter of
    /// this client to let the first in line through. Not on a Redlock quorum
    /// ([`LockError::UnsupportedStore`]): its nodes would each order the waiters differently.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    ///
    /// let client = distlock::Client::in_memory();
    /// let held = client.lock("payouts").fair().acquire().await?;
    /// let first = tokio::spawn({
    ///     let client = client.clone();
    ///     async move { client.lock("payouts").fair().wait(Duration::from_secs(5)).acquire().await }
    /// });
    /// while client.fair_queue_len("payouts").await? < 1 {
    ///     tokio::task::yield_now().await;
    /// }
    /// // Someone queues: even with the lock free, a newcomer that does not wait is refused.
    /// held.release().await?;
    /// assert!(client.lock("payouts").fair().acquire().await.is_err());
    /// first.await.expect("task")?.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn fair(mut self) -> Self {
        self.options = self.options.fair(true);
        self
    }

    /// For [`run`](Self::run): if this task is already inside a `run` on the same lock of the
    /// same client, join that lease instead of waiting for it (default off here; on in
    /// `#[distributed_lock]`).
    pub fn reentrant(mut self, on: bool) -> Self {
        self.options = self.options.reentrant(on);
        self
    }

    fn validate(&self) -> Result<(LockKeys, Terms), LockError> {
        let keys = self.keys.clone()?;
        let terms = self.options.validate(self.client.core())?;
        Ok((keys, terms))
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
    /// let first_fence = lease.fence().await?;
    /// lease.release().await?;
    /// let next = waiter.await.expect("waiter task")?;
    /// assert!(next.fence().await? > first_fence);
    /// # Ok(()) }
    /// ```
    ///
    /// Cancel-safe: if this future is dropped at any point after the store may have granted
    /// the lock, the grant is released in the background.
    ///
    /// # Errors
    /// [`LockError::Busy`] (not waiting), [`LockError::Timeout`], [`LockError::Store`] (the
    /// store failed or did not answer in time; no lease was started), [`LockError::InvalidName`]
    /// and [`LockError::InvalidConfig`]. A waiting acquire rides out
    /// [transient](crate::StoreError::is_transient) store errors, such as a failover, while its wait
    /// lasts (for at most [`store_patience`](Self::store_patience), 30 s, of nothing but
    /// errors), and returns the last one if the wait runs out; without a wait, the first store
    /// error is returned.
    pub async fn acquire(self) -> Result<Lease, LockError> {
        let (keys, terms) = self.validate()?;
        self.acquire_validated(keys, terms).await
    }

    /// [`acquire`](Self::acquire) once the options are checked.
    async fn acquire_validated(self, keys: LockKeys, terms: Terms) -> Result<Lease, LockError> {
        let span = tracing::debug_span!("distlock.acquire", lock = %keys.name);
        let identity = self.options.identity_on(self.client.core());
        if self.options.fair {
            return self
                .acquire_fair(keys, terms, identity)
                .instrument(span)
                .await;
        }
        async {
            let mut claim = LockClaim {
                client: &self.client,
                token: Token::mint(&identity),
                identity,
                from_handoff: false,
                restamp: false,
                keys,
                terms,
            };
            let granted = self.options.wait_for(&self.client, &mut claim).await?;
            self.lease_of(granted, false)
        }
        .instrument(span)
        .await
    }

    /// A fair lock's acquire (see [`fair`](Self::fair)).
    async fn acquire_fair(
        self,
        keys: LockKeys,
        terms: Terms,
        identity: Arc<str>,
    ) -> Result<Lease, LockError> {
        let keys = fair::keys_of(&self.client, keys);
        let joins = !self.options.wait.is_zero();
        let mut claim = fair::FairClaim::new(&self.client, keys, terms, identity, joins);
        let granted = self.options.wait_for(&self.client, &mut claim).await?;
        drop(claim);
        self.lease_of(granted, true)
    }

    /// The lease of a grant the acquire loop reached, listed as this builder's kind.
    fn lease_of(
        &self,
        (shared, how): (Arc<LeaseState>, wait::Acquired),
        fair: bool,
    ) -> Result<Lease, LockError> {
        tracing::debug!(
            fair,
            fence = shared.minted_fence(),
            attempts = how.attempts,
            waited_ms = how.waited_ms(),
            woken_by = how.woken_by,
            "acquired"
        );
        let lease = Lease::granted(self.client.clone(), shared, Primitive::Lock)?;
        lease.handle().shared.set_kind(self.kind);
        Ok(lease)
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
    /// let fence = client.lock("job:nightly").run(|lease| async move { lease.fence().await }).await??;
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
        let (keys, terms) = self.validate()?;
        let client_id = self.client.core().id();
        if self.options.reentrant
            && let Some(outer) = reentrant::find(client_id, &keys.lock)
        {
            outer.ensure_held()?;
            let value = guarded(outer.clone(), body(outer.clone())).await?;
            return Ok(RunReport {
                value,
                fence: outer.minted_fence(),
                release: None,
            });
        }
        let lock_key = keys.lock.clone();
        let lease = self.acquire_validated(keys, terms).await?;
        let handle = lease.handle();
        let value = reentrant::scope(
            client_id,
            lock_key,
            handle.clone(),
            guarded(handle.clone(), body(handle)),
        )
        .await?;
        Ok(released_after(lease, value).await)
    }
}

/// What [`LockBuilder::run_reporting`] ran: the body's value, and what the release found.
#[derive(Debug)]
#[non_exhaustive]
pub struct RunReport<T> {
    /// The body's value.
    pub value: T,
    /// The fence of the lease the body ran under, if it was minted (the body asked for it,
    /// or the lease was [eager](LockBuilder::fenced)).
    pub fence: Option<u64>,
    /// What the release found: `Released` normally; `AlreadyExpired` or `HeldByOther` if the
    /// key was gone or taken when the body had finished; an error if the store did not
    /// answer. `None` when the run joined an enclosing lease (reentrant) and released
    /// nothing.
    pub release: Option<Result<ReleaseOutcome, LockError>>,
}

/// Runs `body` under `lease`, dropped at its next await point if the lease is lost, then
/// releases the lease and reports what the release found (see [`released_after`]).
pub(crate) async fn run_under<F, Fut, T>(lease: Lease, body: F) -> Result<RunReport<T>, LockError>
where
    F: FnOnce(LeaseHandle) -> Fut,
    Fut: Future<Output = T>,
{
    let handle = lease.handle();
    let value = guarded(handle.clone(), body(handle)).await?;
    Ok(released_after(lease, value).await)
}

/// Releases `lease` after a body that finished under it, and reports what the release found.
/// The value is the body's whatever the release finds: its work is done, and a caller that
/// retried on an error would do it twice. A release that finds the hold gone or taken is
/// logged at WARN.
async fn released_after<T>(lease: Lease, value: T) -> RunReport<T> {
    let name = lease.name().to_owned();
    let fence = lease.minted_fence();
    let release = lease.release().await;
    match &release {
        Ok(ReleaseOutcome::Released) => {}
        Ok(outcome) => {
            tracing::warn!(lock = %name, fence, ?outcome, "the body finished, but the release found the lock no longer ours; returning the body's value");
        }
        Err(err) => {
            // The work is done; the key expires after its ttl.
            tracing::warn!(lock = %name, fence, error = %err, "release after run failed");
        }
    }
    RunReport {
        value,
        fence,
        release: Some(release),
    }
}

/// One lock to take, for the acquire loop.
struct LockClaim<'a> {
    client: &'a LockContext,
    keys: LockKeys,
    terms: Terms,
    /// The token attempts ask with (a hand-off may give another one to retry with).
    token: Token,
    /// The holder identity its tokens carry.
    identity: Arc<str>,
    /// `token` came from a hand-off whose outcome is unknown: keep it until granted, since
    /// that hand-off may still give the lock under it.
    from_handoff: bool,
    /// The last attempt was answered busy: the next one takes a fresh token (see
    /// [`Claim::after_busy`]).
    restamp: bool,
}

impl LockClaim<'_> {
    /// The state of a lease granted under `token` (and `fence`, if the grant minted it), by
    /// a request sent at `sent_at`.
    fn granted(&self, token: Token, fence: Option<u64>, sent_at: Instant) -> LeaseState {
        let grant = Grant {
            hold: Hold::Key(self.keys.clone()),
            token,
            fence,
            sent_at,
            answered_at: Instant::now(),
        };
        LeaseState::new(grant, &self.terms, self.client.store())
    }
}

impl Claim for LockClaim<'_> {
    type Granted = Arc<LeaseState>;

    fn name(&self) -> &str {
        &self.keys.name
    }

    fn kind(&self) -> Primitive {
        Primitive::Lock
    }

    fn channel(&self) -> &str {
        &self.keys.channel
    }

    /// One acquire round trip, released in the background if it is cancelled or its outcome
    /// is unknown.
    async fn attempt(&mut self, waits: Waits) -> Result<Attempt<Arc<LeaseState>>, LockError> {
        if std::mem::take(&mut self.restamp) {
            self.token = Token::mint(&self.identity);
        }
        let (store, keys, terms) = (self.client.store(), &self.keys, &self.terms);
        let hold = Hold::Key(keys.clone());
        let req = Acquire {
            keys,
            token: &self.token,
            ttl: terms.grant_ttl(),
            waits,
            replicas: terms.replicas,
            mint: terms.fenced,
        };
        wait::settle(store, hold, &self.token, terms, || store.acquire(&req)).await
    }

    fn lock(&self) -> Option<(&LockKeys, &Terms, &Arc<str>)> {
        Some((&self.keys, &self.terms, &self.identity))
    }

    fn fresh_token(&mut self) {
        self.token = Token::mint(&self.identity);
        self.from_handoff = false;
    }

    /// Where the store asks for it (a Redlock quorum), a waiter keeps its token across busy
    /// attempts: a straggling node's grant from an earlier attempt is then still its own.
    fn after_busy(&mut self) {
        self.restamp = !self.from_handoff && !self.client.store().waiter_keeps_token();
    }

    /// A releaser's word to this waiter (see `handoff.rs`): the lease if it was handed the
    /// lock, else `None` to try again at once (with the token the word names, if any). A
    /// grant already past its safety deadline (this future was not polled for a long time)
    /// is given back rather than used.
    fn take(&mut self, handed: Handed) -> Option<Arc<LeaseState>> {
        match handed {
            Handed::Granted {
                token,
                fence,
                sent_at,
                in_row,
            } => {
                let mut shared = self.granted(token, fence, sent_at);
                if shared.valid_until() <= Instant::now() {
                    release_in_background(
                        self.client.store().clone(),
                        self.keys.clone(),
                        shared.token,
                    );
                    return None;
                }
                shared.handed_in_row = in_row;
                Some(Arc::new(shared))
            }
            Handed::Retry { token } => {
                if let Some(token) = token {
                    self.token = token;
                    self.from_handoff = true;
                    self.restamp = false;
                }
                None
            }
        }
    }
}

/// Refuses a store that cannot keep holder sets (a Redlock quorum): semaphores and read-write
/// locks need one.
fn check_holder_sets(client: &LockContext) -> Result<(), LockError> {
    client
        .core()
        .supports(Capability::HolderSets)
        .map_err(|refused| LockError::UnsupportedStore {
            reason: refused.reason,
        })
}

/// Runs `body` until it finishes or the lease is lost, whichever is first (loss wins a tie).
/// The lost signal reads the clock at every poll, so the body is never polled again once the
/// lease is past its safety deadline, however late a starved runtime fires its timers.
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
