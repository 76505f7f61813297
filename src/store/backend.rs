//! The seam between the store and its backends: what locks and rate limits need from one.
//!
//! Every backend (a single primary, a cluster, memory; a Redlock quorum next) implements the
//! same operations with the same semantics, which the scripts under `scripts/` define (the
//! in-memory store re-implements them in Rust). [`Store`](super::Store) picks the backend and
//! bounds every call with the operation timeout, so a backend never has to.

use std::sync::Arc;
use std::time::Duration;

use super::scripts::acquire::{AcquireReply, Waits};
use super::scripts::acquire_all::AllReply;
use super::scripts::acquire_permits::PermitsItem;
use super::scripts::acquire_rw::Side;
use super::scripts::bloom::{BloomOp, BloomShape, ShardCall, ShardReply};
use super::scripts::fenced::{self, FencedCall, FencedReply};
use super::scripts::handoff::HandoffReply;
use super::scripts::ratelimit::{RateReply, RateRequest};
use super::scripts::renew::RenewItem;
use super::scripts::{Held, Replicas};
use super::wakeups::Wakeups;
use crate::error::StoreError;
use crate::keys::{LockKeys, RwKeys, SetKeys};
use crate::token::Token;

/// One backend. Batching is the backend's business, per connection target (the one primary,
/// or one hash slot of a cluster): callers pass one item at a time (renewals excepted, which
/// the watchdog gathers itself), and concurrent calls share script calls where the target
/// allows.
pub(crate) trait Backend {
    /// Takes the lock of `keys` for `token` if it is free; mints its fence. With `replicas`,
    /// the grant counts only once that many replicas acknowledged it (else
    /// [`StoreError::NotReplicated`]; the caller releases it), on a backend that has them.
    async fn acquire(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl: Duration,
        waits: Waits,
        replicas: Option<Replicas>,
    ) -> Result<AcquireReply, StoreError>;

    /// Frees the lock if `token` holds it, waking (or reserving it for) its waiters.
    async fn release(&self, keys: &LockKeys, token: &Token) -> Result<Held, StoreError>;

    /// Sets each lease's ttl if its token still holds it; never re-creates a key.
    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<Held>, StoreError>;

    /// Whether [`handoff`](Self::handoff) is worth calling (the in-memory store wakes its
    /// waiters at once anyway).
    fn hands_off(&self) -> bool;

    /// Passes a held lock from `from` to a local waiter's `to`, with a new ttl and fence.
    async fn handoff(
        &self,
        keys: &LockKeys,
        from: &Token,
        to: &Token,
        ttl: Duration,
    ) -> Result<HandoffReply, StoreError>;

    /// Takes back a starving waiter's mark on a lock.
    async fn unmark(&self, keys: &LockKeys) -> Result<(), StoreError>;

    /// Takes several locks of one connection target (see
    /// [`Store::groups`](super::Store::groups)) all or nothing, each with its token.
    async fn acquire_all(
        &self,
        keys: &[&LockKeys],
        tokens: &[Token],
        ttl: Duration,
        waits: Waits,
    ) -> Result<AllReply, StoreError>;

    /// Takes permits of a semaphore if that many are free; mints the grant's fence.
    async fn acquire_permits(&self, item: &PermitsItem<'_>) -> Result<AcquireReply, StoreError>;

    /// Takes a read or the write hold of a read-write lock; mints the grant's fence.
    async fn acquire_rw(
        &self,
        side: Side,
        keys: &RwKeys,
        token: &Token,
        ttl: Duration,
        waits: Waits,
    ) -> Result<AcquireReply, StoreError>;

    /// Releases the write hold of a read-write lock, waking writers and readers.
    async fn release_writer(&self, keys: &RwKeys, token: &Token) -> Result<Held, StoreError>;

    /// Gives back `count` entries of `token` in a holder set, waking its waiters.
    async fn release_entries(
        &self,
        keys: &SetKeys,
        token: &Token,
        count: u32,
    ) -> Result<Held, StoreError>;

    /// One rate-limit check, atomically.
    async fn rate_limit(&self, req: &RateRequest<'_>) -> Result<RateReply, StoreError>;

    /// One Bloom filter operation on `shards`, kept in bitmaps (`bloom.lua`) or, when
    /// `native`, by the RedisBloom module (`bloom_native.lua`). Shards of different hash
    /// slots go in separate calls, at once.
    async fn bloom(
        &self,
        native: bool,
        op: BloomOp,
        shape: &BloomShape,
        shards: &[ShardCall],
    ) -> Result<Vec<ShardReply>, StoreError>;

    /// Whether the store has the RedisBloom module.
    async fn bloom_module(&self) -> Result<bool, StoreError>;

    /// One fenced write to a resource, or a read of it (`fenced.lua`: the resource's keys
    /// share its slot). Refused by default: a backend without one store that holds the
    /// resource (a Redlock quorum) keeps the default; one that can route such calls to a store
    /// of its own (a quorum with a separate counting store) overrides it.
    async fn fenced(&self, call: &FencedCall<'_>) -> Result<FencedReply, StoreError> {
        let _ = call;
        Err(StoreError::Config {
            message: fenced::UNSUPPORTED.to_owned(),
        })
    }

    /// The registry of local waiters, and the subscriptions that wake them.
    fn wakeups(&self) -> &Arc<Wakeups>;

    /// The most one operation may take.
    fn op_timeout(&self) -> Duration;
}
