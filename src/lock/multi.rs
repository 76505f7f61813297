//! Multi-locks: several locks taken all or nothing, each a lease of its own (renewed in the
//! same watchdog batches, fenced, released together).
//!
//! The names are sorted (by key) and split into the groups the store can take in one call,
//! all or nothing (`acquire_all.lua`): one group on a single primary or in memory, one per
//! hash slot on a cluster (in slot order), one per lock on a Redlock quorum. An attempt takes
//! the groups in that order; if one is busy, the groups already taken are released before the
//! waiter sleeps (on the busy lock's release channel), and the next attempt starts again from
//! the first group. So a waiting multi-lock never holds part of its set: no deadlock between
//! multi-locks whatever their sets, and nothing left behind by one that fails, times out or
//! is cancelled (a group in flight when it is cancelled is given back in the background).

use std::future::Future;

use tokio::time::Instant;

use super::context::LockContext;
use super::hold::{Hold, release_hold_in_background};
use super::kind::LeaseKind;
use super::metrics::Primitive;
use super::options::{LockOptions, lease_options};
use super::state::{Grant, LeaseState, Terms};
use super::wait::{Attempt, Claim};
use super::{Lease, LeaseHandle, ReleaseOutcome};
use crate::error::LockError;
use crate::keys::LockKeys;
use crate::store::{AcquireAll, AllReply, Store, Waits};
use crate::token::Token;

/// The most locks one multi-lock takes.
pub const MAX_MULTI_LOCK: usize = 64;

/// Options for taking several locks at once. Start with [`Client::multi_lock`](crate::Client::multi_lock).
///
/// The locks are the same as [`Client::lock`](crate::Client::lock)'s: a multi-lock on `["a", "b"]` excludes
/// `client.lock("a")` and any multi-lock that shares a name with it. The names are a set:
/// order does not matter and a name given twice counts once.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock::LockError> {
/// use std::time::Duration;
///
/// let client = distlock::Client::in_memory();
/// // Move money between two accounts: both or neither.
/// let both = client
///     .multi_lock(["account:7", "account:9"])
///     .wait(Duration::from_secs(5))
///     .acquire()
///     .await?;
/// assert!(matches!(
///     client.lock("account:9").acquire().await,
///     Err(distlock::LockError::Busy { .. })
/// ));
/// let fence_7 = both.fence_of("account:7");
/// both.release().await?;
/// assert!(fence_7.is_some());
/// # Ok(()) }
/// ```
#[must_use = "a MultiLockBuilder does nothing until acquire() or run() is awaited"]
#[derive(Debug)]
pub struct MultiLockBuilder {
    client: LockContext,
    names: Vec<String>,
    options: LockOptions,
}

impl MultiLockBuilder {
    pub(crate) fn new(client: LockContext, names: Vec<String>) -> Self {
        let options = LockOptions::new().shared_only();
        Self {
            client,
            names,
            options,
        }
    }

    lease_options!(options);

    /// The locks' keys, sorted by key and without repeats.
    fn validate(&self) -> Result<(Vec<LockKeys>, Terms), LockError> {
        if self.names.is_empty() || self.names.len() > MAX_MULTI_LOCK {
            return Err(LockError::InvalidConfig {
                reason: format!(
                    "a multi-lock takes 1 to {MAX_MULTI_LOCK} locks, not {}",
                    self.names.len()
                ),
            });
        }
        let mut keys = self
            .names
            .iter()
            .map(|name| self.client.core().lock_keys(name))
            .collect::<Result<Vec<_>, _>>()?;
        keys.sort_by(|a, b| a.lock.cmp(&b.lock));
        keys.dedup_by(|a, b| a.lock == b.lock);
        Ok((keys, self.options.validate(self.client.core())?))
    }

    /// Takes every lock, or none, waiting as configured (while it waits it holds none of
    /// them). Cancel-safe: locks granted to a dropped future are released in the background.
    ///
    /// # Errors
    /// [`LockError::Busy`] (not waiting; for the first lock found busy, with its holder's
    /// remaining ttl), [`LockError::Timeout`], [`LockError::Store`] (nothing is left taken),
    /// [`LockError::InvalidName`] and [`LockError::InvalidConfig`] (no names, or more than
    /// [`MAX_MULTI_LOCK`]).
    pub async fn acquire(self) -> Result<MultiLease, LockError> {
        let (keys, terms) = self.validate()?;
        let groups = self.client.store().groups(&keys);
        let mut claim = MultiClaim {
            identity: self.options.identity_on(self.client.core()),
            client: &self.client,
            keys,
            groups,
            terms,
            busy: 0,
        };
        let (leases, how) = self.options.wait_for(&self.client, &mut claim).await?;
        // Granted as the client closed: every part goes back (the refused ones by their
        // drop, the others by a release), and nothing is held.
        if let Some(refused) = leases.iter().find(|lease| lease.refused()) {
            let name = refused.name().to_owned();
            roll_back(leases).await;
            return Err(LockError::ShuttingDown { name });
        }
        for lease in &leases {
            lease.handle().shared.set_kind(LeaseKind::MultiLock);
        }
        tracing::debug!(
            locks = leases.len(),
            attempts = how.attempts,
            waited_ms = how.waited_ms(),
            woken_by = how.woken_by,
            "multi-lock acquired"
        );
        Ok(MultiLease {
            handle: MultiHandle {
                handles: leases.iter().map(Lease::handle).collect(),
            },
            leases,
        })
    }

    /// Takes every lock, runs `body` while they are held, and releases them. The body is
    /// dropped if any of the leases is lost (with [`LockError::LeaseLost`] for it); a body
    /// that finished returns its value whatever the releases find.
    ///
    /// # Errors
    /// Those of [`acquire`](Self::acquire), and [`LockError::LeaseLost`].
    pub async fn run<F, Fut, T>(self, body: F) -> Result<T, LockError>
    where
        F: FnOnce(MultiHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let multi = self.acquire().await?;
        let handle = multi.handle();
        let value = tokio::select! {
            biased;
            () = handle.lost() => return Err(handle.lost_error()),
            value = body(handle.clone()) => value,
        };
        match multi.release().await {
            Ok(outcomes) if outcomes.iter().all(|o| *o == ReleaseOutcome::Released) => {}
            Ok(outcomes) => {
                tracing::warn!(
                    ?outcomes,
                    "the body finished, but a release found a lock no longer ours; returning the body's value"
                );
            }
            Err(err) => {
                tracing::warn!(error = %err, "release after a multi-lock run failed");
            }
        }
        Ok(value)
    }
}

/// A cheap, cloneable view of a [`MultiLease`]: each lock's lease handle, and a lost signal
/// for the set.
#[derive(Clone, Debug)]
pub struct MultiHandle {
    handles: Vec<LeaseHandle>,
}

impl MultiHandle {
    /// Each lock's lease, sorted by key (the order they were taken in).
    #[must_use]
    pub fn handles(&self) -> &[LeaseHandle] {
        &self.handles
    }

    /// The fence of lock `name`, if it is one of the set. A multi-lock's grants are eager:
    /// every lock of the set has its fence from the grant.
    #[must_use]
    pub fn fence_of(&self, name: &str) -> Option<u64> {
        self.handles
            .iter()
            .find(|h| h.name() == name)
            .and_then(LeaseHandle::minted_fence)
    }

    /// Whether any of the leases is lost (or released).
    #[must_use]
    pub fn is_lost(&self) -> bool {
        self.handles.iter().any(LeaseHandle::is_lost)
    }

    /// `Err(LeaseLost)` for the first lease that is lost; call it before each step that
    /// needs the locks.
    pub fn ensure_held(&self) -> Result<(), LockError> {
        self.handles.iter().try_for_each(LeaseHandle::ensure_held)
    }

    /// Resolves when any of the leases ends or can no longer be trusted.
    pub async fn lost(&self) {
        let all = self.handles.iter().map(|h| Box::pin(h.lost()));
        futures_util::future::select_all(all).await;
    }

    fn lost_error(&self) -> LockError {
        self.handles
            .iter()
            .find(|h| h.is_lost())
            .or(self.handles.first())
            .map_or(
                LockError::InvalidConfig {
                    reason: "an empty multi-lock".to_owned(),
                },
                LeaseHandle::lost_error,
            )
    }
}

/// Several locks held together, each a [`Lease`] (its own fence and lost signal, renewed by
/// the watchdog in the same batches). Release it with [`MultiLease::release`]; dropping it
/// releases every lock in the background. It dereferences to a [`MultiHandle`].
#[must_use = "dropping a MultiLease releases its locks at once"]
#[derive(Debug)]
pub struct MultiLease {
    leases: Vec<Lease>,
    handle: MultiHandle,
}

impl std::ops::Deref for MultiLease {
    type Target = MultiHandle;

    fn deref(&self) -> &MultiHandle {
        &self.handle
    }
}

impl MultiLease {
    /// A cloneable view of the set.
    #[must_use]
    pub fn handle(&self) -> MultiHandle {
        self.handle.clone()
    }

    /// Each lock's lease, sorted by key.
    pub fn leases(&self) -> &[Lease] {
        &self.leases
    }

    /// Releases every lock (concurrently: on one store, in one call), and says what each
    /// release found, in the order of [`leases`](Self::leases).
    ///
    /// # Errors
    /// The first store error; the other locks are released all the same (or expire).
    pub async fn release(self) -> Result<Vec<ReleaseOutcome>, LockError> {
        let outcomes =
            futures_util::future::join_all(self.leases.into_iter().map(Lease::release)).await;
        outcomes.into_iter().collect()
    }
}

/// The locks of a multi-lock, for the acquire loop.
struct MultiClaim<'a> {
    client: &'a LockContext,
    /// Sorted by key.
    keys: Vec<LockKeys>,
    /// Indices into `keys`, in the order they are taken.
    groups: Vec<Vec<usize>>,
    terms: Terms,
    /// The lock the last busy attempt found held: its channel is the one to listen on.
    busy: usize,
    /// The holder identity its tokens carry.
    identity: std::sync::Arc<str>,
}

impl Claim for MultiClaim<'_> {
    type Granted = Vec<Lease>;

    fn name(&self) -> &str {
        &self.keys[self.busy].name
    }

    fn kind(&self) -> Primitive {
        Primitive::Multi
    }

    fn channel(&self) -> &str {
        &self.keys[self.busy].channel
    }

    async fn attempt(&mut self, waits: Waits) -> Result<Attempt<Vec<Lease>>, LockError> {
        let store = self.client.store();
        let mut taken: Vec<Lease> = Vec::with_capacity(self.keys.len());
        for group in &self.groups {
            let keys: Vec<&LockKeys> = group.iter().map(|&i| &self.keys[i]).collect();
            let tokens: Vec<Token> = group.iter().map(|_| Token::mint(&self.identity)).collect();
            let mut guard = GroupGuard {
                store,
                keys: &keys,
                tokens: &tokens,
                armed: true,
            };
            let sent_at = Instant::now();
            let reply = match store
                .acquire_all(&AcquireAll {
                    keys: &keys,
                    tokens: &tokens,
                    ttl: self.terms.grant_ttl(),
                    waits,
                })
                .await
            {
                Ok(reply) => reply,
                Err(err) => {
                    // The guard gives this group back; the groups taken before it go now.
                    roll_back(taken).await;
                    return Err(err.into());
                }
            };
            guard.armed = false;
            drop(guard);
            match reply {
                AllReply::Granted { fences } => {
                    let answered_at = Instant::now();
                    for ((k, token), fence) in keys.iter().zip(tokens).zip(fences) {
                        let grant = Grant {
                            hold: Hold::Key((*k).clone()),
                            token,
                            fence: Some(fence),
                            sent_at,
                            answered_at,
                        };
                        let shared =
                            std::sync::Arc::new(LeaseState::new(grant, &self.terms, store));
                        taken.push(Lease::new(self.client.clone(), shared, Primitive::Lock));
                    }
                }
                AllReply::Busy { index, pttl } => {
                    self.busy = group[index];
                    roll_back(taken).await;
                    return Ok(Attempt::Busy(pttl));
                }
            }
        }
        Ok(Attempt::Granted(taken))
    }
}

/// Releases the locks an attempt took before it found one busy, before it waits. On a task of
/// its own, so that a waiter cancelled meanwhile does not cut the rollback short.
async fn roll_back(taken: Vec<Lease>) {
    if taken.is_empty() {
        return;
    }
    let releases = async move {
        for result in futures_util::future::join_all(taken.into_iter().map(Lease::release)).await {
            if let Err(err) = result {
                tracing::debug!(error = %err, "rolling back a multi-lock failed; the lock expires after its ttl");
            }
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            let _ = runtime.spawn(releases).await;
        }
        Err(_) => releases.await,
    }
}

/// Gives back a group's possible grants if its call is cancelled or fails without a clear
/// answer.
struct GroupGuard<'a> {
    store: &'a Store,
    keys: &'a [&'a LockKeys],
    tokens: &'a [Token],
    armed: bool,
}

impl Drop for GroupGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        for (keys, token) in self.keys.iter().zip(self.tokens) {
            release_hold_in_background(
                self.store.clone(),
                Hold::Key((*keys).clone()),
                token.clone(),
            );
        }
    }
}
