//! Hierarchical (intention) locks: a path of levels (`db/orders/42`) taken in a mode, IS, IX,
//! S or X, with the intention mode (IS or IX) on every ancestor level, all levels at once.
//!
//! Each level keeps one holder set per mode (`holders.lua`): a holder is one entry in the set
//! of its mode on each level of its path, so a holder that dies frees every level within its
//! ttl, and the lease's renewal renews one entry per level (in one call). `acquire_path.lua`
//! checks the levels top-down against the holders of incompatible modes and takes them all
//! in one script, so a path is never half taken. Every key of a hierarchy shares the root's
//! hash tag: on a Cluster a whole hierarchy lives on one node.
//!
//! A waiter that incompatible holders keep out of a level marks it with its mode (the
//! *intent* mark) for as long as it waits: new arrivals incompatible with that mode are
//! refused while the mark is there, so a stream of overlapping holders cannot keep a waiter
//! out longer than the holders already in (plus a wake-up), as the read-write lock's writer.
//! The mark expires with the wait it was set for plus a claim time, so a waiter that vanished
//! cannot block the level for longer. Every waiter of a hierarchy listens on one channel; a
//! release publishes there when a level it held was waited for, and wakes every local waiter.
//! Grants mint their fences from the fence key of the root's slot.

use std::future::Future;
use std::sync::Arc;

use super::context::LockContext;
use super::hold::Hold;
use super::kind::LeaseKind;
use super::metrics::Primitive;
use super::options::{LockOptions, lease_options};
use super::state::{LeaseState, Terms};
use super::wait::{self, Attempt, Claim};
use super::{Lease, LeaseHandle, RunReport, check_holder_sets, run_under};
use crate::error::LockError;
use crate::keys::PathKeys;
use crate::mode::HierarchyMode;
use crate::store::{PathAcquire, Waits};
use crate::token::Token;

/// Options for taking a hierarchical lock. Start with
/// [`Client::hierarchy_lock`](crate::Client::hierarchy_lock), then [`lock`](Self::lock) in a
/// [`HierarchyMode`] (or [`shared`](Self::shared), [`exclusive`](Self::exclusive),
/// [`intent_shared`](Self::intent_shared), [`intent_exclusive`](Self::intent_exclusive)).
///
/// The path's levels are separated by `/` (`db/orders/42`: the database, the table, the row),
/// none empty, at most [`MAX_HIERARCHY_LEVELS`](crate::MAX_HIERARCHY_LEVELS). Taking it in S
/// takes IS on `db` and `db/orders` and S on `db/orders/42`; in X, IX above and X on the row;
/// all in one round trip, or nothing. Two holders share a level iff their modes are
/// compatible (see [`HierarchyMode`]), so many holders of rows run together while one holder
/// of the table in X excludes them all. The hash tag is the root level: on a Redis Cluster
/// every path under one root is in one slot, on one node.
///
/// Defaults: ttl 30 s with the watchdog renewing it while held; try once (no waiting); no
/// maximum hold. Not on a Redlock quorum.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock::LockError> {
/// use std::time::Duration;
/// use distlock::HierarchyMode;
///
/// let client = distlock::Client::in_memory();
/// let row_1 = client.hierarchy_lock("db/orders/1").exclusive().await?;
/// let row_2 = client.hierarchy_lock("db/orders/2").exclusive().await?; // rows run together
/// assert!(matches!(
///     client.hierarchy_lock("db/orders").lock(HierarchyMode::Exclusive).await, // not the table
///     Err(distlock::LockError::Busy { .. })
/// ));
/// let row_fence = row_2.fence().await?; // minted with the grant, as a read-write lock's
/// row_1.release().await?;
/// row_2.release().await?;
/// let table = client
///     .hierarchy_lock("db/orders")
///     .wait(Duration::from_secs(5))
///     .exclusive()
///     .await?;
/// assert!(table.fence().await? > row_fence);
/// # Ok(()) }
/// ```
#[must_use = "a HierarchyLockBuilder does nothing until lock() or a run is awaited"]
#[derive(Debug)]
pub struct HierarchyLockBuilder {
    client: LockContext,
    path: String,
    options: LockOptions,
}

impl HierarchyLockBuilder {
    pub(crate) fn new(client: LockContext, path: String) -> Self {
        let options = LockOptions::new().shared_only();
        Self {
            client,
            path,
            options,
        }
    }

    lease_options!(options);

    fn validate(&self) -> Result<(PathKeys, Terms), LockError> {
        let keys = self.client.core().path_keys(&self.path)?;
        check_holder_sets(&self.client)?;
        Ok((keys, self.options.validate(self.client.core())?))
    }

    /// Takes the path in `mode` on its last level, and the matching intention mode on every
    /// level above it, all at once. While it waits for incompatible holders of a level to
    /// leave, no new holder incompatible with it gets into that level.
    ///
    /// # Errors
    /// [`LockError::Busy`] (not waiting: `retry_after` is how long the incompatible holders
    /// of a level hold it unless renewed, or another waiter keeps this mode out of it),
    /// [`LockError::Timeout`], [`LockError::Store`], [`LockError::InvalidName`] (an empty
    /// path or level, too many levels, a path too long), [`LockError::InvalidConfig`], and
    /// [`LockError::UnsupportedStore`] on a Redlock quorum.
    pub async fn lock(self, mode: HierarchyMode) -> Result<Lease, LockError> {
        let (keys, terms) = self.validate()?;
        let identity = self.options.identity_on(self.client.core());
        let token = Token::mint(&identity);
        let mut claim = PathClaim {
            client: &self.client,
            waiter: token.as_str().into(),
            keys,
            mode,
            terms,
            token,
            identity,
            restamp: false,
        };
        let (shared, how) = self.options.wait_for(&self.client, &mut claim).await?;
        tracing::debug!(
            hierarchy_lock = %self.path,
            %mode,
            fence = shared.minted_fence(),
            attempts = how.attempts,
            waited_ms = how.waited_ms(),
            woken_by = how.woken_by,
            "acquired"
        );
        let lease = Lease::granted(self.client.clone(), shared, claim.kind())?;
        lease.handle().shared.set_kind(LeaseKind::Hierarchy);
        Ok(lease)
    }

    /// [`lock`](Self::lock) in [`HierarchyMode::Shared`]: read this level and everything
    /// below it.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub async fn shared(self) -> Result<Lease, LockError> {
        self.lock(HierarchyMode::Shared).await
    }

    /// [`lock`](Self::lock) in [`HierarchyMode::Exclusive`]: hold this level and everything
    /// below it alone.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub async fn exclusive(self) -> Result<Lease, LockError> {
        self.lock(HierarchyMode::Exclusive).await
    }

    /// [`lock`](Self::lock) in [`HierarchyMode::IntentShared`]: announce reads below this
    /// level (a lease that then takes S on a level below it).
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub async fn intent_shared(self) -> Result<Lease, LockError> {
        self.lock(HierarchyMode::IntentShared).await
    }

    /// [`lock`](Self::lock) in [`HierarchyMode::IntentExclusive`]: announce writes below
    /// this level.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub async fn intent_exclusive(self) -> Result<Lease, LockError> {
        self.lock(HierarchyMode::IntentExclusive).await
    }

    /// Takes the path in `mode`, runs `body` while it is held, and releases it (as
    /// [`LockBuilder::run`](crate::LockBuilder::run)).
    ///
    /// # Errors
    /// Those of [`lock`](Self::lock), and [`LockError::LeaseLost`].
    pub async fn run<F, Fut, T>(self, mode: HierarchyMode, body: F) -> Result<T, LockError>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        Ok(self.run_report(mode, body).await?.value)
    }

    async fn run_report<F, Fut, T>(
        self,
        mode: HierarchyMode,
        body: F,
    ) -> Result<RunReport<T>, LockError>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        run_under(self.lock(mode).await?, body).await
    }
}

/// A path to take in a mode, for the acquire loop.
struct PathClaim<'a> {
    client: &'a LockContext,
    keys: PathKeys,
    mode: HierarchyMode,
    terms: Terms,
    token: Token,
    /// Who this waiter is across its attempts (its first token): its intent marks are its
    /// own, so they never keep it out.
    waiter: Box<str>,
    /// The holder identity its tokens carry.
    identity: Arc<str>,
    /// The last attempt was answered busy: the next one takes a fresh token.
    restamp: bool,
}

impl Claim for PathClaim<'_> {
    type Granted = Arc<LeaseState>;

    fn name(&self) -> &str {
        &self.keys.name
    }

    fn kind(&self) -> Primitive {
        Primitive::Hierarchy
    }

    /// One channel per hierarchy: a release publishes there when a level it held was waited
    /// for.
    fn channel(&self) -> &str {
        &self.keys.channel
    }

    fn fresh_token(&mut self) {
        self.token = Token::mint(&self.identity);
    }

    fn after_busy(&mut self) {
        self.restamp = true;
    }

    async fn attempt(&mut self, waits: Waits) -> Result<Attempt<Arc<LeaseState>>, LockError> {
        if std::mem::take(&mut self.restamp) {
            self.fresh_token();
        }
        let (store, keys, mode, token) = (self.client.store(), &self.keys, self.mode, &self.token);
        let ttl = self.terms.grant_ttl();
        let hold = Hold::Path {
            keys: keys.clone(),
            mode,
        };
        let req = PathAcquire {
            keys,
            mode,
            token,
            waiter: &self.waiter,
            ttl,
            waits,
        };
        wait::settle(store, hold, token, &self.terms, || store.acquire_path(&req)).await
    }

    /// What a release frees may serve several waiters (of several levels and modes): it
    /// wakes every local waiter of the hierarchy.
    fn shared(&self) -> bool {
        true
    }
}
