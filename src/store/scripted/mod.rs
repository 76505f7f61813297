//! The one scripted backend: every store that runs this library's scripts on one keyspace, a
//! single primary (plain or behind Sentinel) and a Redis Cluster, is a [`ScriptedStore`] over
//! a [`Route`]. The operations and their scripts are the same; only the route differs:
//!
//! * [`Single`]: one target. A batch is one script call, whatever its items' slots.
//! * [`BySlot`]: a cluster. A call may touch one slot, so a batch is one call per slot, and
//!   batches form per node: the calls of one node's batch leave in one pipelined write.
//!
//! What is specific to each deployment (how it is reached, how it follows failovers, how its
//! wake-ups travel) is set up by its constructor (`redis/`, `cluster/`) and handed in here.
//!
//! ```text
//! scripted/
//!   mod.rs      ScriptedStore: the operations, over either route
//!   single.rs   one target: batchers on its connection; replica waits on lanes
//!   lanes.rs    spare connections for writes that wait for replicas (WAIT)
//!   by_slot.rs  a cluster: the slot map, a connection and batchers per node, pipelines
//!   shards.rs   a cluster's masters (CLUSTER SHARDS), for what asks each of them in turn
//! ```

mod by_slot;
mod lanes;
mod shards;
mod single;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, RedisFuture, Value};

pub(crate) use self::by_slot::BySlot;
pub(crate) use self::lanes::LANES;
pub(crate) use self::shards::masters;
pub(crate) use self::single::Single;
use super::backend::Backend;
use super::capability::{Capability, StoreKind};
use super::connect::{PrimaryConn, RedisSettings, req_packed_commands};
use super::peek::{self, KeyScan, SetHolder};
use super::ratelimit::script::RateItem;
use super::ratelimit::{RateReply, RateRequest};
use super::requests::{
    Acquire, AcquireAll, BloomCall, EntriesRelease, Handoff, LeaderKeys, LeaderPut, PathAcquire,
    PathRelease, RwAcquire,
};
use super::scripts::acquire::{AcquireItem, AcquireReply};
use super::scripts::acquire_all::{self, AllReply};
use super::scripts::acquire_permits::{self, PermitsItem};
use super::scripts::acquire_rw;
use super::scripts::adaptive::{self, AdaptiveCall};
use super::scripts::bloom::{self, ShardCall, ShardReply};
use super::scripts::bloom_native;
use super::scripts::fair::{self, FairCall, FairReply};
use super::scripts::fenced::{self, FencedCall, FencedReply};
use super::scripts::handoff::{self, HandoffReply};
use super::scripts::idempotency::{self, RecordCall, RecordReply};
use super::scripts::leader::{self, Record};
use super::scripts::mint::{MintItem, MintReply};
use super::scripts::release::ReleaseItem;
use super::scripts::renew::RenewItem;
use super::scripts::{
    Ownership, Publish, acquire_path, release_entries, release_path, release_writer, unmark,
};
use super::wakeups::Wakeups;
use crate::error::StoreError;
use crate::keys::{Fences, LockKeys, RwKeys, slot_of};
use crate::token::Token;

/// How a scripted store reaches its keys.
pub(crate) enum Route {
    /// One primary (boxed: its batchers make it far larger than a cluster's handle).
    Single(Box<Single>),
    /// A Redis Cluster: by hash slot, batched per node.
    BySlot(BySlot),
}

#[derive(Clone)]
pub(crate) struct ScriptedStore {
    inner: Arc<Inner>,
}

struct Inner {
    route: Route,
    settings: RedisSettings,
    wakeups: Arc<Wakeups>,
}

impl ScriptedStore {
    pub(crate) fn new(route: Route, settings: RedisSettings, wakeups: Arc<Wakeups>) -> Self {
        Self {
            inner: Arc::new(Inner {
                route,
                settings,
                wakeups,
            }),
        }
    }

    /// The connection for a script that is not batched: the primary's, or the cluster
    /// connection (which routes a call by its first key).
    fn conn(&self) -> RouteConn {
        match &self.inner.route {
            Route::Single(single) => RouteConn::Primary(single.conn().clone()),
            Route::BySlot(by_slot) => RouteConn::Cluster(by_slot.conn().clone()),
        }
    }

    /// What `Client::ping` asks: the primary, or the cluster connection.
    pub(crate) fn ping_target(&self) -> super::PingTarget {
        match &self.inner.route {
            Route::Single(single) => super::PingTarget::Primary(single.conn().clone()),
            Route::BySlot(by_slot) => super::PingTarget::Cluster(by_slot.conn().clone()),
        }
    }

    /// How releases publish their wake-ups: `SPUBLISH` in the lock's slot on a cluster.
    fn publish(&self) -> Publish {
        match self.inner.route {
            Route::Single(_) => Publish::Plain,
            Route::BySlot(_) => Publish::Sharded,
        }
    }

    fn deadline(&self, err: StoreError) -> StoreError {
        err.with_deadline(self.inner.settings.response_timeout)
    }
}

impl Backend for ScriptedStore {
    fn kind(&self) -> StoreKind {
        match self.inner.route {
            Route::Single(_) => StoreKind::Redis,
            Route::BySlot(_) => StoreKind::Cluster,
        }
    }

    /// Everything, but replica acknowledgement only on a single primary, where a write and
    /// its `WAIT` share a lane; not on a cluster (a lease's keys may move between primaries
    /// with different replicas).
    fn refuses(&self, capability: Capability) -> Option<&'static str> {
        match (capability, &self.inner.route) {
            (Capability::ReplicaAcknowledgement, Route::BySlot(_)) => {
                Some(CLUSTER_REPLICAS_UNSUPPORTED)
            }
            _ => None,
        }
    }

    /// On a cluster, a lock's fence key lives in the lock's own slot.
    fn fences(&self, prefix: &str) -> Fences {
        match self.inner.route {
            Route::Single(_) => Fences::shared(prefix),
            Route::BySlot(_) => Fences::per_slot(prefix),
        }
    }

    /// Every lock in one group on a primary; one group per hash slot, in slot order, on a
    /// cluster (a script may only touch one slot).
    fn lock_groups(&self, keys: &[LockKeys]) -> Vec<Vec<usize>> {
        match self.inner.route {
            Route::Single(_) => vec![(0..keys.len()).collect()],
            Route::BySlot(_) => {
                let mut by_slot: std::collections::BTreeMap<u16, Vec<usize>> =
                    std::collections::BTreeMap::new();
                for (i, k) in keys.iter().enumerate() {
                    by_slot.entry(slot_of(&k.lock)).or_default().push(i);
                }
                by_slot.into_values().collect()
            }
        }
    }

    async fn acquire(&self, req: &Acquire<'_>) -> Result<AcquireReply, StoreError> {
        let item = AcquireItem::of(req);
        let reply = match &self.inner.route {
            Route::Single(single) => single.acquire(item).await,
            Route::BySlot(_) if req.replicas.is_some() => {
                return Err(self.lacks(Capability::ReplicaAcknowledgement));
            }
            Route::BySlot(by_slot) => by_slot.acquire(item).await,
        };
        match reply.map_err(|e| self.deadline(e))? {
            // Granted but not acknowledged: the caller releases it.
            AcquireReply::Unreplicated { acked, wanted } => {
                Err(StoreError::NotReplicated { acked, wanted })
            }
            reply => Ok(reply),
        }
    }

    async fn mint(&self, keys: &LockKeys, token: &Token) -> Result<MintReply, StoreError> {
        let item = MintItem::of(keys, token);
        let minted = match &self.inner.route {
            Route::Single(single) => single.mint(item).await,
            Route::BySlot(by_slot) => by_slot.mint(item).await,
        };
        minted.map_err(|e| self.deadline(e))
    }

    async fn release(&self, keys: &LockKeys, token: &Token) -> Result<Ownership, StoreError> {
        let item = ReleaseItem::of(keys, token);
        let held = match &self.inner.route {
            Route::Single(single) => single.release(item).await,
            Route::BySlot(by_slot) => by_slot.release(item).await,
        };
        held.map_err(|e| self.deadline(e))
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<Ownership>, StoreError> {
        let held = match &self.inner.route {
            Route::Single(single) => single.renew(items).await,
            Route::BySlot(_) if items.iter().any(|item| item.replicas.is_some()) => {
                return Err(self.lacks(Capability::ReplicaAcknowledgement));
            }
            Route::BySlot(by_slot) => by_slot.renew(items).await,
        };
        held.map_err(|e| self.deadline(e))
    }

    async fn unmark(&self, keys: &LockKeys) -> Result<(), StoreError> {
        unmark::run(&self.conn(), keys)
            .await
            .map_err(|e| self.deadline(e))
    }

    /// One call: the resource's keys share its hash tag (one slot on a cluster).
    async fn fenced(&self, call: &FencedCall<'_>) -> Result<FencedReply, StoreError> {
        fenced::run(&self.conn(), call)
            .await
            .map_err(|e| self.deadline(e))
    }

    /// One call on one key.
    async fn adaptive(&self, call: &AdaptiveCall<'_>) -> Result<u32, StoreError> {
        adaptive::run(&self.conn(), call)
            .await
            .map_err(|e| self.deadline(e))
    }

    /// One call: the record and its claim share a hash tag (one slot on a cluster).
    async fn idempotency(&self, call: &RecordCall<'_>) -> Result<RecordReply, StoreError> {
        idempotency::run(&self.conn(), call)
            .await
            .map_err(|e| self.deadline(e))
    }

    fn wakeups(&self) -> &Arc<Wakeups> {
        &self.inner.wakeups
    }

    fn op_timeout(&self) -> Duration {
        self.inner.settings.response_timeout
    }

    async fn handoff(&self, req: &Handoff<'_>) -> Result<HandoffReply, StoreError> {
        handoff::run(&self.conn(), self.publish(), req)
            .await
            .map_err(|e| self.deadline(e))
    }

    /// One group's locks (one slot's, on a cluster).
    async fn acquire_all(&self, req: &AcquireAll<'_>) -> Result<AllReply, StoreError> {
        acquire_all::run(&self.conn(), req)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn acquire_permits(&self, item: &PermitsItem<'_>) -> Result<AcquireReply, StoreError> {
        acquire_permits::run(&self.conn(), item)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn acquire_rw(&self, req: &RwAcquire<'_>) -> Result<AcquireReply, StoreError> {
        acquire_rw::run(&self.conn(), req)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn fair(&self, call: &FairCall<'_>) -> Result<FairReply, StoreError> {
        fair::run(&self.conn(), self.publish(), call)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn release_writer(&self, keys: &RwKeys, token: &Token) -> Result<Ownership, StoreError> {
        release_writer::run(&self.conn(), self.publish(), keys, token)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn release_entries(&self, req: &EntriesRelease<'_>) -> Result<Ownership, StoreError> {
        release_entries::run(&self.conn(), self.publish(), req)
            .await
            .map_err(|e| self.deadline(e))
    }

    /// One script over every key of the path: they share the root's hash tag, so a cluster
    /// connection routes it to the node of that slot.
    async fn acquire_path(&self, req: &PathAcquire<'_>) -> Result<AcquireReply, StoreError> {
        acquire_path::run(&self.conn(), req)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn release_path(&self, req: &PathRelease<'_>) -> Result<Ownership, StoreError> {
        release_path::run(&self.conn(), self.publish(), req)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn rate_limit(&self, req: &RateRequest<'_>) -> Result<RateReply, StoreError> {
        let item = RateItem::of(req);
        let reply = match &self.inner.route {
            Route::Single(single) => single.rate_limit(item).await,
            Route::BySlot(by_slot) => by_slot.rate_limit(item).await,
        };
        reply.map_err(|e| self.deadline(e))
    }

    #[cfg(feature = "test-util")]
    async fn rate_limit_at(
        &self,
        at: &super::ratelimit::RateAt<'_>,
    ) -> Result<RateReply, StoreError> {
        super::ratelimit::script::check_at(&self.conn(), RateItem::of(at.req), at.now_us).await
    }

    /// One call per slot (a cluster's shards live in several), all at once; the answers are
    /// put back in the shards' order.
    async fn bloom(&self, call: &BloomCall<'_>) -> Result<Vec<ShardReply>, StoreError> {
        let (conn, shards) = (self.conn(), call.shards);
        let groups: Vec<Vec<usize>> = match self.inner.route {
            Route::Single(_) => vec![(0..shards.len()).collect()],
            Route::BySlot(_) => {
                let mut by_slot: std::collections::HashMap<u16, Vec<usize>> =
                    std::collections::HashMap::new();
                for (i, shard) in shards.iter().enumerate() {
                    by_slot.entry(slot_of(&shard.key)).or_default().push(i);
                }
                by_slot.into_values().collect()
            }
        };
        let calls = groups.into_iter().map(|indices| {
            let conn = &conn;
            async move {
                let group: Vec<ShardCall> = indices.iter().map(|&i| shards[i].clone()).collect();
                bloom::run(
                    conn,
                    &BloomCall {
                        shards: &group,
                        ..*call
                    },
                )
                .await
                .map(|replies| (indices, replies))
            }
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
        bloom_native::available(&self.conn())
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn lock_value(&self, key: &str) -> Result<Option<(String, Duration)>, StoreError> {
        peek::value_and_ttl(&mut self.conn(), key).await
    }

    async fn scan_keys(&self, walk: &peek::KeyWalk<'_>) -> Result<KeyScan, StoreError> {
        let mut found = std::collections::BTreeSet::new();
        let complete = match &self.inner.route {
            Route::Single(single) => {
                let conn = single.conn().clone();
                let call = |cmd: Cmd| {
                    let mut conn = conn.clone();
                    async move { cmd.query_async::<Value>(&mut conn).await }
                };
                peek::scan(call, walk, &mut found).await?
            }
            Route::BySlot(by_slot) => {
                let conn = by_slot.conn().clone();
                let mut complete = true;
                // Each master scans its own keys: a cursor means nothing on another node.
                for (host, port) in masters(conn.clone(), self.op_timeout()).await? {
                    let call = |cmd: Cmd| {
                        let mut conn = conn.clone();
                        let routing = redis::cluster_routing::RoutingInfo::SingleNode(
                            redis::cluster_routing::SingleNodeRoutingInfo::ByAddress {
                                host: host.clone(),
                                port,
                            },
                        );
                        async move { conn.route_command(cmd, routing).await }
                    };
                    complete &= peek::scan(call, walk, &mut found).await?;
                }
                complete
            }
        };
        Ok(KeyScan {
            keys: found.into_iter().collect(),
            complete,
        })
    }

    async fn announce_revoked(&self, channel: &str, key: &str) -> Result<(), StoreError> {
        let command = match self.publish() {
            Publish::Plain => "PUBLISH",
            Publish::Sharded => "SPUBLISH",
        };
        let mut cmd = redis::cmd(command);
        cmd.arg(channel).arg(key);
        let _receivers: i64 = cmd.query_async(&mut self.conn()).await?;
        Ok(())
    }

    async fn set_holders(&self, key: &str) -> Result<Vec<SetHolder>, StoreError> {
        peek::set_holders(&mut self.conn(), key).await
    }

    async fn leader_put(&self, req: &LeaderPut<'_>) -> Result<bool, StoreError> {
        leader::put(&self.conn(), self.publish(), req)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn leader_read(&self, keys: &LeaderKeys<'_>) -> Result<Option<Record>, StoreError> {
        leader::read(&self.conn(), self.publish(), keys)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn leader_drop(&self, keys: &LeaderKeys<'_>, token: &Token) -> Result<bool, StoreError> {
        leader::drop(&self.conn(), self.publish(), keys, token)
            .await
            .map_err(|e| self.deadline(e))
    }

    #[cfg(feature = "test-util")]
    async fn peek_get(&self, key: &str) -> Result<Option<String>, StoreError> {
        peek::get(&mut self.conn(), key).await
    }

    #[cfg(feature = "test-util")]
    async fn peek_pttl(&self, key: &str) -> Result<Option<Duration>, StoreError> {
        peek::pttl(&mut self.conn(), key).await
    }

    #[cfg(feature = "test-util")]
    async fn peek_delete(&self, key: &str) -> Result<bool, StoreError> {
        peek::delete(&mut self.conn(), key).await
    }

    #[cfg(feature = "test-util")]
    async fn peek_keys(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        peek::keys(&mut self.conn(), prefix).await
    }

    #[cfg(feature = "test-util")]
    async fn peek_live_entries(&self, key: &str) -> Result<u64, StoreError> {
        peek::live_entries(&mut self.conn(), key).await
    }
}

/// Why a cluster client refuses replica acknowledgement.
const CLUSTER_REPLICAS_UNSUPPORTED: &str = "replica acknowledgement (replicas(n, timeout)) \
    needs a single primary, plain or behind Sentinel; this client is on a Redis Cluster";

/// The connection a route's unbatched scripts go on.
#[derive(Clone)]
enum RouteConn {
    Primary(PrimaryConn),
    Cluster(ClusterConnection),
}

impl ConnectionLike for RouteConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Primary(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    req_packed_commands!(self, pipeline, offset, count => {
        match self {
            Self::Primary(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    });

    fn get_db(&self) -> i64 {
        match self {
            Self::Primary(conn) => conn.get_db(),
            Self::Cluster(conn) => conn.get_db(),
        }
    }
}
