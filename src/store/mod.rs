//! The store: what locks and counting primitives need from a backend, and the backends behind
//! it.
//!
//! [`Store`] is an enum rather than a generic parameter so that no user-facing type carries a
//! backend parameter. Each variant implements the [`Backend`] seam with the same semantics:
//! the scripts under `scripts/` (one module per script: source, argument encoding, reply
//! decoding) define them, and the in-memory store re-implements them in Rust under a mutex.
//! What a backend can serve beyond locks is a [`Capability`], asked through
//! [`Store::supports`]; no code outside this module names a backend. `Store` bounds every
//! operation with the backend's operation timeout.
//!
//! ```text
//! store/
//!   mod.rs        Store: picks a backend; bounded entry points; capabilities
//!   backend.rs    the seam: lock operations, capabilities (refused by default)
//!   capability.rs Capability, Unsupported
//!   connect/      connection set-up shared by every Redis backend; following Sentinel
//!   pubsub/       wake-up links: plain and sharded pub/sub
//!   ratelimit/    the rate-limit contract; each algorithm in Lua and in Rust, side by side
//!   scripts/      one module per Lua script (source, arguments, reply)
//!   scripted/     the one scripted backend, over a route: one target, or by slot
//!   redis/        a single primary (plain or behind Sentinel): the single-target route
//!   cluster/      a Redis Cluster: the by-slot route, sharded pub/sub
//!   quorum/       Redlock: a majority of independent primaries, restart-aware
//!   memory/       in memory, the same semantics in Rust
//!   peek.rs       reads of a key for operators and tests
//!   batch.rs      batching of concurrent calls per connection target
//!   wakeups.rs    local waiters and the subscriptions that wake them
//! ```

mod backend;
pub(crate) mod batch;
mod capability;
pub(crate) mod cluster;
mod connect;
mod memory;
mod peek;
mod pubsub;
pub(crate) mod quorum;
mod ratelimit;
pub(crate) mod redis;
mod scripted;
pub(crate) mod scripts;
pub(crate) mod wakeups;

use std::sync::Arc;
use std::time::Duration;

pub(crate) use self::backend::Backend;
pub use self::capability::{Capability, StoreKind, Unsupported};
pub(crate) use self::connect::{RedisSettings, SentinelTarget, can_evict, policy_in};
pub(crate) use self::memory::MemoryStore;
use self::peek::{KeyScan, SetHolder};
pub(crate) use self::peek::{KeyWalk, SCAN_COUNT};
pub(crate) use self::quorum::{QuorumSettings, QuorumStore};
pub(crate) use self::ratelimit::{
    LockoutParams, PolicyParams, RateOp, RateReply, RateRequest, ScriptAlgorithm,
};
pub(crate) use self::scripted::{ScriptedStore, masters};
pub(crate) use self::scripts::acquire::{AcquireReply, Waits};
pub(crate) use self::scripts::acquire_all::AllReply;
pub(crate) use self::scripts::acquire_permits::PermitsItem;
pub(crate) use self::scripts::acquire_rw::Side;
pub(crate) use self::scripts::adaptive::{AdaptiveCall, Vote};
pub(crate) use self::scripts::bloom::{BloomOp, BloomShape, HEADER_LEN, ShardCall, ShardReply};
pub(crate) use self::scripts::fenced::{
    Change, Condition, FencedCall, FencedRead, FencedReply, FencedWrite, ReadReply, WriteReply,
};
pub(crate) use self::scripts::handoff::HandoffReply;
pub(crate) use self::scripts::idempotency::{RecordCall, RecordReply};
pub(crate) use self::scripts::leader::Record;
pub(crate) use self::scripts::mint::MintReply;
pub(crate) use self::scripts::release::CLAIM;
pub(crate) use self::scripts::renew::RenewItem;
pub(crate) use self::scripts::{Ownership, Replicas};
pub(crate) use self::wakeups::{Subscription, Wakeups};
use crate::error::StoreError;
use crate::keys::{Fences, LockKeys, RwKeys, SetKeys};
use crate::token::Token;

/// A backend: the scripted one (a single Redis primary, plain or behind Sentinel, or a Redis
/// Cluster), a Redlock quorum, or memory; or two of them, one for locks and one for counting.
#[derive(Clone)]
pub(crate) enum Store {
    Scripted(ScriptedStore),
    Quorum(QuorumStore),
    Memory(MemoryStore),
    /// Locks on one store, counting primitives (rate limits, Bloom filters, holder sets) on
    /// another: a quorum's locks with a single primary's or a Cluster's limits.
    Split(Arc<Split>),
}

/// What `Client::ping` asks, for the store locks go to.
pub(crate) enum PingTarget {
    /// Nothing to ask: in memory.
    Memory,
    /// A single primary.
    Primary(connect::PrimaryConn),
    /// A Redis Cluster, through its cluster connection.
    Cluster(::redis::cluster_async::ClusterConnection),
    /// A quorum's nodes, by name, and how many make a majority.
    Quorum(Vec<(String, ::redis::aio::ConnectionManager)>, usize),
}

/// The two stores of [`Store::Split`].
pub(crate) struct Split {
    pub(crate) locks: Store,
    pub(crate) counting: Store,
}

/// The backend a store call goes to, borrowed.
enum Backing<'a> {
    Scripted(&'a ScriptedStore),
    Quorum(&'a QuorumStore),
    Memory(&'a MemoryStore),
}

/// Calls the same `Backend` method on whichever backend a [`Backing`] is.
macro_rules! on_backend {
    ($side:expr, $s:ident => $call:expr) => {
        match $side {
            Backing::Scripted($s) => $call,
            Backing::Quorum($s) => $call,
            Backing::Memory($s) => $call,
        }
    };
}

/// Runs `$call` on the backend `$side` (a [`Backing`]) within that backend's operation
/// timeout (see [`bounded`]).
macro_rules! bounded_on {
    ($side:expr, $s:ident => $call:expr) => {{
        let side = $side;
        bounded(&side, async { on_backend!(&side, $s => $call) }).await
    }};
}

impl Store {
    /// Locks on `self`, counting primitives (rate limits, Bloom filters, holder sets) on
    /// `counting`.
    pub(crate) fn split(self, counting: Store) -> Self {
        Self::Split(Arc::new(Split {
            locks: self,
            counting,
        }))
    }

    /// The backend that serves locks.
    fn locks(&self) -> Backing<'_> {
        let mut store = self;
        loop {
            match store {
                Self::Scripted(s) => return Backing::Scripted(s),
                Self::Quorum(s) => return Backing::Quorum(s),
                Self::Memory(s) => return Backing::Memory(s),
                Self::Split(split) => store = &split.locks,
            }
        }
    }

    /// The backend that serves counting primitives: rate limits, Bloom filters, holder sets.
    fn counting(&self) -> Backing<'_> {
        let mut store = self;
        loop {
            match store {
                Self::Scripted(s) => return Backing::Scripted(s),
                Self::Quorum(s) => return Backing::Quorum(s),
                Self::Memory(s) => return Backing::Memory(s),
                Self::Split(split) => store = &split.counting,
            }
        }
    }

    /// What `Client::ping` asks: the store locks go to.
    pub(crate) fn ping_target(&self) -> PingTarget {
        match self.locks() {
            Backing::Memory(_) => PingTarget::Memory,
            Backing::Scripted(s) => s.ping_target(),
            Backing::Quorum(q) => PingTarget::Quorum(q.named_connections(), q.majority()),
        }
    }

    /// The kind of the store counting primitives go to.
    pub(crate) fn counting_kind(&self) -> StoreKind {
        on_backend!(self.counting(), s => s.kind())
    }

    /// The kind of the store locks go to.
    pub(crate) fn kind(&self) -> StoreKind {
        on_backend!(self.locks(), s => s.kind())
    }

    /// Whether a lock's waiter keeps its token across busy attempts (see
    /// [`Backend::waiter_keeps_token`]).
    pub(crate) fn waiter_keeps_token(&self) -> bool {
        on_backend!(self.locks(), s => s.waiter_keeps_token())
    }

    /// Whether this store can serve `capability`, and if not, why.
    pub(crate) fn supports(&self, capability: Capability) -> Result<(), Unsupported> {
        let side = if capability.counts() {
            self.counting()
        } else {
            self.locks()
        };
        on_backend!(side, s => s.supports(capability))
    }

    /// Where the locks of key prefix `prefix` mint their fences.
    pub(crate) fn fences(&self, prefix: &str) -> Fences {
        on_backend!(self.locks(), s => s.fences(prefix))
    }

    /// Takes a lock, minting its fence with the grant if `mint` (an eager lease).
    pub(crate) async fn acquire(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl: Duration,
        waits: Waits,
        replicas: Option<Replicas>,
        mint: bool,
    ) -> Result<AcquireReply, StoreError> {
        bounded_on!(self.locks(), s => s.acquire(keys, token, ttl, waits, replicas, mint).await)
    }

    /// Mints the fence of the lease `token` holds on the lock of `keys`, if the store still
    /// holds it for that token.
    pub(crate) async fn mint(
        &self,
        keys: &LockKeys,
        token: &Token,
    ) -> Result<MintReply, StoreError> {
        bounded_on!(self.locks(), s => s.mint(keys, token).await)
    }

    pub(crate) async fn release(
        &self,
        keys: &LockKeys,
        token: &Token,
    ) -> Result<Ownership, StoreError> {
        bounded_on!(self.locks(), s => s.release(keys, token).await)
    }

    /// Takes back the mark a waiter that waited long left on a lock, when it gives up and no
    /// other waiter of this client starves on it (`unmark.lua`).
    pub(crate) async fn unmark(&self, keys: &LockKeys) -> Result<(), StoreError> {
        bounded_on!(self.locks(), s => s.unmark(keys).await)
    }

    /// Passes a held lock from token `from` to token `to`, with a new ttl, and a fence if
    /// `mint`. Only on a store that supports [`Capability::HandOff`].
    pub(crate) async fn handoff(
        &self,
        keys: &LockKeys,
        from: &Token,
        to: &Token,
        ttl: Duration,
        mint: bool,
    ) -> Result<HandoffReply, StoreError> {
        bounded_on!(self.locks(), s => s.handoff(keys, from, to, ttl, mint).await)
    }

    /// One fenced write or read, on the store counting primitives go to (bounded by its
    /// operation timeout). Only on a store that supports [`Capability::FencedWrites`].
    pub(crate) async fn fenced(&self, call: &FencedCall<'_>) -> Result<FencedReply, StoreError> {
        bounded_on!(self.counting(), s => s.fenced(call).await)
    }

    /// One vote on a shared concurrency limit, on the store counting primitives go to (where
    /// the semaphores it bounds live). Bounded by its operation timeout.
    pub(crate) async fn adaptive(&self, call: &AdaptiveCall<'_>) -> Result<u32, StoreError> {
        bounded_on!(self.counting(), s => s.adaptive(call).await)
    }

    /// One read or store of an idempotency record, on the store locks go to (the record is
    /// stored only while its claim, a lock, is held there). Bounded by its operation timeout.
    /// Only on a store that supports [`Capability::IdempotencyRecords`].
    pub(crate) async fn idempotency(
        &self,
        call: &RecordCall<'_>,
    ) -> Result<RecordReply, StoreError> {
        bounded_on!(self.locks(), s => s.idempotency(call).await)
    }

    /// Splits the locks of a multi-lock into the groups that can each be taken in one call,
    /// all or nothing: every lock on a single primary or in memory; one group per hash slot
    /// on a cluster; one lock per group on a quorum (each is a Redlock acquire of its own).
    /// Groups come in a deterministic order (by slot on a cluster), and each keeps the
    /// locks' order.
    pub(crate) fn groups(&self, keys: &[LockKeys]) -> Vec<Vec<usize>> {
        on_backend!(self.locks(), s => s.lock_groups(keys))
    }

    /// Takes the locks of one group (see [`groups`](Self::groups)) all or nothing.
    pub(crate) async fn acquire_all(
        &self,
        keys: &[&LockKeys],
        tokens: &[Token],
        ttl: Duration,
        waits: Waits,
    ) -> Result<AllReply, StoreError> {
        bounded_on!(self.locks(), s => s.acquire_all(keys, tokens, ttl, waits).await)
    }

    pub(crate) async fn acquire_permits(
        &self,
        item: &PermitsItem<'_>,
    ) -> Result<AcquireReply, StoreError> {
        bounded_on!(self.counting(), s => s.acquire_permits(item).await)
    }

    pub(crate) async fn acquire_rw(
        &self,
        rw: Side,
        keys: &RwKeys,
        token: &Token,
        ttl: Duration,
        waits: Waits,
    ) -> Result<AcquireReply, StoreError> {
        bounded_on!(self.counting(), s => s.acquire_rw(rw, keys, token, ttl, waits).await)
    }

    pub(crate) async fn release_writer(
        &self,
        keys: &RwKeys,
        token: &Token,
    ) -> Result<Ownership, StoreError> {
        bounded_on!(self.counting(), s => s.release_writer(keys, token).await)
    }

    pub(crate) async fn release_entries(
        &self,
        keys: &SetKeys,
        token: &Token,
        count: u32,
    ) -> Result<Ownership, StoreError> {
        bounded_on!(self.counting(), s => s.release_entries(keys, token, count).await)
    }

    /// Renews leases of locks (and, on a store that is not split, of holder sets).
    pub(crate) async fn renew(
        &self,
        items: &[RenewItem<'_>],
    ) -> Result<Vec<Ownership>, StoreError> {
        bounded_on!(self.locks(), s => s.renew(items).await)
    }

    /// Runs one rate-limit check atomically (one script on Redis). Bounded by the limiter's
    /// own deadline, not here.
    pub(crate) async fn rate_limit(&self, req: &RateRequest<'_>) -> Result<RateReply, StoreError> {
        on_backend!(self.counting(), s => s.rate_limit(req).await.map_err(|e| e.with_deadline(s.op_timeout())))
    }

    /// Test-only: one rate-limit check decided at `now_us` (µs since the epoch) instead of
    /// the store's clock.
    #[cfg(feature = "test-util")]
    pub(crate) async fn rate_limit_at(
        &self,
        req: &RateRequest<'_>,
        now_us: u64,
    ) -> Result<RateReply, StoreError> {
        on_backend!(self.counting(), s => s.rate_limit_at(req, now_us).await.map_err(|e| e.with_deadline(s.op_timeout())))
    }

    /// One Bloom filter operation, bounded by the operation timeout.
    pub(crate) async fn bloom(
        &self,
        native: bool,
        op: BloomOp,
        shape: &BloomShape,
        shards: &[ShardCall],
    ) -> Result<Vec<ShardReply>, StoreError> {
        bounded_on!(self.counting(), s => s.bloom(native, op, shape, shards).await)
    }

    /// Whether the store has the RedisBloom module.
    pub(crate) async fn bloom_module(&self) -> Result<bool, StoreError> {
        bounded_on!(self.counting(), s => s.bloom_module().await)
    }

    /// The wake-up registry of the store locks go to.
    pub(crate) fn wakeups(&self) -> &Arc<Wakeups> {
        on_backend!(self.locks(), s => s.wakeups())
    }

    /// The deadline for one operation on the store locks go to.
    pub(crate) fn op_timeout(&self) -> Duration {
        on_backend!(self.locks(), s => s.op_timeout())
    }

    /// A lock key's value and remaining ttl, if it exists (on a quorum, what a majority of
    /// the nodes hold), for the operators' view of a lock.
    pub(crate) async fn lock_value(
        &self,
        key: &str,
    ) -> Result<Option<(String, Duration)>, StoreError> {
        bounded_on!(self.locks(), s => s.lock_value(key).await)
    }

    /// The keys of the lock side `walk` looks for, by `SCAN` on every node, for the
    /// operators' listing of locks. A scan is many round trips: it gets ten times the
    /// operation timeout.
    pub(crate) async fn scan_keys(&self, walk: &KeyWalk<'_>) -> Result<KeyScan, StoreError> {
        let side = self.locks();
        let op = on_backend!(&side, s => s.op_timeout());
        // One SCAN that times out on the connection names the operation timeout, the deadline
        // that passed; the whole scan's is ten of them.
        bounded_by(op.saturating_mul(10), async {
            on_backend!(&side, s => s.scan_keys(walk).await.map_err(|e| e.with_deadline(op)))
        })
        .await
    }

    /// Announces that an operator freed `key` on revocation channel `channel`, so that its
    /// holder, if listening, checks its lease at once. A failure is logged and otherwise
    /// ignored: the holder then learns at its next renewal.
    pub(crate) async fn announce_revoked(&self, channel: &str, key: &str, counting: bool) {
        let side = if counting {
            self.counting()
        } else {
            self.locks()
        };
        let announced = bounded_on!(side, s => s.announce_revoked(channel, key).await);
        if let Err(err) = announced {
            tracing::warn!(error = %err, "could not tell the holder of a forced lock at once; it learns at its next renewal");
        }
    }

    /// The live holders of a holder set (a semaphore's, a read-write lock's readers), on the
    /// store counting primitives go to.
    pub(crate) async fn set_holders(&self, key: &str) -> Result<Vec<SetHolder>, StoreError> {
        bounded_on!(self.counting(), s => s.set_holders(key).await)
    }

    /// A read-write lock's writer key: its value and remaining ttl, on the store counting
    /// primitives go to.
    pub(crate) async fn writer_value(
        &self,
        key: &str,
    ) -> Result<Option<(String, Duration)>, StoreError> {
        bounded_on!(self.counting(), s => s.lock_value(key).await)
    }

    /// Writes an election's leader record if `token` holds its lock (see `leader.lua`).
    pub(crate) async fn leader_put(
        &self,
        keys: &LockKeys,
        record_key: &str,
        token: &Token,
        record: &Record,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        bounded_on!(self.locks(), s => s.leader_put(keys, record_key, token, record, ttl).await)
    }

    /// An election's leader record, if the lease that wrote it holds the lock now.
    pub(crate) async fn leader_read(
        &self,
        keys: &LockKeys,
        record_key: &str,
    ) -> Result<Option<Record>, StoreError> {
        bounded_on!(self.locks(), s => s.leader_read(keys, record_key).await)
    }

    /// Deletes an election's leader record if `token`'s lease wrote it.
    pub(crate) async fn leader_drop(
        &self,
        keys: &LockKeys,
        record_key: &str,
        token: &Token,
    ) -> Result<bool, StoreError> {
        bounded_on!(self.locks(), s => s.leader_drop(keys, record_key, token).await)
    }

    /// Whether a waiter marks the lock it waits for in the store.
    pub(crate) fn waiters_mark_locks(&self) -> bool {
        on_backend!(self.locks(), s => s.waiters_mark_locks())
    }
}

/// Runs one operation on `side` within its operation timeout: every operation is bounded
/// here, so no caller can forget it.
fn bounded<T>(
    side: &Backing<'_>,
    op: impl Future<Output = Result<T, StoreError>>,
) -> impl Future<Output = Result<T, StoreError>> {
    bounded_by(on_backend!(side, s => s.op_timeout()), op)
}

/// Runs `op` within `limit`; a timeout names `limit` as its deadline.
///
/// A combinator, not an `async fn`: an `async fn` keeps its argument in its own state and then
/// moves it into the timeout, so every operation's future would be stored (and copied) twice
/// over, on the hot path of every lock and rate-limit call.
fn bounded_by<T>(
    limit: Duration,
    op: impl Future<Output = Result<T, StoreError>>,
) -> impl Future<Output = Result<T, StoreError>> {
    use futures_util::FutureExt as _;
    tokio::time::timeout(limit, op).map(move |result| {
        result
            .map_err(|_| StoreError::Timeout { after: limit })?
            // A timeout of the connection itself comes without its deadline: this one.
            .map_err(|e| e.with_deadline(limit))
    })
}

/// Test hooks: reads and writes of raw keys, the same way on every backend.
#[cfg(feature = "test-util")]
impl Store {
    /// The value of a string key (on a quorum, the first node that has it).
    pub(crate) async fn peek_get(&self, key: &str) -> Result<Option<String>, StoreError> {
        on_backend!(self.locks(), s => s.peek_get(key).await)
    }

    /// A key's remaining ttl (on a quorum, the longest of the nodes that have it).
    pub(crate) async fn peek_pttl(&self, key: &str) -> Result<Option<Duration>, StoreError> {
        on_backend!(self.locks(), s => s.peek_pttl(key).await)
    }

    /// Deletes a key behind every holder's back (on a quorum, on every node that answers).
    pub(crate) async fn peek_delete(&self, key: &str) -> Result<bool, StoreError> {
        on_backend!(self.locks(), s => s.peek_delete(key).await)
    }

    /// Live keys under `prefix` (on a quorum, those of every node that answers).
    pub(crate) async fn peek_keys(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        on_backend!(self.locks(), s => s.peek_keys(prefix).await)
    }

    /// How many live entries the holder set `key` has.
    pub(crate) async fn peek_live_entries(&self, key: &str) -> Result<u64, StoreError> {
        on_backend!(self.counting(), s => s.peek_live_entries(key).await)
    }
}
