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
//!   requests.rs   one request struct per operation of many parameters, taken whole
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
mod requests;
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
pub(crate) use self::requests::{
    Acquire, AcquireAll, BloomCall, EntriesRelease, Handoff, LeaderKeys, LeaderPut, PathAcquire,
    PathRelease, RwAcquire,
};
pub(crate) use self::scripted::{ScriptedStore, masters};
pub(crate) use self::scripts::acquire::{AcquireReply, Waits};
pub(crate) use self::scripts::acquire_all::AllReply;
pub(crate) use self::scripts::acquire_permits::PermitsItem;
pub(crate) use self::scripts::acquire_rw::Side;
pub(crate) use self::scripts::adaptive::{AdaptiveCall, Vote};
pub(crate) use self::scripts::bloom::{BloomOp, BloomShape, HEADER_LEN, ShardCall, ShardReply};
pub(crate) use self::scripts::fair::{FAIR_CLAIM, FairCall, FairReply, FairTake};
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
use crate::keys::{Fences, LockKeys, RwKeys};
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

/// `Store` methods that forward one [`Backend`] operation to the backend of the side that
/// serves it (`locks` or `counting`), one line each: `how side => fn op(args) -> T;`, the
/// backend's method `op` without `&self`, and, for an async one, without `Result`'s error.
///
/// - `sync`: asks the backend at once (`T` as it is);
/// - `bounded`: async, within the side's operation timeout (see [`bounded`]);
/// - `unbounded`: async, as the backend runs it (the test hooks).
///
/// An operation whose `Store` method does more than that (another side, another deadline,
/// another name) is written by hand instead.
macro_rules! forward {
    ($($(#[$doc:meta])* $how:ident $side:ident => fn $op:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(forward!(@$how [$(#[$doc])*] $side $op [$($arg: $ty),*] [$($arg),*] $ret);)*
    };
    (@sync [$($doc:tt)*] $side:ident $op:ident [$($param:tt)*] [$($arg:ident),*] $ret:ty) => {
        $($doc)* pub(crate) fn $op(&self, $($param)*) -> $ret {
            on_backend!(self.$side(), s => s.$op($($arg),*))
        }
    };
    (@bounded $($rest:tt)*) => { forward!(@async bounded_on $($rest)*); };
    (@unbounded $($rest:tt)*) => { forward!(@async on_backend $($rest)*); };
    (@async $on:ident [$($doc:tt)*] $side:ident $op:ident [$($param:tt)*] [$($arg:ident),*] $ret:ty) => {
        $($doc)* pub(crate) async fn $op(&self, $($param)*) -> Result<$ret, StoreError> {
            $on!(self.$side(), s => s.$op($($arg),*).await)
        }
    };
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
        self.side(|split| &split.locks)
    }

    /// The backend that serves counting primitives: rate limits, Bloom filters, holder sets.
    fn counting(&self) -> Backing<'_> {
        self.side(|split| &split.counting)
    }

    /// The backend of one side: this store's, or through a split, the store `pick` takes
    /// of it (itself perhaps split).
    fn side(&self, pick: fn(&Split) -> &Store) -> Backing<'_> {
        let mut store = self;
        loop {
            match store {
                Self::Scripted(s) => return Backing::Scripted(s),
                Self::Quorum(s) => return Backing::Quorum(s),
                Self::Memory(s) => return Backing::Memory(s),
                Self::Split(split) => store = pick(split),
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

    forward! {
        /// The kind of the store locks go to.
        sync locks => fn kind() -> StoreKind;
        /// Whether a lock's waiter keeps its token across busy attempts (see
        /// [`Backend::waiter_keeps_token`]).
        sync locks => fn waiter_keeps_token() -> bool;
        /// Where the locks of key prefix `prefix` mint their fences.
        sync locks => fn fences(prefix: &str) -> Fences;
        /// The wake-up registry of the store locks go to.
        sync locks => fn wakeups() -> &Arc<Wakeups>;
        /// The deadline for one operation on the store locks go to.
        sync locks => fn op_timeout() -> Duration;
        /// Whether a waiter marks the lock it waits for in the store.
        sync locks => fn waiters_mark_locks() -> bool;

        /// Takes a lock, minting its fence with the grant if `mint` (an eager lease).
        bounded locks => fn acquire(req: &Acquire<'_>) -> AcquireReply;
        /// Mints the fence of the lease `token` holds on the lock of `keys`, if the store still
        /// holds it for that token.
        bounded locks => fn mint(keys: &LockKeys, token: &Token) -> MintReply;
        bounded locks => fn release(keys: &LockKeys, token: &Token) -> Ownership;
        /// Takes back the mark a waiter that waited long left on a lock, when it gives up and
        /// no other waiter of this client starves on it (`unmark.lua`).
        bounded locks => fn unmark(keys: &LockKeys) -> ();
        /// Renews leases of locks (and, on a store that is not split, of holder sets).
        bounded locks => fn renew(items: &[RenewItem<'_>]) -> Vec<Ownership>;
        /// Passes a held lock from token `from` to token `to`, with a new ttl, and a fence if
        /// `mint`. Only on a store that supports [`Capability::HandOff`].
        bounded locks => fn handoff(req: &Handoff<'_>) -> HandoffReply;
        /// Takes the locks of one group (see [`groups`](Self::groups)) all or nothing.
        bounded locks => fn acquire_all(req: &AcquireAll<'_>) -> AllReply;
        /// One read or store of an idempotency record, on the store locks go to (the record
        /// is stored only while its claim, a lock, is held there). Bounded by its operation
        /// timeout. Only on a store that supports [`Capability::IdempotencyRecords`].
        bounded locks => fn idempotency(call: &RecordCall<'_>) -> RecordReply;
        /// One call on a fair lock's queue (`fair.lua`), on the store locks go to (the queue
        /// sits beside its lock). Only on a store that supports [`Capability::FairQueues`].
        bounded locks => fn fair(call: &FairCall<'_>) -> FairReply;
        /// A lock key's value and remaining ttl, if it exists (on a quorum, what a majority
        /// of the nodes hold), for the operators' view of a lock.
        bounded locks => fn lock_value(key: &str) -> Option<(String, Duration)>;
        /// Writes an election's leader record if `token` holds its lock (see `leader.lua`).
        bounded locks => fn leader_put(req: &LeaderPut<'_>) -> bool;
        /// An election's leader record, if the lease that wrote it holds the lock now.
        bounded locks => fn leader_read(keys: &LeaderKeys<'_>) -> Option<Record>;
        /// Deletes an election's leader record if `token`'s lease wrote it.
        bounded locks => fn leader_drop(keys: &LeaderKeys<'_>, token: &Token) -> bool;

        /// One fenced write or read, on the store counting primitives go to (bounded by its
        /// operation timeout). Only on a store that supports [`Capability::FencedWrites`].
        bounded counting => fn fenced(call: &FencedCall<'_>) -> FencedReply;
        /// One vote on a shared concurrency limit, on the store counting primitives go to
        /// (where the semaphores it bounds live). Bounded by its operation timeout.
        bounded counting => fn adaptive(call: &AdaptiveCall<'_>) -> u32;
        bounded counting => fn acquire_permits(item: &PermitsItem<'_>) -> AcquireReply;
        bounded counting => fn acquire_rw(req: &RwAcquire<'_>) -> AcquireReply;
        bounded counting => fn release_writer(keys: &RwKeys, token: &Token) -> Ownership;
        bounded counting => fn release_entries(req: &EntriesRelease<'_>) -> Ownership;
        /// Takes a hierarchical lock's path, all levels or none (`acquire_path.lua`).
        bounded counting => fn acquire_path(req: &PathAcquire<'_>) -> AcquireReply;
        /// Gives back a hierarchical lock's path (`release_path.lua`).
        bounded counting => fn release_path(req: &PathRelease<'_>) -> Ownership;
        /// One Bloom filter operation, bounded by the operation timeout.
        bounded counting => fn bloom(call: &BloomCall<'_>) -> Vec<ShardReply>;
        /// Whether the store has the RedisBloom module.
        bounded counting => fn bloom_module() -> bool;
        /// The live holders of a holder set (a semaphore's, a read-write lock's readers), on
        /// the store counting primitives go to.
        bounded counting => fn set_holders(key: &str) -> Vec<SetHolder>;
    }

    // ---- Written by hand: each does more than forward. ----

    /// The kind of the store counting primitives go to.
    pub(crate) fn counting_kind(&self) -> StoreKind {
        on_backend!(self.counting(), s => s.kind())
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

    /// Splits the locks of a multi-lock into the groups that can each be taken in one call,
    /// all or nothing: every lock on a single primary or in memory; one group per hash slot
    /// on a cluster; one lock per group on a quorum (each is a Redlock acquire of its own).
    /// Groups come in a deterministic order (by slot on a cluster), and each keeps the
    /// locks' order.
    pub(crate) fn groups(&self, keys: &[LockKeys]) -> Vec<Vec<usize>> {
        on_backend!(self.locks(), s => s.lock_groups(keys))
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
        let at = ratelimit::RateAt { req, now_us };
        on_backend!(self.counting(), s => s.rate_limit_at(&at).await.map_err(|e| e.with_deadline(s.op_timeout())))
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

    /// A read-write lock's writer key: its value and remaining ttl, on the store counting
    /// primitives go to.
    pub(crate) async fn writer_value(
        &self,
        key: &str,
    ) -> Result<Option<(String, Duration)>, StoreError> {
        bounded_on!(self.counting(), s => s.lock_value(key).await)
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
    forward! {
        /// The value of a string key (on a quorum, the first node that has it).
        unbounded locks => fn peek_get(key: &str) -> Option<String>;
        /// A key's remaining ttl (on a quorum, the longest of the nodes that have it).
        unbounded locks => fn peek_pttl(key: &str) -> Option<Duration>;
        /// Deletes a key behind every holder's back (on a quorum, on every node that answers).
        unbounded locks => fn peek_delete(key: &str) -> bool;
        /// Live keys under `prefix` (on a quorum, those of every node that answers).
        unbounded locks => fn peek_keys(prefix: &str) -> Vec<String>;
        /// How many live entries the holder set `key` has.
        unbounded counting => fn peek_live_entries(key: &str) -> u64;
    }
}
