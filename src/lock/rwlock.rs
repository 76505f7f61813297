//! Read-write locks: many readers or one writer, each hold a lease.
//!
//! The writer's key is a lock key (same value and marks as a lock's, renewed by the lock's
//! script); the readers are a holder set, one entry each (`holders.lua`), so a reader that
//! dies frees its place within its ttl. Writers and readers wait on channels of their own: a
//! reader's release wakes a writer (one per client), a writer's release wakes a writer and a
//! reader (and a reader let in wakes the next local reader), so a wake-up always goes to a
//! waiter it can serve. A writer that finds readers sets an
//! *intent* key for as long as it waits: new readers are refused while it is there, so a
//! stream of overlapping readers cannot keep a writer out longer than the readers already in
//! (plus a wake-up). Readers and writers mint their fences from the same fence key, so every
//! grant's fence, read or write, is above every earlier one's.

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
use crate::keys::RwKeys;
use crate::store::{RwAcquire, Side, Waits};
use crate::token::Token;

/// Options for taking a read-write lock. Start with [`Client::rw_lock`](crate::Client::rw_lock), then [`read`] for a
/// shared hold or [`write`] for the exclusive one.
///
/// Defaults: ttl 30 s with the watchdog renewing it while held; try once (no waiting); no
/// maximum hold.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock::LockError> {
/// use std::time::Duration;
///
/// let client = distlock::Client::in_memory();
/// let doc = || client.rw_lock("doc:7").wait(Duration::from_secs(5));
/// let r1 = doc().read().await?;
/// let r2 = doc().read().await?; // readers share it
/// assert!(matches!(
///     client.rw_lock("doc:7").write().await, // a writer waits for both
///     Err(distlock::LockError::Busy { .. })
/// ));
/// let read_fence = r2.fence().await?; // minted with the grant: read-write locks are eager
/// r1.release().await?;
/// r2.release().await?;
/// let w = doc().write().await?;
/// assert!(w.fence().await? > read_fence); // one sequence of fences for both sides
/// # Ok(()) }
/// ```
///
/// [`read`]: Self::read
/// [`write`]: Self::write
#[must_use = "an RwLockBuilder does nothing until read(), write() or a run is awaited"]
#[derive(Debug)]
pub struct RwLockBuilder {
    client: LockContext,
    name: String,
    options: LockOptions,
}

impl RwLockBuilder {
    pub(crate) fn new(client: LockContext, name: String) -> Self {
        let options = LockOptions::new().shared_only();
        Self {
            client,
            name,
            options,
        }
    }

    lease_options!(options);

    fn validate(&self) -> Result<(RwKeys, Terms), LockError> {
        let keys = self.client.core().rw_keys(&self.name)?;
        check_holder_sets(&self.client)?;
        Ok((keys, self.options.validate(self.client.core())?))
    }

    /// Takes a read hold: shared with other readers, never with a writer. A reader waits
    /// while a writer holds the lock or waits for it.
    ///
    /// # Errors
    /// [`LockError::Busy`] (not waiting: `retry_after` is how long the writer holds it, or
    /// keeps readers out while it waits), [`LockError::Timeout`], [`LockError::Store`],
    /// [`LockError::InvalidName`], [`LockError::InvalidConfig`], and
    /// [`LockError::UnsupportedStore`] on a Redlock quorum.
    pub async fn read(self) -> Result<Lease, LockError> {
        self.take(Side::Read).await
    }

    /// Takes the write hold: alone, no reader and no other writer. While it waits for readers
    /// to leave, no new reader gets in.
    ///
    /// # Errors
    /// As [`read`](Self::read); a busy writer's `retry_after` is how long the other writer,
    /// or the latest reader, holds it unless renewed.
    pub async fn write(self) -> Result<Lease, LockError> {
        self.take(Side::Write).await
    }

    async fn take(self, side: Side) -> Result<Lease, LockError> {
        let (keys, terms) = self.validate()?;
        let identity = self.options.identity_on(self.client.core());
        let mut claim = RwClaim {
            client: &self.client,
            keys,
            side,
            terms,
            token: Token::mint(&identity),
            identity,
            restamp: false,
        };
        let (shared, how) = self.options.wait_for(&self.client, &mut claim).await?;
        tracing::debug!(
            rw_lock = %self.name,
            ?side,
            fence = shared.minted_fence(),
            attempts = how.attempts,
            waited_ms = how.waited_ms(),
            woken_by = how.woken_by,
            "acquired"
        );
        let lease = Lease::granted(self.client.clone(), shared, claim.kind())?;
        lease.handle().shared.set_kind(match side {
            Side::Read => LeaseKind::Read,
            Side::Write => LeaseKind::Write,
        });
        Ok(lease)
    }

    /// Takes a read hold, runs `body` while it is held, and releases it (as
    /// [`LockBuilder::run`](crate::LockBuilder::run)).
    ///
    /// # Errors
    /// Those of [`read`](Self::read), and [`LockError::LeaseLost`].
    pub async fn run_read<F, Fut, T>(self, body: F) -> Result<T, LockError>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        Ok(self.run_side(Side::Read, body).await?.value)
    }

    /// Takes the write hold, runs `body` while it is held, and releases it (as
    /// [`LockBuilder::run`](crate::LockBuilder::run)).
    ///
    /// # Errors
    /// Those of [`write`](Self::write), and [`LockError::LeaseLost`].
    pub async fn run_write<F, Fut, T>(self, body: F) -> Result<T, LockError>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        Ok(self.run_side(Side::Write, body).await?.value)
    }

    async fn run_side<F, Fut, T>(self, side: Side, body: F) -> Result<RunReport<T>, LockError>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        run_under(self.take(side).await?, body).await
    }
}

/// A read or write hold to take, for the acquire loop.
struct RwClaim<'a> {
    client: &'a LockContext,
    keys: RwKeys,
    side: Side,
    terms: Terms,
    token: Token,
    /// The holder identity its tokens carry.
    identity: Arc<str>,
    /// The last attempt was answered busy: the next one takes a fresh token.
    restamp: bool,
}

impl RwClaim<'_> {
    fn hold(&self) -> Hold {
        match self.side {
            Side::Read => Hold::Entries {
                keys: self.keys.readers.clone(),
                count: 1,
            },
            Side::Write => Hold::Writer(self.keys.clone()),
        }
    }
}

impl Claim for RwClaim<'_> {
    type Granted = Arc<LeaseState>;

    fn name(&self) -> &str {
        &self.keys.writer.name
    }

    fn kind(&self) -> Primitive {
        match self.side {
            Side::Read => Primitive::Read,
            Side::Write => Primitive::Write,
        }
    }

    /// Readers and writers wait on channels of their own, so that a release wakes a waiter
    /// it can serve (a reader's release frees nothing for a reader).
    fn fresh_token(&mut self) {
        self.token = Token::mint(&self.identity);
    }

    fn after_busy(&mut self) {
        self.restamp = true;
    }

    fn channel(&self) -> &str {
        match self.side {
            Side::Read => &self.keys.readable,
            Side::Write => &self.keys.writer.channel,
        }
    }

    async fn attempt(&mut self, waits: Waits) -> Result<Attempt<Arc<LeaseState>>, LockError> {
        if std::mem::take(&mut self.restamp) {
            self.fresh_token();
        }
        let (store, side, keys, token) = (self.client.store(), self.side, &self.keys, &self.token);
        let ttl = self.terms.grant_ttl();
        let req = RwAcquire {
            side,
            keys,
            token,
            ttl,
            waits,
        };
        wait::settle(store, self.hold(), token, &self.terms, || {
            store.acquire_rw(&req)
        })
        .await
    }

    /// Readers share the lock: a reader let in by a release passes the wake-up on.
    fn shared(&self) -> bool {
        self.side == Side::Read
    }
}
