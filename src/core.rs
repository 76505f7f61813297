//! The handle the floors above the store take: one store, its key prefix and fence keys, the
//! client's id and the replica acknowledgement its locks ask for by default, and the key
//! builders of the lock primitives. [`Client`](crate::Client) is built on it; the lock floor
//! adds its watchdog and hand-off registry ([`LockContext`](crate::lock::context::LockContext)),
//! and rate limiters, Bloom filters and fenced resources hold it as it is. None of them needs
//! the client itself, so none of them imports it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio_util::sync::CancellationToken;

use crate::error::{InvalidName, RateLimitError};
use crate::keys::{Fences, LockKeys, PathKeys, RwKeys, SetKeys};
use crate::store::{Capability, Replicas, Store, Unsupported};

/// A client's store and what names its keys. Cheap to clone: clones share one store.
#[derive(Clone)]
pub(crate) struct Core(Arc<Shared>);

struct Shared {
    /// Tells clients apart (a task's reentrant leases are per client).
    id: u64,
    store: Store,
    prefix: String,
    /// The fence keys of this client's locks: one per prefix, or one per slot on a cluster.
    fences: Fences,
    /// The replica acknowledgement locks ask for unless they say otherwise.
    replicas: Option<Replicas>,
    /// Who this client's leases say holds them (see `holder.rs`).
    identity: Arc<str>,
    /// Where holders learn that their key was freed behind their back: first
    /// `<prefix>:revoked` (an operator's force announces the key there), then the keyspace
    /// notifications of deletions, if the client watches them.
    revocation_channels: Vec<String>,
    /// Cancelled when the client (any clone) is closed for shutdown: no new lease from then
    /// on, and acquires that wait give up (see `Client::close`).
    closing: CancellationToken,
    /// The client's hybrid rate limiters, whose shares a shutdown gives back. Weak: the
    /// registry's entries hold limiters, which hold this core, and the client owns the
    /// registry.
    hybrids: Weak<HybridRegistry>,
}

/// A rate limiter in hybrid mode, as the client's registry keeps it (the trait keeps the core
/// from naming the rate limiter, which is built on it).
pub(crate) trait HybridShares: Send + Sync {
    /// Whether the registry's is the last handle on the limiter: its user dropped it, and
    /// its shares went with it.
    fn abandoned(&self) -> bool;

    /// Gives back every unit the limiter holds in shares; answers how many.
    fn return_shares(
        &self,
    ) -> Pin<Box<dyn Future<Output = Result<u64, RateLimitError>> + Send + '_>>;
}

/// The hybrid rate limiters a client built, for its shutdown to give their shares back.
#[derive(Default)]
pub(crate) struct HybridRegistry(Mutex<Vec<Box<dyn HybridShares>>>);

impl HybridRegistry {
    /// Keeps `limiter`, dropping the limiters their users have dropped.
    fn register(&self, limiter: Box<dyn HybridShares>) {
        let mut limiters = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        limiters.retain(|kept| !kept.abandoned());
        limiters.push(limiter);
    }

    /// Takes every limiter still in use out of the registry.
    pub(crate) fn take(&self) -> Vec<Box<dyn HybridShares>> {
        let taken = std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner));
        taken
            .into_iter()
            .filter(|limiter| !limiter.abandoned())
            .collect()
    }
}

/// Shown as the client it is the core of (what builders and limiters that hold it show).
impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("store", &self.0.store.kind())
            .field("prefix", &self.0.prefix)
            .finish_non_exhaustive()
    }
}

impl Core {
    /// A core over `store`, with a new id.
    pub(crate) fn new(
        store: Store,
        prefix: String,
        replicas: Option<Replicas>,
        identity: Arc<str>,
        deletions: Vec<String>,
        hybrids: Weak<HybridRegistry>,
    ) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let fences = store.fences(&prefix);
        Self(Arc::new(Shared {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            store,
            fences,
            replicas,
            identity,
            revocation_channels: std::iter::once(format!("{prefix}:revoked"))
                .chain(deletions)
                .collect(),
            prefix,
            closing: CancellationToken::new(),
            hybrids,
        }))
    }

    /// Keeps a hybrid rate limiter for the client's shutdown (nothing if the client is gone).
    pub(crate) fn register_hybrid(&self, limiter: Box<dyn HybridShares>) {
        if let Some(registry) = self.0.hybrids.upgrade() {
            registry.register(limiter);
        }
    }

    /// Cancelled once the client is closed for shutdown (see `Client::close`).
    pub(crate) fn closing(&self) -> &CancellationToken {
        &self.0.closing
    }

    /// Whether the client is closed for shutdown.
    pub(crate) fn is_closed(&self) -> bool {
        self.0.closing.is_cancelled()
    }

    /// Where an operator's force announces the key it freed, for the holders' watchdogs.
    pub(crate) fn revocation_channel(&self) -> &str {
        &self.0.revocation_channels[0]
    }

    /// Every channel a holder's watchdog listens on for keys freed behind its back.
    pub(crate) fn revocation_channels(&self) -> &[String] {
        &self.0.revocation_channels
    }

    /// The holder identity this client's leases carry unless their builder names another.
    pub(crate) fn identity(&self) -> &Arc<str> {
        &self.0.identity
    }

    pub(crate) fn id(&self) -> u64 {
        self.0.id
    }

    pub(crate) fn store(&self) -> &Store {
        &self.0.store
    }

    /// The key prefix.
    pub(crate) fn prefix(&self) -> &str {
        &self.0.prefix
    }

    /// The replica acknowledgement locks ask for unless they say otherwise.
    pub(crate) fn default_replicas(&self) -> Option<Replicas> {
        self.0.replicas
    }

    /// Whether the store can serve `capability`, and if not, why.
    pub(crate) fn supports(&self, capability: Capability) -> Result<(), Unsupported> {
        self.0.store.supports(capability)
    }

    /// The keys of lock `name`.
    pub(crate) fn lock_keys(&self, name: &str) -> Result<LockKeys, InvalidName> {
        LockKeys::new(&self.0.prefix, &self.0.fences, name)
    }

    /// As [`lock_keys`](Self::lock_keys), keeping `name` (a lock builder's own).
    pub(crate) fn lock_keys_of(&self, name: String) -> Result<LockKeys, InvalidName> {
        LockKeys::of_name(&self.0.prefix, &self.0.fences, name)
    }

    /// The key of election `name`'s leader record (beside the lock `name`).
    pub(crate) fn leader_key(&self, name: &str) -> Result<String, InvalidName> {
        crate::keys::leader_key(&self.0.prefix, name)
    }

    /// The keys of semaphore `name`.
    pub(crate) fn semaphore_keys(&self, name: &str) -> Result<SetKeys, InvalidName> {
        SetKeys::semaphore(&self.0.prefix, &self.0.fences, name)
    }

    /// The keys of read-write lock `name`.
    pub(crate) fn rw_keys(&self, name: &str) -> Result<RwKeys, InvalidName> {
        RwKeys::new(&self.0.prefix, &self.0.fences, name)
    }

    pub(crate) fn path_keys(&self, path: &str) -> Result<PathKeys, InvalidName> {
        PathKeys::new(&self.0.prefix, &self.0.fences, path)
    }
}
