//! The Redis Cluster backend, over redis-rs's cluster-async connection (which follows `MOVED`
//! and `ASK`, retries `TRYAGAIN` and refreshes its slot map, within the operation's deadline).
//!
//! Every script call is single-slot: a lock's keys, its channel and (unlike on a single
//! primary) its fence key share the lock's slot, and every key of one rate-limit check shares
//! the subject's. Concurrent calls are batched **per slot** (a script may only touch one slot),
//! so names spread over the cluster go out as independent calls to their nodes at once, and
//! names of one slot still share calls. Renewals are grouped by slot and sent concurrently.
//! Wake-ups travel on sharded pub/sub (`SSUBSCRIBE`/`SPUBLISH`, Redis 7) in the lock's slot.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::cluster_async::ClusterConnection;

use super::backend::Backend;
use super::batch::{Batch, Batcher, batcher};
use super::capability::{Capability, StoreKind, Unsupported};
use super::connect::{RedisSettings, check_cluster_mode, cluster_client, probe};
use super::peek;
use super::pubsub::ShardedLink;
use super::ratelimit::script::{RateItem, Rates};
use super::ratelimit::{RateReply, RateRequest};
use super::scripts::acquire::{AcquireItem, AcquireReply, Acquires, Waits};
use super::scripts::acquire_all::{self, AllReply};
use super::scripts::acquire_permits::{self, PermitsItem};
use super::scripts::acquire_rw::{self, Side};
use super::scripts::bloom::{self, BloomOp, BloomShape, ShardCall, ShardReply};
use super::scripts::bloom_native;
use super::scripts::handoff::{self, HandoffReply};
use super::scripts::release::{ReleaseItem, Releases};
use super::scripts::renew::{self, RenewItem};
use super::scripts::{Held, Publish, Replicas, millis, unmark};
use super::scripts::{release_entries, release_writer};
use super::wakeups::Wakeups;
use crate::error::StoreError;
use crate::keys::{Fences, LockKeys, RwKeys, SetKeys, slot_of};
use crate::token::Token;

#[derive(Clone)]
pub(crate) struct ClusterStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: ClusterConnection,
    settings: RedisSettings,
    wakeups: Arc<Wakeups>,
    acquires: SlotBatchers<Acquires<ClusterConnection>>,
    releases: SlotBatchers<Releases<ClusterConnection>>,
    rates: SlotBatchers<Rates<ClusterConnection>>,
}

/// One batcher of a kind per hash slot, made when the slot is first used.
struct SlotBatchers<B: Batch> {
    op: B,
    timeout: Duration,
    slots: Mutex<HashMap<u16, Batcher<B>>>,
}

impl<B: Batch> SlotBatchers<B> {
    fn new(op: B, timeout: Duration) -> Self {
        Self {
            op,
            timeout,
            slots: Mutex::new(HashMap::new()),
        }
    }

    fn of(&self, slot: u16) -> Batcher<B> {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(slot)
            .or_insert_with(|| batcher(self.op.clone(), self.timeout))
            .clone()
    }
}

impl ClusterStore {
    /// Connects to the cluster that `nodes` belong to: one plain attempt to the first node
    /// (wrong credentials fail once, clearly; the node must run in cluster mode and be Redis
    /// 7.0 or newer, for sharded pub/sub), then the cluster connection, then the lazily used
    /// pub/sub link.
    pub(crate) async fn connect(
        nodes: Vec<redis::ConnectionInfo>,
        settings: RedisSettings,
    ) -> Result<Self, StoreError> {
        let Some(first) = nodes.first() else {
            return Err(StoreError::Config {
                message: "a cluster needs at least one node URL".to_owned(),
            });
        };
        let mut conn = probe(settings.client(first.clone())?, &settings).await?;
        check_cluster_mode(&mut conn, true).await?;
        drop(conn);
        let client = cluster_client(&nodes, &settings).build()?;
        let limit = settings.connect_timeout.saturating_mul(2);
        let conn = tokio::time::timeout(limit, client.get_async_connection())
            .await
            .map_err(|_| StoreError::Timeout { after: limit })??;
        let wakeups = Wakeups::new();
        match ShardedLink::connect(&nodes, &settings, &wakeups).await {
            Ok(link) => wakeups.set_link(Box::new(link)),
            Err(err) => {
                wakeups.set_deaf();
                tracing::warn!(
                    error = %err,
                    "no pub/sub connection for release wake-ups; waiters will poll"
                );
            }
        }
        let timeout = settings.response_timeout;
        let publish = Publish::Sharded;
        Ok(Self {
            inner: Arc::new(Inner {
                acquires: SlotBatchers::new(
                    Acquires {
                        conn: conn.clone(),
                        publish,
                    },
                    timeout,
                ),
                releases: SlotBatchers::new(
                    Releases {
                        conn: conn.clone(),
                        publish,
                    },
                    timeout,
                ),
                rates: SlotBatchers::new(Rates { conn: conn.clone() }, timeout),
                conn,
                settings,
                wakeups,
            }),
        })
    }

    fn deadline(&self, err: StoreError) -> StoreError {
        err.with_deadline(self.inner.settings.response_timeout)
    }
}

impl Backend for ClusterStore {
    fn kind(&self) -> StoreKind {
        StoreKind::Cluster
    }

    fn holder_sets(&self) -> Result<(), Unsupported> {
        Ok(())
    }

    fn rate_limits(&self) -> Result<(), Unsupported> {
        Ok(())
    }

    fn bloom_filters(&self) -> Result<(), Unsupported> {
        Ok(())
    }

    fn replica_acknowledgement(&self) -> Result<(), Unsupported> {
        Err(self.refusal(Capability::ReplicaAcknowledgement, REPLICAS_UNSUPPORTED))
    }

    fn hand_off(&self) -> Result<(), Unsupported> {
        Ok(())
    }

    /// A lock's fence key lives in the lock's own slot.
    fn fences(&self, prefix: &str) -> Fences {
        Fences::per_slot(prefix)
    }

    /// One group per hash slot, in slot order: a script may only touch one slot.
    fn lock_groups(&self, keys: &[LockKeys]) -> Vec<Vec<usize>> {
        let mut by_slot: std::collections::BTreeMap<u16, Vec<usize>> =
            std::collections::BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            by_slot.entry(slot_of(&k.lock)).or_default().push(i);
        }
        by_slot.into_values().collect()
    }

    async fn acquire(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl: Duration,
        waits: Waits,
        replicas: Option<Replicas>,
    ) -> Result<AcquireReply, StoreError> {
        if replicas.is_some() {
            return Err(self.lacks(Capability::ReplicaAcknowledgement));
        }
        let item = AcquireItem {
            keys: keys.clone(),
            token: token.clone(),
            ttl_ms: millis(ttl),
            waits,
            replicas: None,
        };
        self.inner
            .acquires
            .of(slot_of(&keys.lock))
            .run(item)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn release(&self, keys: &LockKeys, token: &Token) -> Result<Held, StoreError> {
        let item = ReleaseItem {
            keys: keys.clone(),
            token: token.clone(),
        };
        self.inner
            .releases
            .of(slot_of(&keys.lock))
            .run(item)
            .await
            .map_err(|e| self.deadline(e))
    }

    /// One call per slot, all at once; the answers are put back in the items' order.
    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<Held>, StoreError> {
        let mut by_slot: HashMap<u16, Vec<usize>> = HashMap::new();
        for (i, item) in items.iter().enumerate() {
            by_slot.entry(slot_of(item.key)).or_default().push(i);
        }
        let calls = by_slot.into_values().map(|indices| async move {
            let group: Vec<RenewItem<'_>> = indices
                .iter()
                .map(|&i| RenewItem {
                    key: items[i].key,
                    token: items[i].token,
                    ttl: items[i].ttl,
                    entries: items[i].entries,
                    replicas: items[i].replicas,
                })
                .collect();
            renew::run(&self.inner.conn, &group)
                .await
                .map(|held| (indices, held))
        });
        let mut answers = vec![Held::Gone; items.len()];
        for result in futures_util::future::join_all(calls).await {
            let (indices, held) = result.map_err(|e| self.deadline(e))?;
            for (i, h) in indices.into_iter().zip(held) {
                answers[i] = h;
            }
        }
        Ok(answers)
    }

    async fn handoff(
        &self,
        keys: &LockKeys,
        from: &Token,
        to: &Token,
        ttl: Duration,
    ) -> Result<HandoffReply, StoreError> {
        handoff::run(&self.inner.conn, Publish::Sharded, keys, from, to, ttl)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn unmark(&self, keys: &LockKeys) -> Result<(), StoreError> {
        unmark::run(&self.inner.conn, keys)
            .await
            .map_err(|e| self.deadline(e))
    }

    /// One slot's locks (the store groups a multi-lock by slot).
    async fn acquire_all(
        &self,
        keys: &[&LockKeys],
        tokens: &[Token],
        ttl: Duration,
        waits: Waits,
    ) -> Result<AllReply, StoreError> {
        acquire_all::run(&self.inner.conn, keys, tokens, ttl, waits)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn acquire_permits(&self, item: &PermitsItem<'_>) -> Result<AcquireReply, StoreError> {
        acquire_permits::run(&self.inner.conn, item)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn acquire_rw(
        &self,
        side: Side,
        keys: &RwKeys,
        token: &Token,
        ttl: Duration,
        waits: Waits,
    ) -> Result<AcquireReply, StoreError> {
        acquire_rw::run(&self.inner.conn, side, keys, token, ttl, waits)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn release_writer(&self, keys: &RwKeys, token: &Token) -> Result<Held, StoreError> {
        release_writer::run(&self.inner.conn, Publish::Sharded, keys, token)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn release_entries(
        &self,
        keys: &SetKeys,
        token: &Token,
        count: u32,
    ) -> Result<Held, StoreError> {
        release_entries::run(&self.inner.conn, Publish::Sharded, keys, token, count)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn rate_limit(&self, req: &RateRequest<'_>) -> Result<RateReply, StoreError> {
        let slot = req.keys.first().map_or(0, |key| slot_of(key));
        self.inner
            .rates
            .of(slot)
            .run(RateItem::of(req))
            .await
            .map_err(|e| self.deadline(e))
    }

    #[cfg(feature = "test-util")]
    async fn rate_limit_at(
        &self,
        req: &RateRequest<'_>,
        now_us: u64,
    ) -> Result<RateReply, StoreError> {
        Rates {
            conn: self.inner.conn.clone(),
        }
        .at(RateItem::of(req), now_us)
        .await
    }

    /// One call per slot, all at once; the answers are put back in the shards' order.
    async fn bloom(
        &self,
        native: bool,
        op: BloomOp,
        shape: &BloomShape,
        shards: &[ShardCall],
    ) -> Result<Vec<ShardReply>, StoreError> {
        let mut by_slot: HashMap<u16, Vec<usize>> = HashMap::new();
        for (i, shard) in shards.iter().enumerate() {
            by_slot.entry(slot_of(&shard.key)).or_default().push(i);
        }
        let calls = by_slot.into_values().map(|indices| async move {
            let group: Vec<ShardCall> = indices.iter().map(|&i| shards[i].clone()).collect();
            let conn = &self.inner.conn;
            let reply = if native {
                bloom_native::run(conn, op, shape, &group).await
            } else {
                bloom::run(conn, op, shape, &group).await
            };
            reply.map(|replies| (indices, replies))
        });
        let mut answers = vec![ShardReply::Missing; shards.len()];
        for result in futures_util::future::join_all(calls).await {
            let (indices, replies) = result.map_err(|e| self.deadline(e))?;
            for (i, reply) in indices.into_iter().zip(replies) {
                answers[i] = reply;
            }
        }
        Ok(answers)
    }

    async fn bloom_module(&self) -> Result<bool, StoreError> {
        bloom_native::available(&self.inner.conn)
            .await
            .map_err(|e| self.deadline(e))
    }

    fn wakeups(&self) -> &Arc<Wakeups> {
        &self.inner.wakeups
    }

    fn op_timeout(&self) -> Duration {
        self.inner.settings.response_timeout
    }

    async fn lock_value(&self, key: &str) -> Result<Option<(String, Duration)>, StoreError> {
        peek::value_and_ttl(&mut self.inner.conn.clone(), key).await
    }

    #[cfg(feature = "test-util")]
    async fn peek_get(&self, key: &str) -> Result<Option<String>, StoreError> {
        peek::get(&mut self.inner.conn.clone(), key).await
    }

    #[cfg(feature = "test-util")]
    async fn peek_pttl(&self, key: &str) -> Result<Option<Duration>, StoreError> {
        peek::pttl(&mut self.inner.conn.clone(), key).await
    }

    #[cfg(feature = "test-util")]
    async fn peek_delete(&self, key: &str) -> Result<bool, StoreError> {
        peek::delete(&mut self.inner.conn.clone(), key).await
    }

    #[cfg(feature = "test-util")]
    async fn peek_keys(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        peek::keys(&mut self.inner.conn.clone(), prefix).await
    }

    #[cfg(feature = "test-util")]
    async fn peek_live_entries(&self, key: &str) -> Result<u64, StoreError> {
        peek::live_entries(&mut self.inner.conn.clone(), key).await
    }
}

/// Why a cluster client refuses replica acknowledgement.
const REPLICAS_UNSUPPORTED: &str = "replica acknowledgement (replicas(n, timeout)) needs a \
    single primary, plain or behind Sentinel; this client is on a Redis Cluster";
