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

use tokio::time::Instant;

use super::lease::{Grant, Hold, LeaseShared, Terms};
use super::options::{Options, lease_options};
use super::wait::{self, Attempt, Claim};
use super::{GrantGuard, Lease, LeaseHandle, RunReport, guarded, released_after};
use crate::error::{LockError, StoreError};
use crate::keys::RwKeys;
use crate::metrics::Kind;
use crate::store::{AcquireReply, Side, Waits};
use crate::token::Token;
use crate::{Capability, Client};

/// Options for taking a read-write lock. Start with [`Client::rw_lock`], then [`read`] for a
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
/// let read_fence = r2.fence();
/// r1.release().await?;
/// r2.release().await?;
/// let w = doc().write().await?;
/// assert!(w.fence() > read_fence); // one sequence of fences for both sides
/// # Ok(()) }
/// ```
///
/// [`read`]: Self::read
/// [`write`]: Self::write
#[must_use = "an RwLockBuilder does nothing until read(), write() or a run is awaited"]
#[derive(Debug)]
pub struct RwLockBuilder {
    client: Client,
    name: String,
    options: Options,
}

impl RwLockBuilder {
    pub(crate) fn new(client: Client, name: String) -> Self {
        let mut options = Options::new(&client);
        // Replica acknowledgement is for locks only.
        options.replicas = None;
        Self {
            client,
            name,
            options,
        }
    }

    lease_options!();

    fn validate(&self) -> Result<(RwKeys, Terms), LockError> {
        let keys = self.client.rw_keys(&self.name)?;
        self.client
            .supports(Capability::HolderSets)
            .map_err(|refused| LockError::UnsupportedStore {
                reason: refused.reason,
            })?;
        Ok((keys, self.options.validate(&self.client)?))
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
        let mut claim = RwClaim {
            client: &self.client,
            keys,
            side,
            terms,
            token: Token::generate(),
        };
        let (shared, how) = wait::acquire(
            &self.client,
            &mut claim,
            self.options.wait,
            &self.options.retry(),
        )
        .await?;
        tracing::debug!(
            rw_lock = %self.name,
            ?side,
            fence = shared.fence,
            attempts = how.attempts,
            waited_ms = how.waited_ms(),
            woken_by = how.woken_by,
            "acquired"
        );
        Ok(Lease::new(self.client.clone(), shared, claim.kind()))
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
        let lease = self.take(side).await?;
        let handle = lease.handle();
        let value = guarded(handle.clone(), body(handle)).await?;
        Ok(released_after(lease, value).await)
    }
}

/// A read or write hold to take, for the acquire loop.
struct RwClaim<'a> {
    client: &'a Client,
    keys: RwKeys,
    side: Side,
    terms: Terms,
    token: Token,
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
    type Granted = Arc<LeaseShared>;

    fn name(&self) -> &str {
        &self.keys.writer.name
    }

    fn kind(&self) -> Kind {
        match self.side {
            Side::Read => Kind::Read,
            Side::Write => Kind::Write,
        }
    }

    /// Readers and writers wait on channels of their own, so that a release wakes a waiter
    /// it can serve (a reader's release frees nothing for a reader).
    fn fresh_token(&mut self) {
        self.token = Token::generate();
    }

    fn channel(&self) -> &str {
        match self.side {
            Side::Read => &self.keys.readable,
            Side::Write => &self.keys.writer.channel,
        }
    }

    async fn attempt(&mut self, waits: Waits) -> Result<Attempt<Arc<LeaseShared>>, LockError> {
        let hold = self.hold();
        let mut guard = GrantGuard {
            client: self.client,
            hold: hold.clone(),
            token: &self.token,
            armed: true,
        };
        let sent_at = Instant::now();
        let reply = self
            .client
            .store()
            .acquire_rw(
                self.side,
                &self.keys,
                &self.token,
                self.terms.grant_ttl(),
                waits,
            )
            .await?;
        guard.armed = false;
        Ok(match reply {
            AcquireReply::Granted { fence } => {
                let grant = Grant {
                    hold,
                    token: self.token.clone(),
                    fence,
                    sent_at,
                    answered_at: Instant::now(),
                };
                Attempt::Granted(Arc::new(LeaseShared::new(grant, &self.terms)))
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

    /// Readers share the lock: a reader let in by a release passes the wake-up on.
    fn shared(&self) -> bool {
        self.side == Side::Read
    }
}
