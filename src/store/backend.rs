//! The seam between the store and its backends: what locks and counting primitives need from
//! one, and what each can serve.
//!
//! Every backend implements the lock operations (acquire, release, renew, unmark) with the same
//! semantics, which the scripts under `scripts/` define (the in-memory store re-implements them
//! in Rust). Everything else is a capability, which each backend serves or refuses with its
//! reason ([`Backend::refuses`]), and the operations behind it, which refuse by default until a
//! backend provides them. So a new backend is one module that implements the lock operations (and whatever else
//! it can serve) plus its constructor. [`Store`](super::Store) picks the backend and bounds
//! every call with the operation timeout, so a backend never has to.

use std::sync::Arc;
use std::time::Duration;

use super::capability::{Capability, StoreKind, Unsupported};
use super::ratelimit::{RateReply, RateRequest};
use super::scripts::acquire::AcquireReply;
use super::scripts::acquire_all::AllReply;
use super::scripts::acquire_permits::PermitsItem;
use super::scripts::adaptive::AdaptiveCall;
use super::scripts::bloom::ShardReply;
use super::scripts::fair::{FairCall, FairReply};
use super::scripts::fenced::{FencedCall, FencedReply};
use super::scripts::handoff::HandoffReply;
use super::scripts::idempotency::{RecordCall, RecordReply};

use super::peek::{KeyScan, KeyWalk, SetHolder};
use super::requests::{
    Acquire, AcquireAll, BloomCall, EntriesRelease, Handoff, LeaderKeys, LeaderPut, PathAcquire,
    PathRelease, RwAcquire,
};
use super::scripts::Ownership;
use super::scripts::leader::Record;
use super::scripts::mint::MintReply;
use super::scripts::renew::RenewItem;
use super::wakeups::Wakeups;
use crate::error::StoreError;
use crate::keys::{Fences, LockKeys, RwKeys};
use crate::token::Token;

/// One backend. Batching is the backend's business, per connection target (the one primary,
/// one node of a cluster, one node of a quorum): callers pass one item at a time (renewals
/// excepted, which the watchdog gathers itself), and concurrent calls share script calls
/// where the target allows.
pub(crate) trait Backend {
    /// Which kind of store this is.
    fn kind(&self) -> StoreKind;

    /// Whether a waiter keeps its token across busy attempts: where a straggling answer
    /// from an earlier attempt may still grant the key (a node of a quorum that answered
    /// late), the waiter must recognise that grant as its own on the next attempt.
    fn waiter_keeps_token(&self) -> bool {
        false
    }

    // ---- Lock operations: every backend has them. ----

    /// Takes the lock of `keys` for `token` if it is free; mints its fence with it if `mint`
    /// (an eager lease), else leaves that to [`mint`](Self::mint). With `replicas`, the grant
    /// counts only once that many replicas acknowledged it (else
    /// [`StoreError::NotReplicated`]; the caller releases it), on a backend that
    /// acknowledges (`Capability::ReplicaAcknowledgement`).
    async fn acquire(&self, req: &Acquire<'_>) -> Result<AcquireReply, StoreError>;

    /// Mints the fence of the lease `token` holds on the lock of `keys`, if the store still
    /// holds it for that token (else says whose the key is, and mints nothing). The fence is
    /// above every fence minted before under the lock's fence key.
    async fn mint(&self, keys: &LockKeys, token: &Token) -> Result<MintReply, StoreError>;

    /// Frees the lock if `token` holds it, waking (or reserving it for) its waiters.
    async fn release(&self, keys: &LockKeys, token: &Token) -> Result<Ownership, StoreError>;

    /// Sets each lease's ttl if its token still holds it; never re-creates a key.
    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<Ownership>, StoreError>;

    /// Takes back a starving waiter's mark on a lock.
    async fn unmark(&self, keys: &LockKeys) -> Result<(), StoreError>;

    /// The registry of local waiters, and the subscriptions that wake them.
    fn wakeups(&self) -> &Arc<Wakeups>;

    /// The most one operation may take.
    fn op_timeout(&self) -> Duration;

    /// Where the locks of key prefix `prefix` mint their fences: one fence key per prefix,
    /// unless the backend needs each lock's fence in the lock's own hash slot.
    fn fences(&self, prefix: &str) -> Fences {
        Fences::shared(prefix)
    }

    /// Splits the locks of a multi-lock into the groups that can each be taken in one call,
    /// all or nothing ([`acquire_all`](Self::acquire_all)), in a deterministic order, each
    /// group keeping the locks' order. By default one lock per group (each an acquire of its
    /// own), which every backend can do.
    fn lock_groups(&self, keys: &[LockKeys]) -> Vec<Vec<usize>> {
        (0..keys.len()).map(|i| vec![i]).collect()
    }

    /// Takes the locks of one group (see [`lock_groups`](Self::lock_groups)) all or nothing,
    /// each with its token. By default a group is one lock, taken with
    /// [`acquire`](Self::acquire).
    async fn acquire_all(&self, req: &AcquireAll<'_>) -> Result<AllReply, StoreError> {
        let ([keys], [token]) = (req.keys, req.tokens) else {
            return Err(StoreError::Protocol {
                message: format!(
                    "this store takes the locks of a multi-lock one by one, not {} at once",
                    req.keys.len()
                ),
            });
        };
        // A multi-lock's grants are eager (every lock of it mints with its grant).
        let one = Acquire {
            keys,
            token,
            ttl: req.ttl,
            waits: req.waits,
            replicas: None,
            mint: true,
        };
        Ok(match self.acquire(&one).await? {
            AcquireReply::Granted { fence: Some(fence) } => AllReply::Granted {
                fences: vec![fence],
            },
            AcquireReply::Granted { fence: None } => {
                return Err(StoreError::Protocol {
                    message: "an acquire asked to mint answered without a fence".to_owned(),
                });
            }
            AcquireReply::Busy { pttl } => AllReply::Busy { index: 0, pttl },
            // Not asked for (no replica requirement here).
            AcquireReply::Unreplicated { acked, wanted } => {
                return Err(StoreError::NotReplicated { acked, wanted });
            }
        })
    }

    // ---- Capabilities. ----

    /// Why this backend refuses `capability`, or `None` where it serves it. Each backend
    /// names its own reasons, so a refusal says what to connect instead.
    fn refuses(&self, capability: Capability) -> Option<&'static str>;

    /// Whether the backend serves `capability`, and if not, why.
    fn supports(&self, capability: Capability) -> Result<(), Unsupported> {
        match self.refuses(capability) {
            None => Ok(()),
            Some(reason) => Err(Unsupported::new(self.kind(), capability, reason)),
        }
    }

    /// The error of an operation behind a capability the backend lacks (or did not provide).
    fn lacks(&self, capability: Capability) -> StoreError {
        match self.supports(capability) {
            Err(refused) => refused.into(),
            Ok(()) => StoreError::Protocol {
                message: format!(
                    "the {} store claims {capability} but does not implement it",
                    self.kind().as_str()
                ),
            },
        }
    }

    // ---- Operations behind capabilities. ----

    /// Passes a held lock from `from` to a local waiter's `to`, with a new ttl, and its fence
    /// if `mint` (the waiter's lease is eager) ([`Capability::HandOff`]).
    async fn handoff(&self, req: &Handoff<'_>) -> Result<HandoffReply, StoreError> {
        let _ = req;
        Err(self.lacks(Capability::HandOff))
    }

    /// Takes permits of a semaphore if that many are free; mints the grant's fence.
    async fn acquire_permits(&self, item: &PermitsItem<'_>) -> Result<AcquireReply, StoreError> {
        let _ = item;
        Err(self.lacks(Capability::HolderSets))
    }

    /// Takes a read or the write hold of a read-write lock; mints the grant's fence.
    async fn acquire_rw(&self, req: &RwAcquire<'_>) -> Result<AcquireReply, StoreError> {
        let _ = req;
        Err(self.lacks(Capability::HolderSets))
    }

    /// Releases the write hold of a read-write lock, waking writers and readers.
    async fn release_writer(&self, keys: &RwKeys, token: &Token) -> Result<Ownership, StoreError> {
        let _ = (keys, token);
        Err(self.lacks(Capability::HolderSets))
    }

    /// Gives back `count` entries of `token` in a holder set, waking its waiters.
    async fn release_entries(&self, req: &EntriesRelease<'_>) -> Result<Ownership, StoreError> {
        let _ = req;
        Err(self.lacks(Capability::HolderSets))
    }

    /// Takes a hierarchical lock's path in `mode` (intention modes above, `mode` on the last
    /// level), all levels or none, in one call; mints the grant's fence. `waiter` is the same
    /// across one waiter's attempts (its intent marks are its own).
    async fn acquire_path(&self, req: &PathAcquire<'_>) -> Result<AcquireReply, StoreError> {
        let _ = req;
        Err(self.lacks(Capability::HolderSets))
    }

    /// Gives back every level's entry of a hierarchical lock's lease, waking the
    /// hierarchy's waiters.
    async fn release_path(&self, req: &PathRelease<'_>) -> Result<Ownership, StoreError> {
        let _ = req;
        Err(self.lacks(Capability::HolderSets))
    }

    /// One rate-limit check, atomically.
    async fn rate_limit(&self, req: &RateRequest<'_>) -> Result<RateReply, StoreError> {
        let _ = req;
        Err(self.lacks(Capability::RateLimits))
    }

    /// Test-only: one rate-limit check decided at `now_us` (µs since the epoch) instead of
    /// the store's clock.
    #[cfg(feature = "test-util")]
    async fn rate_limit_at(
        &self,
        at: &super::ratelimit::RateAt<'_>,
    ) -> Result<RateReply, StoreError> {
        let _ = at;
        Err(self.lacks(Capability::RateLimits))
    }

    /// One Bloom filter operation (see [`BloomCall`]).
    async fn bloom(&self, call: &BloomCall<'_>) -> Result<Vec<ShardReply>, StoreError> {
        let _ = call;
        Err(self.lacks(Capability::BloomFilters))
    }

    /// Whether the store has the RedisBloom module.
    async fn bloom_module(&self) -> Result<bool, StoreError> {
        Ok(false)
    }

    /// One fenced write to a resource, or a read of it (`fenced.lua`: the resource's keys
    /// share its slot). Only on a backend with [`Capability::FencedWrites`].
    async fn fenced(&self, call: &FencedCall<'_>) -> Result<FencedReply, StoreError> {
        let _ = call;
        Err(self.lacks(Capability::FencedWrites))
    }

    /// One vote on (or a read of) a concurrency limit shared by every replica
    /// (`adaptive.lua`). On a backend with [`Capability::HolderSets`], whose semaphores the
    /// limit bounds.
    async fn adaptive(&self, call: &AdaptiveCall<'_>) -> Result<u32, StoreError> {
        let _ = call;
        Err(self.lacks(Capability::HolderSets))
    }

    /// A read of an idempotency key's record, or a store of it while its claim (a lock of
    /// this backend, same hash tag) is held (`idempotency.lua`). Only on a backend with
    /// [`Capability::IdempotencyRecords`].
    async fn idempotency(&self, call: &RecordCall<'_>) -> Result<RecordReply, StoreError> {
        let _ = call;
        Err(self.lacks(Capability::IdempotencyRecords))
    }

    /// One call on a fair lock's queue (`fair.lua`: take in arrival order, leave, count),
    /// beside the lock's key. Only on a backend with [`Capability::FairQueues`].
    async fn fair(&self, call: &FairCall<'_>) -> Result<FairReply, StoreError> {
        let _ = call;
        Err(self.lacks(Capability::FairQueues))
    }

    // ---- Elections: a leader record beside a lock key (`leader.lua`). ----

    /// Writes `record` (term, identity) under the record key with `ttl`, if the election's
    /// lock is held by `token`; a changed record is announced on the lock's release channel.
    /// Whether it was written.
    async fn leader_put(&self, req: &LeaderPut<'_>) -> Result<bool, StoreError>;

    /// The election's record, if the lease that wrote it holds the lock now.
    async fn leader_read(&self, keys: &LeaderKeys<'_>) -> Result<Option<Record>, StoreError>;

    /// Deletes the record if `token`'s lease wrote it (announced on the release channel).
    async fn leader_drop(&self, keys: &LeaderKeys<'_>, token: &Token) -> Result<bool, StoreError>;

    // ---- The operators' view of a lock. ----

    /// A lock key's value and remaining ttl, if it exists (on a quorum: what a majority of
    /// the nodes hold).
    async fn lock_value(&self, key: &str) -> Result<Option<(String, Duration)>, StoreError>;

    /// The keys `walk` looks for, by `SCAN`: on every master of a Cluster, on every node of
    /// a quorum (a key any node has is listed; the caller reads each one's majority value).
    async fn scan_keys(&self, walk: &KeyWalk<'_>) -> Result<KeyScan, StoreError>;

    /// Announces on revocation channel `channel` that an operator freed `key` (see
    /// [`Wakeups::revocations`]). Nothing on a store without pub/sub (a Redlock quorum).
    async fn announce_revoked(&self, channel: &str, key: &str) -> Result<(), StoreError> {
        let _ = (channel, key);
        Ok(())
    }

    /// The live holders of a holder set (a semaphore's, a read-write lock's readers).
    async fn set_holders(&self, key: &str) -> Result<Vec<SetHolder>, StoreError> {
        let _ = key;
        Err(self.lacks(Capability::HolderSets))
    }

    /// Whether a waiter marks the lock it waits for in the store (every backend but memory,
    /// where every waiter is in this process and a release wakes one at once).
    fn waiters_mark_locks(&self) -> bool {
        true
    }

    // ---- Test hooks (`test-util`): raw keys, the same way on every backend. ----

    /// The value of a string key.
    #[cfg(feature = "test-util")]
    async fn peek_get(&self, key: &str) -> Result<Option<String>, StoreError>;

    /// A key's remaining ttl; `None` if it does not exist.
    #[cfg(feature = "test-util")]
    async fn peek_pttl(&self, key: &str) -> Result<Option<Duration>, StoreError>;

    /// Deletes a key; whether it existed.
    #[cfg(feature = "test-util")]
    async fn peek_delete(&self, key: &str) -> Result<bool, StoreError>;

    /// Live keys under `prefix` (`<prefix>:*`).
    #[cfg(feature = "test-util")]
    async fn peek_keys(&self, prefix: &str) -> Result<Vec<String>, StoreError>;

    /// How many live (unexpired) entries the holder set `key` has.
    #[cfg(feature = "test-util")]
    async fn peek_live_entries(&self, key: &str) -> Result<u64, StoreError>;
}
