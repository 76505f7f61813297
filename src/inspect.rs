//! Hidden hooks for this crate's own integration tests (the `test-util` feature): look at and
//! tamper with the store the same way on every backend. Not part of the public API; may
//! change at any time.

use std::time::Duration;

use redis::AsyncCommands;

use crate::Client;
use crate::error::{InvalidName, StoreError};
use crate::store::Store;

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
        Ok(self.client.lock_keys(name)?.lock.clone())
    }

    /// The fence key `name` mints its fences from (one per prefix, shared by every lock).
    pub fn fence_key(&self, name: &str) -> Result<String, InvalidName> {
        Ok(self.client.lock_keys(name)?.fence.to_string())
    }

    /// The holder set of semaphore `name`.
    pub fn semaphore_key(&self, name: &str) -> Result<String, InvalidName> {
        Ok(self.client.semaphore_keys(name)?.set.clone())
    }

    /// The keys of read-write lock `name`: (writer's key, readers' holder set, intent key).
    pub fn rw_keys(&self, name: &str) -> Result<(String, String, String), InvalidName> {
        let keys = self.client.rw_keys(name)?;
        Ok((
            keys.writer.lock.clone(),
            keys.readers.set.clone(),
            keys.intent.to_string(),
        ))
    }

    /// How many live (unexpired) entries the holder set `key` has: the permits held.
    pub async fn live_entries(&self, key: &str) -> Result<u64, StoreError> {
        const COUNT: &str = "
            local t = redis.call('TIME')
            local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
            return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
        ";
        match self.client.store() {
            Store::Memory(m) => Ok(m.live_entries(key)),
            Store::Redis(r) => {
                let mut conn = r.connection();
                Ok(redis::Script::new(COUNT)
                    .key(key)
                    .invoke_async(&mut conn)
                    .await?)
            }
            Store::Cluster(c) => {
                let mut conn = c.connection();
                Ok(redis::Script::new(COUNT)
                    .key(key)
                    .invoke_async(&mut conn)
                    .await?)
            }
            Store::Quorum(_) => Ok(0),
        }
    }

    /// The pub/sub channel a release of `name` publishes its wake-up to.
    pub fn release_channel(&self, name: &str) -> Result<String, InvalidName> {
        Ok(self.client.lock_keys(name)?.channel.clone())
    }

    /// Remaining ttl of a key; `None` if it does not exist.
    pub async fn pttl(&self, key: &str) -> Result<Option<Duration>, StoreError> {
        match self.client.store() {
            Store::Memory(m) => Ok(m.pttl(key)),
            Store::Redis(r) => {
                let ms: i64 = r.connection().pttl(key).await?;
                Ok(u64::try_from(ms).ok().map(Duration::from_millis))
            }
            Store::Cluster(c) => {
                let ms: i64 = c.connection().pttl(key).await?;
                Ok(u64::try_from(ms).ok().map(Duration::from_millis))
            }
            // The longest of the nodes that have it (what a waiter would be told).
            Store::Quorum(q) => {
                let mut longest = None;
                for mut conn in q.connections() {
                    if let Ok(ms) = conn.pttl::<_, i64>(key).await {
                        longest = longest.max(u64::try_from(ms).ok().map(Duration::from_millis));
                    }
                }
                Ok(longest)
            }
        }
    }

    /// The value of a string key (a lock key holds its holder's token, followed by `*` once a
    /// waiter has marked it).
    pub async fn get(&self, key: &str) -> Result<Option<String>, StoreError> {
        match self.client.store() {
            Store::Memory(m) => Ok(m.get(key)),
            Store::Redis(r) => Ok(r.connection().get(key).await?),
            Store::Cluster(c) => Ok(c.connection().get(key).await?),
            // The first node that has it.
            Store::Quorum(q) => {
                for mut conn in q.connections() {
                    if let Ok(Some(value)) = conn.get::<_, Option<String>>(key).await {
                        return Ok(Some(value));
                    }
                }
                Ok(None)
            }
        }
    }

    /// Deletes a key behind every holder's back.
    pub async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        match self.client.store() {
            Store::Memory(m) => Ok(m.delete(key)),
            Store::Redis(r) => {
                let n: i64 = r.connection().del(key).await?;
                Ok(n > 0)
            }
            Store::Cluster(c) => {
                let n: i64 = c.connection().del(key).await?;
                Ok(n > 0)
            }
            // On every node that answers.
            Store::Quorum(q) => {
                let mut deleted = false;
                for mut conn in q.connections() {
                    deleted |= conn.del::<_, i64>(key).await.unwrap_or(0) > 0;
                }
                Ok(deleted)
            }
        }
    }

    /// Live keys under this client's prefix.
    pub async fn keys(&self) -> Result<Vec<String>, StoreError> {
        let prefix = &self.client.inner.prefix;
        match self.client.store() {
            Store::Memory(m) => Ok(m
                .live_keys()
                .into_iter()
                .filter(|k| k.starts_with(prefix.as_str()))
                .collect()),
            Store::Redis(r) => Ok(r.connection().keys(format!("{prefix}:*")).await?),
            // KEYS goes to every primary; the answers are joined.
            Store::Cluster(c) => Ok(c.connection().keys(format!("{prefix}:*")).await?),
            // Every node that answers, each key once.
            Store::Quorum(q) => {
                let mut keys = std::collections::BTreeSet::new();
                for mut conn in q.connections() {
                    if let Ok(found) = conn.keys::<_, Vec<String>>(format!("{prefix}:*")).await {
                        keys.extend(found);
                    }
                }
                Ok(keys.into_iter().collect())
            }
        }
    }

    /// Channels with local waiters.
    pub fn waiting_channels(&self) -> usize {
        self.client.store().wakeups().channels_in_use()
    }

    /// Waiters queued for a hand-off, over every lock.
    pub fn queued_for_handoff(&self) -> usize {
        self.client.inner.handoffs.queued()
    }

    /// Renewal round trips the watchdog has sent.
    pub fn renewal_calls(&self) -> u64 {
        self.client.inner.watchdog.renewal_calls()
    }

    /// Times the watchdog task has looked at its leases.
    pub fn watchdog_scans(&self) -> u64 {
        self.client.inner.watchdog.scans()
    }

    /// Leases the watchdog is tracking.
    pub fn watched_leases(&self) -> usize {
        self.client.inner.watchdog.len()
    }
}
