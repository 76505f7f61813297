//! The operators' view of a lock: whether it is held and for how long, and a way to free a
//! lock whose holder is stuck (ShedLock's and redis-py's users ask for both).
//!
//! What a lock's key holds is its holder's token, followed by a mark once a waiter has asked
//! to be woken. The token's secret is never shown; who holds the lock and since when, which
//! the token carries after the secret (see `holder.rs`), is. The fence is not stored with it
//! (the holder is told its fence at grant time), so it cannot be shown here. Semaphores and
//! read-write locks have the same reads and the same force, over their holder sets.

use std::time::Duration;

use crate::client::Client;
use crate::error::{LockError, StoreError};
use crate::holder::{Holder, parse_token};
use crate::idempotency::CLAIM_NAME_PREFIX;
use crate::keys::{LockKeys, lock_key_start, lock_name};
use crate::mode::HierarchyMode;
use crate::store::{Capability, KeyWalk, Ownership, SCAN_COUNT};
use crate::token::Token;

/// What a lock's key says right now, as [`Client::lock_state`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockState {
    /// Nobody holds it.
    Free,
    /// A lease holds it, for `remaining_ttl` more unless its holder renews it (the watchdog
    /// does, every third of the ttl, while the holder is alive).
    Held {
        /// How long the key lives unless renewed.
        remaining_ttl: Duration,
        /// Whether a waiter has asked to be woken when it is released.
        waiters: bool,
        /// Who holds it and since when (`None` for a lease of a client that predates
        /// holder identities).
        holder: Option<Holder>,
    },
    /// Released, and kept for a waiter that has waited long (see "No starvation across
    /// clients" in the guide's [guarantees](crate::guide::guarantees)):
    /// free for anyone once `remaining_ttl` has passed (at most 250 ms).
    Reserved {
        /// How long the reservation lasts.
        remaining_ttl: Duration,
    },
}

/// One lease holding a semaphore's permits or a read-write lock, as
/// [`Client::semaphore_state`] and [`Client::rw_lock_state`] read it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderState {
    /// How many permits it holds (1 for a reader or a writer).
    pub permits: u32,
    /// How long it holds them unless its holder renews them.
    pub remaining_ttl: Duration,
    /// Who holds them and since when (`None` for a lease of a client that predates holder
    /// identities).
    pub holder: Option<Holder>,
}

/// Who holds a read-write lock, as [`Client::rw_lock_state`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwLockState {
    /// The writer, if one holds it.
    pub writer: Option<HolderState>,
    /// The readers, longest-lived first.
    pub readers: Vec<HolderState>,
}

/// One holder of a level of a hierarchical lock, as [`Client::hierarchy_lock_state`] reads
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HierarchyHolder {
    /// The level's path (the path asked about).
    pub path: String,
    /// The mode it holds the level in: an intention mode when its own path goes below.
    pub mode: HierarchyMode,
    /// Its lease (`permits` is 1).
    pub state: HolderState,
}

/// The most locks one [`Client::held_locks`] call lists.
pub const MAX_LISTED_LOCKS: usize = 1_000;

/// How many keys [`Client::held_locks`] looks at on each server, at most: 500,000.
pub const DEFAULT_KEY_BUDGET: u64 = 500_000;

/// A lock found by [`Client::held_locks`]: its name and what its key said when read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockEntry {
    /// The lock's name, as given to `client.lock(..)`.
    pub name: String,
    /// [`LockState::Held`] or [`LockState::Reserved`] (a lock freed between the listing and
    /// the read is left out).
    pub state: LockState,
}

/// What [`Client::held_locks`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockListing {
    /// The locks, by name.
    pub locks: Vec<LockEntry>,
    /// Whether the scan covered the whole keyspace: `false` when it stopped at the limit
    /// asked for, or after looking at 500,000 keys on one server, so more locks may exist.
    pub complete: bool,
}

/// A lock key's value, split: the holder's token and whether it is marked.
fn parse(value: &str) -> Option<(&str, bool)> {
    match value.as_bytes().last() {
        None => None,
        // A reservation holds '!' alone.
        Some(_) if value == "!" => None,
        Some(b'*' | b'!') => Some((&value[..value.len() - 1], true)),
        Some(_) => Some((value, false)),
    }
}

impl Client {
    /// Whether lock `name` is held now, and for how long unless renewed. A read, for
    /// operators and dashboards: by the time it returns the answer may have changed, so never
    /// decide to take a lock from it (acquire does that atomically). It names the holder (its
    /// [identity](crate::ClientBuilder::identity) and when it asked for the grant); the
    /// holder's token is never shown, nor is its fence, which the store does not keep with
    /// the lock.
    ///
    /// On a Redlock quorum, the lock is held if a majority of nodes hold it for the same
    /// lease, for as long as that majority does.
    ///
    /// ```no_run
    /// # async fn example(client: distlock::Client) -> Result<(), distlock::LockError> {
    /// use distlock::LockState;
    /// match client.lock_state("settle:order-42").await? {
    ///     LockState::Held { remaining_ttl, holder: Some(holder), .. } => {
    ///         println!("held by {} for {remaining_ttl:?} more", holder.identity)
    ///     }
    ///     LockState::Held { remaining_ttl, .. } => println!("held for {remaining_ttl:?} more"),
    ///     LockState::Free | LockState::Reserved { .. } => println!("free"),
    ///     _ => {}
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LockError::InvalidName`]; [`LockError::Store`] when the store did not answer (on a
    /// quorum: fewer than a majority of nodes answered).
    pub async fn lock_state(&self, name: &str) -> Result<LockState, LockError> {
        let keys = self.core().lock_keys(name)?;
        Ok(match self.read_holder(&keys).await? {
            None => LockState::Free,
            Some((value, remaining_ttl)) => match parse(&value) {
                Some((token, marked)) => LockState::Held {
                    remaining_ttl,
                    holder: parse_token(token),
                    // In memory every waiter is in this process and none marks the key.
                    waiters: marked
                        || (!self.store().waiters_mark_locks()
                            && self.store().wakeups().waiters(&keys.channel) > 0),
                },
                None => LockState::Reserved { remaining_ttl },
            },
        })
    }

    /// How many waiters queue for fair lock `name` ([`LockBuilder::fair`](crate::LockBuilder::fair)):
    /// those that hold a place (a waiter that vanished keeps its place until its claim runs
    /// out, within 3 s). A read, for operators and dashboards; 0 for a lock nobody waits for
    /// fairly.
    ///
    /// # Errors
    /// [`LockError::InvalidName`]; [`LockError::UnsupportedStore`] on a Redlock quorum (it
    /// has no fair locks); [`LockError::Store`] when the store did not answer.
    pub async fn fair_queue_len(&self, name: &str) -> Result<u64, LockError> {
        let keys = self.core().lock_keys(name)?;
        self.core()
            .supports(Capability::FairQueues)
            .map_err(|refused| LockError::UnsupportedStore {
                reason: refused.reason,
            })?;
        let keys = crate::keys::FairKeys::of(self.core().prefix(), keys);
        Ok(crate::lock::fair::queued(self.store(), &keys).await?)
    }

    /// The locks of this client's prefix that are held now, up to `max` of them (at most
    /// [`MAX_LISTED_LOCKS`]), by name, each with its [`lock_state`](Self::lock_state): for
    /// operators' consoles and scripts (who holds what, since when, for how much longer).
    ///
    /// It walks the keyspace with `SCAN` (never `KEYS`, which would block the server): on
    /// every master of a Cluster, on every node of a Redlock quorum (where a lock counts as
    /// held if a majority of nodes hold it for one lease). The walk is bounded: it stops once
    /// `max` locks are found or [`DEFAULT_KEY_BUDGET`] keys were looked at on one server (see
    /// [`held_locks_within`](Self::held_locks_within) for another bound), and
    /// [`LockListing::complete`] says whether it saw everything. Plain locks only: semaphores
    /// and read-write locks have their own reads ([`semaphore_state`](Self::semaphore_state),
    /// [`rw_lock_state`](Self::rw_lock_state)), and the claims of idempotency keys are left
    /// out (their names carry callers' keys). Like every read here, the answer may have
    /// changed by the time it returns. It needs the ACL rule `+scan`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// let client = distlock::Client::in_memory();
    /// let _guard = client.lock("report:daily").acquire().await?;
    /// let listing = client.held_locks(100).await?;
    /// assert!(listing.complete);
    /// assert_eq!(listing.locks.len(), 1);
    /// assert_eq!(listing.locks[0].name, "report:daily");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LockError::Store`] when the store did not answer (on a Cluster: any master; on a
    /// quorum: fewer than a majority of nodes).
    pub async fn held_locks(&self, max: usize) -> Result<LockListing, LockError> {
        self.held_locks_within(max, DEFAULT_KEY_BUDGET).await
    }

    /// As [`held_locks`](Self::held_locks), looking at no more than about `key_budget` keys
    /// on each server (rounded up to a whole `SCAN` call of 500 keys; at least one call):
    /// a bound on what one listing costs the store, whatever its keyspace holds.
    ///
    /// # Errors
    /// As [`held_locks`](Self::held_locks).
    pub async fn held_locks_within(
        &self,
        max: usize,
        key_budget: u64,
    ) -> Result<LockListing, LockError> {
        let max = max.min(MAX_LISTED_LOCKS);
        let start = lock_key_start(self.core().prefix());
        let claims = format!("{start}{CLAIM_NAME_PREFIX}");
        let per_call = u64::from(SCAN_COUNT);
        let calls = u32::try_from(key_budget.div_ceil(per_call).max(1)).unwrap_or(u32::MAX);
        let walk = KeyWalk {
            prefix: &start,
            skip: Some(&claims),
            max,
            calls,
        };
        let scan = self.store().scan_keys(&walk).await?;
        let names: Vec<String> = scan
            .keys
            .iter()
            .filter_map(|key| lock_name(&start, key))
            .collect();
        let mut locks = Vec::with_capacity(names.len());
        // A few reads at a time: a listing should not crowd out the locks' own traffic.
        for chunk in names.chunks(16) {
            let states =
                futures_util::future::join_all(chunk.iter().map(|name| self.lock_state(name)))
                    .await;
            for (name, state) in chunk.iter().zip(states) {
                match state? {
                    LockState::Free => {}
                    state => locks.push(LockEntry {
                        name: name.clone(),
                        state,
                    }),
                }
            }
        }
        locks.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        Ok(LockListing {
            locks,
            complete: scan.complete,
        })
    }

    /// Frees lock `name` whoever holds it, for operators (a holder stuck in a long body, a
    /// lock taken by a process you have stopped). Returns whether a lease held it.
    ///
    /// It releases the lease that holds it now, as that lease's own release would: its waiters
    /// are woken. The holder is told at once: the force is announced on the prefix's
    /// revocation channel, and a client holding the lock checks its lease and fires its lost
    /// signal ([`LossReason::NotHeld`](crate::LossReason::NotHeld)) within a round trip. Where
    /// that message cannot arrive (the holder's pub/sub link is down, a Redlock quorum) the
    /// holder learns it at its watchdog's next renewal (within a third of its ttl), and until
    /// it does it may still act as the holder. So only force a lock whose holder is gone or
    /// whose writes carry their fence (see the guide's
    /// [efficiency or correctness?](crate::guide::guarantees#efficiency-or-correctness)).
    /// A lock re-taken between the read and the release is left alone.
    ///
    /// # Errors
    /// As [`lock_state`](Self::lock_state).
    pub async fn force_unlock(&self, name: &str) -> Result<bool, LockError> {
        let keys = self.core().lock_keys(name)?;
        let Some((value, _)) = self.read_holder(&keys).await? else {
            return Ok(false);
        };
        let Some((token, _)) = parse(&value) else {
            return Ok(false);
        };
        let held = self
            .store()
            .release(&keys, &Token::from_stored(token))
            .await?;
        let forced = matches!(held, Ownership::Ours);
        if forced {
            let holder = parse_token(token).map(|h| h.identity).unwrap_or_default();
            tracing::info!(lock = %keys.name, %holder, "lock forced free by an operator");
            tracing::debug!(target: "distlock::events", event = "forced", lock = %keys.name, %holder);
            self.store()
                .announce_revoked(self.core().revocation_channel(), &keys.lock, false)
                .await;
        }
        Ok(forced)
    }

    /// Who holds permits of semaphore `name` now: one entry per lease, with how many permits
    /// it holds, for how long unless renewed, and who it is. A read for operators, like
    /// [`lock_state`](Self::lock_state).
    ///
    /// # Errors
    /// [`LockError::InvalidName`], [`LockError::UnsupportedStore`] on a Redlock quorum,
    /// [`LockError::Store`] when the store did not answer.
    pub async fn semaphore_state(&self, name: &str) -> Result<Vec<HolderState>, LockError> {
        self.holder_sets()?;
        let keys = self.core().semaphore_keys(name)?;
        Ok(self.set_state(&keys.set).await?)
    }

    /// Frees every permit of semaphore `name`, whoever holds them, as their holders' own
    /// releases would (waiters are woken), and tells the holders at once, as
    /// [`force_unlock`](Self::force_unlock) does. Returns how many leases held permits.
    ///
    /// # Errors
    /// As [`semaphore_state`](Self::semaphore_state).
    pub async fn force_unlock_semaphore(&self, name: &str) -> Result<u32, LockError> {
        self.holder_sets()?;
        let keys = self.core().semaphore_keys(name)?;
        let mut freed = 0;
        for holder in self.store().set_holders(&keys.set).await? {
            let token = Token::from_stored(&holder.token);
            if self
                .store()
                .release_entries(&crate::store::EntriesRelease {
                    keys: &keys,
                    token: &token,
                    count: holder.count,
                })
                .await?
                == Ownership::Ours
            {
                freed += 1;
            }
        }
        if freed > 0 {
            tracing::info!(semaphore = %keys.name, leases = freed, "semaphore forced free by an operator");
            self.store()
                .announce_revoked(self.core().revocation_channel(), &keys.set, true)
                .await;
        }
        Ok(freed)
    }

    /// Who holds read-write lock `name` now: its writer, if any, and its readers. A read for
    /// operators, like [`lock_state`](Self::lock_state).
    ///
    /// # Errors
    /// As [`semaphore_state`](Self::semaphore_state).
    pub async fn rw_lock_state(&self, name: &str) -> Result<RwLockState, LockError> {
        self.holder_sets()?;
        let keys = self.core().rw_keys(name)?;
        let writer = self
            .store()
            .writer_value(&keys.writer.lock)
            .await?
            .and_then(|(value, remaining_ttl)| {
                let (token, _) = parse(&value)?;
                Some(HolderState {
                    permits: 1,
                    remaining_ttl,
                    holder: parse_token(token),
                })
            });
        let readers = self.set_state(&keys.readers.set).await?;
        Ok(RwLockState { writer, readers })
    }

    /// Who holds level `path` of a hierarchical lock now, in which mode: the holders of the
    /// level itself and those of paths below it (in an intention mode), by mode (IS, IX, S,
    /// X), longest-lived first within a mode. A read for operators, like
    /// [`lock_state`](Self::lock_state).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// use distlock::HierarchyMode;
    ///
    /// let client = distlock::Client::in_memory();
    /// let _row = client.hierarchy_lock("db/orders/42").exclusive().await?;
    /// let table = client.hierarchy_lock_state("db/orders").await?;
    /// assert_eq!(table.len(), 1);
    /// assert_eq!(table[0].mode, HierarchyMode::IntentExclusive);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`semaphore_state`](Self::semaphore_state).
    pub async fn hierarchy_lock_state(
        &self,
        path: &str,
    ) -> Result<Vec<HierarchyHolder>, LockError> {
        self.holder_sets()?;
        let keys = self.core().path_keys(path)?;
        let mut holders = Vec::new();
        if let Some(level) = keys.levels.last() {
            for mode in HierarchyMode::ALL {
                for state in self.set_state(level.holders_of(mode)).await? {
                    holders.push(HierarchyHolder {
                        path: level.path.clone(),
                        mode,
                        state,
                    });
                }
            }
        }
        Ok(holders)
    }

    /// Frees read-write lock `name`: its writer and every reader, as their own releases would
    /// (waiters are woken), and tells them at once, as [`force_unlock`](Self::force_unlock)
    /// does. Returns how many leases held it.
    ///
    /// # Errors
    /// As [`semaphore_state`](Self::semaphore_state).
    pub async fn force_unlock_rw_lock(&self, name: &str) -> Result<u32, LockError> {
        self.holder_sets()?;
        let keys = self.core().rw_keys(name)?;
        let mut freed = 0;
        if let Some((value, _)) = self.store().writer_value(&keys.writer.lock).await?
            && let Some((token, _)) = parse(&value)
            && self
                .store()
                .release_writer(&keys, &Token::from_stored(token))
                .await?
                == Ownership::Ours
        {
            freed += 1;
            self.store()
                .announce_revoked(self.core().revocation_channel(), &keys.writer.lock, true)
                .await;
        }
        let mut readers = 0;
        for holder in self.store().set_holders(&keys.readers.set).await? {
            let token = Token::from_stored(&holder.token);
            let held = self
                .store()
                .release_entries(&crate::store::EntriesRelease {
                    keys: &keys.readers,
                    token: &token,
                    count: holder.count,
                })
                .await?;
            if held == Ownership::Ours {
                readers += 1;
            }
        }
        if readers > 0 {
            self.store()
                .announce_revoked(self.core().revocation_channel(), &keys.readers.set, true)
                .await;
        }
        freed += readers;
        if freed > 0 {
            tracing::info!(rw_lock = %keys.writer.name, leases = freed, "read-write lock forced free by an operator");
        }
        Ok(freed)
    }

    /// Refuses a store without holder sets (a Redlock quorum).
    fn holder_sets(&self) -> Result<(), LockError> {
        self.store()
            .supports(Capability::HolderSets)
            .map_err(|refused| LockError::UnsupportedStore {
                reason: refused.reason,
            })
    }

    /// The live holders of holder set `key`, longest-lived first.
    async fn set_state(&self, key: &str) -> Result<Vec<HolderState>, StoreError> {
        let mut holders: Vec<HolderState> = self
            .store()
            .set_holders(key)
            .await?
            .into_iter()
            .map(|h| HolderState {
                permits: h.count,
                remaining_ttl: h.remaining_ttl,
                holder: parse_token(&h.token),
            })
            .collect();
        holders.sort_by_key(|h| std::cmp::Reverse(h.remaining_ttl));
        Ok(holders)
    }

    /// The lock key's value and remaining ttl, if it exists (on a quorum, what a majority of
    /// the nodes hold for one lease, for as long as that majority does).
    async fn read_holder(&self, keys: &LockKeys) -> Result<Option<(String, Duration)>, StoreError> {
        self.store().lock_value(&keys.lock).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_splits_into_token_and_mark() {
        assert_eq!(parse("abc"), Some(("abc", false)));
        assert_eq!(parse("abc*"), Some(("abc", true)));
        assert_eq!(parse("abc!"), Some(("abc", true)));
        assert_eq!(parse("!"), None);
        assert_eq!(parse(""), None);
    }
}
