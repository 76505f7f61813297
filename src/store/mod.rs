//! The store: what locks and rate limits need from a backend, and the backends behind it.
//!
//! [`Store`] is an enum rather than a generic parameter so that no user-facing type carries a
//! backend parameter. Each variant implements the [`Backend`] seam with the same semantics:
//! the scripts under `scripts/` (one module per script: source, argument encoding, reply
//! decoding) define them, and the in-memory store re-implements them in Rust under a mutex.
//! `Store` bounds every operation with the backend's operation timeout.
//!
//! ```text
//! store/
//!   mod.rs        Store: picks a backend; bounded entry points
//!   backend.rs    the seam
//!   scripts/      one module per Lua script
//!   redis/        a single primary: connect, pub/sub, operations
//!   cluster/      a Redis Cluster: per-slot batches and fences, sharded pub/sub
//!   quorum/       Redlock: a majority of independent primaries, restart-aware
//!   memory/       in memory, with the rate-limit algorithms in Rust
//!   batch.rs      batching of concurrent calls per connection target
//!   wakeups.rs    local waiters and the subscriptions that wake them
//! ```

mod backend;
pub(crate) mod batch;
pub(crate) mod cluster;
mod memory;
pub(crate) mod quorum;
pub(crate) mod redis;
pub(crate) mod scripts;
pub(crate) mod wakeups;

use std::sync::Arc;
use std::time::Duration;

pub(crate) use self::backend::Backend;
pub(crate) use self::cluster::ClusterStore;
pub(crate) use self::memory::MemoryStore;
pub(crate) use self::quorum::{QuorumSettings, QuorumStore};
pub(crate) use self::redis::RedisStore;
pub(crate) use self::scripts::acquire::{AcquireReply, Waits};
pub(crate) use self::scripts::acquire_all::AllReply;
pub(crate) use self::scripts::acquire_permits::PermitsItem;
pub(crate) use self::scripts::acquire_rw::Side;
pub(crate) use self::scripts::bloom::{BloomOp, BloomShape, HEADER_LEN, ShardCall, ShardReply};
pub(crate) use self::scripts::fenced::{
    Change, Condition, FencedCall, FencedRead, FencedReply, FencedWrite, ReadReply, WriteReply,
};
pub(crate) use self::scripts::handoff::HandoffReply;
pub(crate) use self::scripts::ratelimit::{Kind, PolicyParams, RateOp, RateReply, RateRequest};
pub(crate) use self::scripts::release::CLAIM;
pub(crate) use self::scripts::renew::RenewItem;
pub(crate) use self::scripts::{Held, Replicas};
pub(crate) use self::wakeups::{Subscription, Wakeups};
use crate::error::StoreError;
use crate::keys::{LockKeys, RwKeys, SetKeys, slot_of};
use crate::token::Token;

/// A backend: a single Redis primary, a Redis Cluster, a Redlock quorum, or memory.
#[derive(Clone)]
pub(crate) enum Store {
    Redis(RedisStore),
    Cluster(ClusterStore),
    Quorum(QuorumStore),
    Memory(MemoryStore),
}

/// A replica requirement on a backend that cannot wait for replicas.
pub(crate) fn replicas_unsupported(kind: &str) -> StoreError {
    StoreError::Config {
        message: format!(
            "replica acknowledgement (replicas(n, timeout)) needs a single primary, plain or \
             behind Sentinel; this client is on {kind}"
        ),
    }
}

/// Calls the same `Backend` method on whichever backend this is.
macro_rules! on_backend {
    ($store:expr, $s:ident => $call:expr) => {
        match $store {
            Store::Redis($s) => $call,
            Store::Cluster($s) => $call,
            Store::Quorum($s) => $call,
            Store::Memory($s) => $call,
        }
    };
}

impl Store {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Redis(_) => "redis",
            Self::Cluster(_) => "cluster",
            Self::Quorum(_) => "quorum",
            Self::Memory(_) => "memory",
        }
    }

    pub(crate) async fn acquire(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl: Duration,
        waits: Waits,
        replicas: Option<Replicas>,
    ) -> Result<AcquireReply, StoreError> {
        self.bounded(async {
            on_backend!(self, s => s.acquire(keys, token, ttl, waits, replicas).await)
        })
        .await
    }

    /// Whether this store can wait for replicas to acknowledge a write (a single primary,
    /// plain or behind Sentinel).
    pub(crate) fn waits_for_replicas(&self) -> bool {
        matches!(self, Self::Redis(_))
    }

    pub(crate) async fn release(&self, keys: &LockKeys, token: &Token) -> Result<Held, StoreError> {
        self.bounded(async { on_backend!(self, s => s.release(keys, token).await) })
            .await
    }

    /// Takes back the mark a waiter that waited long left on a lock, when it gives up and no
    /// other waiter of this client starves on it (`unmark.lua`).
    pub(crate) async fn unmark(&self, keys: &LockKeys) -> Result<(), StoreError> {
        self.bounded(async { on_backend!(self, s => s.unmark(keys).await) })
            .await
    }

    /// Whether a holder can pass its lock straight to a local waiter
    /// ([`handoff`](Self::handoff)).
    pub(crate) fn hands_off(&self) -> bool {
        on_backend!(self, s => s.hands_off())
    }

    /// Passes a held lock from token `from` to token `to`, with a new ttl and fence. Only on
    /// a store that [`hands_off`](Self::hands_off).
    pub(crate) async fn handoff(
        &self,
        keys: &LockKeys,
        from: &Token,
        to: &Token,
        ttl: Duration,
    ) -> Result<HandoffReply, StoreError> {
        self.bounded(async { on_backend!(self, s => s.handoff(keys, from, to, ttl).await) })
            .await
    }

    /// Whether this store has holder sets (semaphores, read-write locks): every store but a
    /// Redlock quorum, where counting holders on independent primaries is not exact.
    pub(crate) fn has_holder_sets(&self) -> bool {
        !matches!(self, Self::Quorum(_))
    }

    /// Whether this store can hold fenced resources (`Client::fenced`): every store but a
    /// Redlock quorum, whose independent primaries would each keep a different last fence.
    /// (A quorum client that routes its counting primitives to a store of its own would route
    /// these there too, and say yes.)
    pub(crate) fn has_fenced_writes(&self) -> bool {
        !matches!(self, Self::Quorum(_))
    }

    /// One fenced write or read, bounded by the operation timeout.
    pub(crate) async fn fenced(&self, call: &FencedCall<'_>) -> Result<FencedReply, StoreError> {
        self.bounded(async { on_backend!(self, s => s.fenced(call).await) })
            .await
    }

    /// Splits the locks of a multi-lock into the groups that can each be taken in one call,
    /// all or nothing: every lock on a single primary or in memory; one group per hash slot
    /// on a cluster; one lock per group on a quorum (each is a Redlock acquire of its own).
    /// Groups come in a deterministic order (by slot on a cluster), and each keeps the
    /// locks' order.
    pub(crate) fn groups(&self, keys: &[LockKeys]) -> Vec<Vec<usize>> {
        match self {
            Self::Redis(_) | Self::Memory(_) => vec![(0..keys.len()).collect()],
            Self::Quorum(_) => (0..keys.len()).map(|i| vec![i]).collect(),
            Self::Cluster(_) => {
                let mut by_slot: std::collections::BTreeMap<u16, Vec<usize>> =
                    std::collections::BTreeMap::new();
                for (i, k) in keys.iter().enumerate() {
                    by_slot.entry(slot_of(&k.lock)).or_default().push(i);
                }
                by_slot.into_values().collect()
            }
        }
    }

    /// Takes the locks of one group (see [`groups`](Self::groups)) all or nothing.
    pub(crate) async fn acquire_all(
        &self,
        keys: &[&LockKeys],
        tokens: &[Token],
        ttl: Duration,
        waits: Waits,
    ) -> Result<AllReply, StoreError> {
        self.bounded(async {
            on_backend!(self, s => s.acquire_all(keys, tokens, ttl, waits).await)
        })
        .await
    }

    pub(crate) async fn acquire_permits(
        &self,
        item: &PermitsItem<'_>,
    ) -> Result<AcquireReply, StoreError> {
        self.bounded(async { on_backend!(self, s => s.acquire_permits(item).await) })
            .await
    }

    pub(crate) async fn acquire_rw(
        &self,
        side: Side,
        keys: &RwKeys,
        token: &Token,
        ttl: Duration,
        waits: Waits,
    ) -> Result<AcquireReply, StoreError> {
        self.bounded(async {
            on_backend!(self, s => s.acquire_rw(side, keys, token, ttl, waits).await)
        })
        .await
    }

    pub(crate) async fn release_writer(
        &self,
        keys: &RwKeys,
        token: &Token,
    ) -> Result<Held, StoreError> {
        self.bounded(async { on_backend!(self, s => s.release_writer(keys, token).await) })
            .await
    }

    pub(crate) async fn release_entries(
        &self,
        keys: &SetKeys,
        token: &Token,
        count: u32,
    ) -> Result<Held, StoreError> {
        self.bounded(async { on_backend!(self, s => s.release_entries(keys, token, count).await) })
            .await
    }

    pub(crate) async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<Held>, StoreError> {
        self.bounded(async { on_backend!(self, s => s.renew(items).await) })
            .await
    }

    /// Runs one rate-limit check atomically (one script on Redis). Bounded by the limiter's
    /// own deadline, not here.
    pub(crate) async fn rate_limit(&self, req: &RateRequest<'_>) -> Result<RateReply, StoreError> {
        on_backend!(self, s => s.rate_limit(req).await)
    }

    /// Test-only: one rate-limit check decided at `now_us` (µs since the epoch) instead of
    /// the store's clock.
    #[cfg(feature = "test-util")]
    pub(crate) async fn rate_limit_at(
        &self,
        req: &RateRequest<'_>,
        now_us: u64,
    ) -> Result<RateReply, StoreError> {
        match self {
            Self::Redis(s) => s.rate_limit_at(req, now_us).await,
            Self::Cluster(s) => s.rate_limit_at(req, now_us).await,
            Self::Quorum(s) => s.rate_limit(req).await,
            Self::Memory(s) => Ok(s.rate_limit_at(req, now_us)),
        }
    }

    /// One Bloom filter operation, bounded by the operation timeout.
    pub(crate) async fn bloom(
        &self,
        native: bool,
        op: BloomOp,
        shape: &BloomShape,
        shards: &[ShardCall],
    ) -> Result<Vec<ShardReply>, StoreError> {
        self.bounded(async { on_backend!(self, s => s.bloom(native, op, shape, shards).await) })
            .await
    }

    /// Whether the store has the RedisBloom module.
    pub(crate) async fn bloom_module(&self) -> Result<bool, StoreError> {
        self.bounded(async { on_backend!(self, s => s.bloom_module().await) })
            .await
    }

    pub(crate) fn wakeups(&self) -> &Arc<Wakeups> {
        on_backend!(self, s => s.wakeups())
    }

    /// Runs one store operation within [`op_timeout`](Self::op_timeout): every operation is
    /// bounded here, so no caller can forget it.
    async fn bounded<T>(
        &self,
        op: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let limit = self.op_timeout();
        tokio::time::timeout(limit, op)
            .await
            .map_err(|_| StoreError::Timeout { after: limit })?
    }

    /// The deadline for one operation on this store.
    pub(crate) fn op_timeout(&self) -> Duration {
        on_backend!(self, s => s.op_timeout())
    }
}
