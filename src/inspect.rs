//! Hidden hooks for this crate's own integration tests (the `test-util` feature): look at and
//! tamper with the store the same way on every backend. Not part of the public API; may
//! change at any time.

use std::time::Duration;

use crate::client::Client;
use crate::error::{InvalidName, StoreError};

/// Store-level views of one client, for tests.
#[doc(hidden)]
pub struct Inspector<'a> {
    client: &'a Client,
}

impl Client {
    #[doc(hidden)]
    pub fn __inspect(&self) -> Inspector<'_> {
        Inspector { client: self }
    }
}

impl Inspector<'_> {
    /// The lock key of `name`.
    pub fn lock_key(&self, name: &str) -> Result<String, InvalidName> {
        Ok(self.client.core().lock_keys(name)?.lock.clone())
    }

    /// The fence key `name` mints its fences from (one per prefix, shared by every lock).
    pub fn fence_key(&self, name: &str) -> Result<String, InvalidName> {
        Ok(self.client.core().lock_keys(name)?.fence.to_string())
    }

    /// The holder set of semaphore `name`.
    pub fn semaphore_key(&self, name: &str) -> Result<String, InvalidName> {
        Ok(self.client.core().semaphore_keys(name)?.set.clone())
    }

    /// The keys of read-write lock `name`: (writer's key, readers' holder set, intent key).
    pub fn rw_keys(&self, name: &str) -> Result<(String, String, String), InvalidName> {
        let keys = self.client.core().rw_keys(name)?;
        Ok((
            keys.writer.lock.clone(),
            keys.readers.set.clone(),
            keys.intent.to_string(),
        ))
    }

    /// The keys of each level of hierarchical lock path `path`, top-down: the holder sets of
    /// IS, IX, S and X, then the intent mark.
    pub fn hierarchy_keys(&self, path: &str) -> Result<Vec<[String; 5]>, InvalidName> {
        let keys = self.client.core().path_keys(path)?;
        Ok(keys
            .levels
            .iter()
            .map(|level| {
                let [is, ix, s, x] = level.holders.clone();
                [is, ix, s, x, level.intent.clone()]
            })
            .collect())
    }

    /// How many live (unexpired) entries the holder set `key` has: the permits held.
    pub async fn live_entries(&self, key: &str) -> Result<u64, StoreError> {
        self.client.store().peek_live_entries(key).await
    }

    /// The pub/sub channel a release of `name` publishes its wake-up to.
    pub fn release_channel(&self, name: &str) -> Result<String, InvalidName> {
        Ok(self.client.core().lock_keys(name)?.channel.clone())
    }

    /// Remaining ttl of a key; `None` if it does not exist (on a quorum, the longest of the
    /// nodes that have it: what a waiter would be told).
    pub async fn pttl(&self, key: &str) -> Result<Option<Duration>, StoreError> {
        self.client.store().peek_pttl(key).await
    }

    /// The value of a string key (a lock key holds its holder's token, followed by `*` once a
    /// waiter has marked it; on a quorum, the first node that has it).
    pub async fn get(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.client.store().peek_get(key).await
    }

    /// Deletes a key behind every holder's back (on a quorum, on every node that answers).
    pub async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        self.client.store().peek_delete(key).await
    }

    /// Live keys under this client's prefix (on a cluster, of every primary; on a quorum, of
    /// every node that answers, each key once).
    pub async fn keys(&self) -> Result<Vec<String>, StoreError> {
        self.client.store().peek_keys(self.client.prefix()).await
    }

    /// Channels with local waiters.
    pub fn waiting_channels(&self) -> usize {
        self.client.store().wakeups().channels_in_use()
    }

    /// Waiters queued for a hand-off, over every lock.
    pub fn queued_for_handoff(&self) -> usize {
        self.client.locks().handoffs().queued()
    }

    /// Renewal round trips the watchdog has sent.
    pub fn renewal_calls(&self) -> u64 {
        self.client.locks().watchdog().renewal_calls()
    }

    /// Times the watchdog task has looked at its leases.
    pub fn watchdog_scans(&self) -> u64 {
        self.client.locks().watchdog().scans()
    }

    /// Leases the watchdog is tracking.
    pub fn watched_leases(&self) -> usize {
        self.client.locks().watchdog().len()
    }

    /// One acquire of lock `name` under the given `token` (a test's own text), as the first
    /// attempt of a caller that does not wait makes it, with no lease behind it: `Some(fence)`
    /// when granted (`fence` when `mint`), `None` when busy. For testing the store's acquire
    /// itself: what it sends, and that a retry under a token the key already holds (a grant
    /// whose reply was lost) is granted.
    pub async fn acquire_as(
        &self,
        name: &str,
        token: &str,
        ttl: Duration,
        mint: bool,
    ) -> Result<Option<Option<u64>>, StoreError> {
        let keys = self
            .client
            .core()
            .lock_keys(name)
            .map_err(|err| StoreError::Config {
                message: err.to_string(),
            })?;
        let reply = self
            .client
            .store()
            .acquire(&crate::store::Acquire {
                keys: &keys,
                token: &crate::token::Token::from_stored(token),
                ttl,
                waits: crate::store::Waits::No,
                replicas: None,
                mint,
            })
            .await?;
        Ok(match reply {
            crate::store::AcquireReply::Granted { fence } => Some(fence),
            _ => None,
        })
    }
}
