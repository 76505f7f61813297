//! What a lease holds in the store (a lock key, a writer's key, entries of a holder set), what
//! its renewals and its release send, and giving back a hold nobody will use. Below every
//! other part of a lease: it needs the store, never the lease or the client.

use std::time::Duration;

use crate::error::StoreError;
use crate::keys::{LockKeys, RwKeys, SetKeys};
use crate::store::{Ownership, RenewItem, Replicas, Store};
use crate::token::Token;

/// What a lease holds in the store. It decides what the lease's renewals and its release
/// send; everything else about a lease (its timing, the watchdog, the lost signal, the fence)
/// is the same whatever it holds.
#[derive(Clone, Debug)]
pub(crate) enum Hold {
    /// A lock key holding the lease's token: a lock, one lock of a multi-lock.
    Key(LockKeys),
    /// The writer's key of a read-write lock: a lock key, whose release also wakes readers.
    Writer(RwKeys),
    /// `count` entries of a holder set: permits of a semaphore, or a reader of a read-write
    /// lock (one entry).
    Entries { keys: SetKeys, count: u32 },
}

impl Hold {
    /// The name the user gave.
    pub(crate) fn name(&self) -> &str {
        match self {
            Self::Key(keys) => &keys.name,
            Self::Writer(keys) => &keys.writer.name,
            Self::Entries { keys, .. } => &keys.name,
        }
    }

    /// The store key this hold is in (what an operator's force announces).
    pub(crate) fn key(&self) -> &str {
        match self {
            Self::Key(keys) => &keys.lock,
            Self::Writer(keys) => &keys.writer.lock,
            Self::Entries { keys, .. } => &keys.set,
        }
    }

    /// Whether the store still holds this hold for `token` (a read: the operators' force
    /// announced its key).
    pub(crate) async fn still_held(
        &self,
        store: &Store,
        token: &Token,
    ) -> Result<bool, StoreError> {
        let is_ours = |found: Option<(String, Duration)>| {
            found.is_some_and(|(value, _)| {
                let value = value.strip_suffix(['*', '!']).unwrap_or(&value);
                value == token.as_str()
            })
        };
        match self {
            Self::Key(keys) => Ok(is_ours(store.lock_value(&keys.lock).await?)),
            Self::Writer(keys) => Ok(is_ours(store.writer_value(&keys.writer.lock).await?)),
            Self::Entries { keys, .. } => Ok(store
                .set_holders(&keys.set)
                .await?
                .iter()
                .any(|h| h.token == token.as_str())),
        }
    }

    /// The renewal of this hold with `token`, asking for `ttl`.
    pub(crate) fn renewal<'a>(
        &'a self,
        token: &'a Token,
        ttl: Duration,
        replicas: Option<Replicas>,
    ) -> RenewItem<'a> {
        let (key, entries) = match self {
            Self::Key(keys) => (keys.lock.as_str(), 0),
            Self::Writer(keys) => (keys.writer.lock.as_str(), 0),
            Self::Entries { keys, count } => (keys.set.as_str(), *count),
        };
        RenewItem {
            key,
            token,
            ttl,
            entries,
            replicas,
        }
    }

    /// Gives the hold of `token` back: deletes the lock key, or removes the entries; wakes
    /// the waiters that listen.
    pub(crate) async fn release(
        &self,
        store: &Store,
        token: &Token,
    ) -> Result<Ownership, StoreError> {
        match self {
            Self::Key(keys) => store.release(keys, token).await,
            Self::Writer(keys) => store.release_writer(keys, token).await,
            Self::Entries { keys, count } => store.release_entries(keys, token, *count).await,
        }
    }
}

/// Best-effort release of a lock on the current runtime, bounded by the response timeout.
/// Without a runtime the key simply expires after its ttl.
pub(crate) fn release_in_background(store: Store, keys: LockKeys, token: Token) {
    release_hold_in_background(store, Hold::Key(keys), token);
}

/// Best-effort release of any hold on the current runtime (a grant nobody will use).
pub(crate) fn release_hold_in_background(store: Store, hold: Hold, token: Token) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        if let Err(err) = hold.release(&store, &token).await {
            tracing::debug!(lock = %hold.name(), error = %err, "background release failed; the key expires after its ttl");
        }
    });
}
