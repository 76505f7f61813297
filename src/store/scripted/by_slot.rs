//! The by-slot route: a Redis Cluster. A script call may touch one hash slot only, so a batch
//! becomes one call per slot; but batches form **per node**: the concurrent items of every
//! slot a node owns queue together, and leave in one pipelined write to that node (one call
//! per slot group, one round trip, one read and one write for the node's event loop). An
//! uncontended acquire is not a script at all but a plain `SET NX PX`, one per item, in the
//! same write (see `AcquireRounds`).
//!
//! The route keeps its own map of which node owns which slot (`CLUSTER SLOTS`) and its own
//! connection to each primary, so that a node's pipeline never mixes with anything else. Each
//! call in a pipeline is answered on its own: one that the node redirects (`MOVED`, `ASK`,
//! `TRYAGAIN`, `CLUSTERDOWN`: the node ran nothing of it) goes again, alone, through
//! redis-rs's cluster connection, which follows redirects and retries within the response
//! timeout, while the other calls of the pipeline keep the answers they got. A `MOVED` also
//! corrects the map at once, and a fuller refresh follows in the background. A node that
//! cannot be reached (its connection refused: nothing was sent) has its calls sent through
//! the cluster connection too. A pipeline that was sent but not answered (a timeout, a
//! connection lost on the way) is not sent again: its calls may have run, and a rate-limit
//! check must not count twice; their callers learn that the outcome is unknown.
//!
//! (redis-rs's `route_pipeline` sends a pipeline to one node, but answers a redirect of any
//! of its commands by sending the *whole* pipeline again to the redirect's target: the calls
//! that had already run would run twice. Hence connections of our own.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ServerErrorKind, Value};
use tokio::time::Instant;

use crate::error::StoreError;
use crate::keys::slot_of;
use crate::store::batch::{Batch, Batcher, batcher};
use crate::store::connect::{RedisSettings, node_info};
use crate::store::ratelimit::RateReply;
use crate::store::ratelimit::script::{RateItem, Rates};
use crate::store::scripts::acquire::{AcquireItem, AcquireReply, AcquireRounds, Acquires};
use crate::store::scripts::mint::{MintItem, MintReply, Mints};
use crate::store::scripts::release::{self, ReleaseItem, Releases};
use crate::store::scripts::renew::{self, RenewItem};
use crate::store::scripts::{Calls, Lua, Ownership, Pipe, Publish};

/// Hash slots in a cluster.
const SLOTS: usize = 16_384;
/// The least time between two full refreshes of the slot map.
const REFRESH_EVERY: Duration = Duration::from_secs(1);

pub(crate) struct BySlot {
    topology: Arc<Topology>,
}

/// Which node owns which slot, and the nodes.
struct Topology {
    /// redis-rs's cluster connection: discovery, redirected calls, and whatever is not batched.
    cluster: ClusterConnection,
    /// A node's address settings are the seed's (credentials, TLS) with its host and port.
    seed: redis::ConnectionInfo,
    settings: RedisSettings,
    /// By slot; `None` where the owner is unknown (its calls go through `cluster`).
    slots: RwLock<Vec<Option<Arc<Node>>>>,
    /// By `host:port`, so that a refresh keeps each node's connection and batchers.
    nodes: Mutex<HashMap<String, Arc<Node>>>,
    /// When the last full refresh started (`None`: never).
    refreshed: Mutex<Option<Instant>>,
}

/// One primary: its own connection, and a batcher per kind over it.
struct Node {
    conn: ConnectionManager,
    acquires: Batcher<AcquiresOnNode>,
    releases: Batcher<OnNode<Releases>>,
    mints: Batcher<OnNode<Mints>>,
    rates: Batcher<OnNode<Rates>>,
}

/// The calls that go to one node (`None`: the slot's owner is not known): their places in
/// the caller's list, and the calls.
type NodeCalls = (Option<Arc<Node>>, Vec<usize>, Pipe);

impl BySlot {
    /// Over `cluster` (seeded by `seed`): reads the slot map now, tolerating a failure (calls
    /// then go through the cluster connection until a refresh succeeds).
    pub(crate) async fn new(
        cluster: ClusterConnection,
        seed: redis::ConnectionInfo,
        settings: RedisSettings,
    ) -> Self {
        let topology = Arc::new(Topology {
            cluster,
            seed,
            settings,
            slots: RwLock::new(vec![None; SLOTS]),
            nodes: Mutex::new(HashMap::new()),
            refreshed: Mutex::new(None),
        });
        if let Err(err) = topology.refresh().await {
            tracing::debug!(error = %err, "cannot read the cluster's slot map yet; calls go through the cluster connection");
        }
        Self { topology }
    }

    pub(crate) fn conn(&self) -> &ClusterConnection {
        &self.topology.cluster
    }

    pub(crate) async fn acquire(&self, item: AcquireItem) -> Result<AcquireReply, StoreError> {
        match self.topology.node(slot_of(&item.keys.lock)) {
            Some(node) => node.acquires.run(item).await?,
            // The slot's owner is not known: the script through the cluster connection (it
            // decides a busy answer too, so this one call is the whole acquire).
            None => one(&Acquires, &self.topology.cluster, item).await,
        }
    }

    pub(crate) async fn mint(&self, item: MintItem) -> Result<MintReply, StoreError> {
        match self.topology.node(slot_of(&item.keys.lock)) {
            Some(node) => node.mints.run(item).await?,
            None => one(&Mints, &self.topology.cluster, item).await,
        }
    }

    pub(crate) async fn release(&self, item: ReleaseItem) -> Result<Ownership, StoreError> {
        match self.topology.node(slot_of(&item.keys.lock)) {
            Some(node) => node.releases.run(item).await?,
            None => one(&releases(), &self.topology.cluster, item).await,
        }
    }

    pub(crate) async fn rate_limit(&self, item: RateItem) -> Result<RateReply, StoreError> {
        match self.topology.node(slot_of(Rates::slot_key(&item))) {
            Some(node) => node.rates.run(item).await?,
            None => one(&Rates, &self.topology.cluster, item).await,
        }
    }

    /// One call per slot, in one pipelined write per node, every node at once; the answers
    /// are put back in the items' order.
    pub(crate) async fn renew(
        &self,
        items: &[RenewItem<'_>],
    ) -> Result<Vec<Ownership>, StoreError> {
        let mut by_slot: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let slot = slot_of(item.key);
            match by_slot.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, indices)) => indices.push(i),
                None => by_slot.push((slot, vec![i])),
            }
        }
        let calls = by_slot
            .iter()
            .map(|(slot, indices)| {
                let group: Vec<&RenewItem<'_>> = indices.iter().map(|&i| &items[i]).collect();
                let (script, cmd) = renew::encode(&group);
                (*slot, script, cmd)
            })
            .collect();
        let replies = self.topology.send(calls).await;
        let mut answers = vec![Ownership::Expired; items.len()];
        for ((_, indices), reply) in by_slot.into_iter().zip(replies) {
            let held = renew::decode(reply?, indices.len())?;
            for (i, h) in indices.into_iter().zip(held) {
                answers[i] = h;
            }
        }
        Ok(answers)
    }
}

fn releases() -> Releases {
    Releases {
        publish: Publish::Sharded,
    }
}

/// One item alone through the cluster connection (its slot's owner is not known yet).
async fn one<K: Calls>(
    calls: &K,
    cluster: &ClusterConnection,
    item: K::Item,
) -> Result<K::Reply, StoreError> {
    crate::store::scripts::call(calls, cluster, std::slice::from_ref(&item))
        .await?
        .pop()
        .ok_or_else(|| StoreError::Protocol {
            message: "a call of one answered nothing".to_owned(),
        })
}

impl Topology {
    /// The node that owns `slot`, as far as the map knows.
    fn node(&self, slot: u16) -> Option<Arc<Node>> {
        self.slots
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(usize::from(slot))
            .cloned()
            .flatten()
    }

    /// The node at `host:port`, made (with its connection and batchers) when first named.
    fn node_at(self: &Arc<Self>, host: &str, port: u16) -> Option<Arc<Node>> {
        let addr = format!("{host}:{port}");
        let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(node) = nodes.get(&addr) {
            return Some(node.clone());
        }
        let info = node_info(&self.seed, host, port);
        let client = self.settings.client(info).ok()?;
        // A node that is down fails its calls at once (they go through the cluster
        // connection, which finds the slot's new owner) instead of retrying reconnects.
        let config = self.settings.manager_config().set_number_of_retries(0);
        let conn = ConnectionManager::new_lazy_with_config(client, config).ok()?;
        let timeout = self.settings.response_timeout;
        let node = Arc::new(Node {
            acquires: batcher(
                AcquiresOnNode {
                    conn: conn.clone(),
                    topology: Arc::downgrade(self),
                },
                timeout,
            ),
            mints: batcher(
                OnNode {
                    calls: Mints,
                    conn: conn.clone(),
                    topology: Arc::downgrade(self),
                },
                timeout,
            ),
            releases: batcher(
                OnNode {
                    calls: releases(),
                    conn: conn.clone(),
                    topology: Arc::downgrade(self),
                },
                timeout,
            ),
            rates: batcher(
                OnNode {
                    calls: Rates,
                    conn: conn.clone(),
                    topology: Arc::downgrade(self),
                },
                timeout,
            ),
            conn,
        });
        nodes.insert(addr, node.clone());
        Some(node)
    }

    /// Reads the slot map (`CLUSTER SLOTS`, through the cluster connection) and adopts it.
    async fn refresh(self: &Arc<Self>) -> Result<(), StoreError> {
        *self
            .refreshed
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        let mut cluster = self.cluster.clone();
        let reply: Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut cluster)
            .await?;
        let ranges = slot_ranges(reply).ok_or_else(|| StoreError::Protocol {
            message: "CLUSTER SLOTS answered something unexpected".to_owned(),
        })?;
        let mut slots = vec![None; SLOTS];
        for (first, last, host, port) in ranges {
            let node = self.node_at(&host, port);
            for owner in slots.iter_mut().take(last.saturating_add(1)).skip(first) {
                owner.clone_from(&node);
            }
        }
        *self.slots.write().unwrap_or_else(PoisonError::into_inner) = slots;
        Ok(())
    }

    /// Refreshes the slot map in the background, unless one was started less than
    /// [`REFRESH_EVERY`] ago.
    fn refresh_soon(self: &Arc<Self>) {
        {
            let refreshed = self
                .refreshed
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if refreshed.is_some_and(|at| at.elapsed() < REFRESH_EVERY) {
                return;
            }
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = Arc::downgrade(self);
        runtime.spawn(async move {
            if let Some(this) = this.upgrade()
                && let Err(err) = this.refresh().await
            {
                tracing::debug!(error = %err, "cannot refresh the cluster's slot map");
            }
        });
    }

    /// A `MOVED` named the slot's new owner: adopt it for that slot now.
    fn moved(self: &Arc<Self>, details: Option<&str>) {
        let mut parts = details.unwrap_or_default().split_ascii_whitespace();
        let (Some(slot), Some(addr)) = (parts.next(), parts.next()) else {
            return;
        };
        let (Ok(slot), Some((host, port))) = (slot.parse::<usize>(), addr.rsplit_once(':')) else {
            return;
        };
        let Ok(port) = port.parse::<u16>() else {
            return;
        };
        if slot < SLOTS
            && let Some(node) =
                self.node_at(host.trim_start_matches('[').trim_end_matches(']'), port)
        {
            self.slots.write().unwrap_or_else(PoisonError::into_inner)[slot] = Some(node);
        }
    }

    /// Sends each script call to its slot's node: one pipelined write per node, every node at
    /// once (calls of unknown slots through the cluster connection). One answer per call, in
    /// order.
    async fn send(
        self: &Arc<Self>,
        calls: Vec<(u16, &'static Lua, Cmd)>,
    ) -> Vec<Result<Value, StoreError>> {
        // Per node (or unknown): the calls' places in `calls`, and the calls.
        let mut by_node: Vec<NodeCalls> = Vec::new();
        for (i, (slot, script, cmd)) in calls.into_iter().enumerate() {
            let node = self.node(slot);
            let at = by_node.iter().position(|(n, _, _)| match (n, &node) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            });
            let at = at.unwrap_or_else(|| {
                by_node.push((node, Vec::new(), Pipe::default()));
                by_node.len() - 1
            });
            by_node[at].1.push(i);
            by_node[at].2.script(script, cmd);
        }
        let total = by_node.iter().map(|(_, indices, _)| indices.len()).sum();
        let sends = by_node.into_iter().map(|(node, indices, pipe)| async move {
            let replies = match node {
                Some(node) => pipelined(&node.conn, Some(self), &self.cluster, pipe).await,
                None => through_cluster(&self.cluster, &pipe).await,
            };
            (indices, replies)
        });
        let mut answers: Vec<Result<Value, StoreError>> = (0..total)
            .map(|_| {
                Err(StoreError::Protocol {
                    message: "a call was not answered".to_owned(),
                })
            })
            .collect();
        for (indices, replies) in futures_util::future::join_all(sends).await {
            for (i, reply) in indices.into_iter().zip(replies) {
                answers[i] = reply;
            }
        }
        answers
    }
}

/// `(first slot, last slot, host, port)` of each range of a `CLUSTER SLOTS` reply (its
/// primary's address); `None` if the reply is not shaped like one. A range whose primary has
/// no address it can be reached at (an empty host) is left out.
fn slot_ranges(reply: Value) -> Option<Vec<(usize, usize, String, u16)>> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    let mut out = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(fields) = range else {
            return None;
        };
        let mut fields = fields.into_iter();
        let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(primary))) =
            (fields.next(), fields.next(), fields.next())
        else {
            return None;
        };
        let mut primary = primary.into_iter();
        let host = match primary.next() {
            Some(Value::BulkString(host)) => String::from_utf8(host).ok()?,
            Some(Value::SimpleString(host)) => host,
            _ => return None,
        };
        let Some(Value::Int(port)) = primary.next() else {
            return None;
        };
        let (Ok(first), Ok(last), Ok(port)) = (
            usize::try_from(first),
            usize::try_from(last),
            u16::try_from(port),
        ) else {
            return None;
        };
        if !host.is_empty() && host != "?" {
            out.push((first, last, host, port));
        }
    }
    Some(out)
}

/// `pipe` in one write on a node's own connection. Each command is answered on its own: one
/// the node did not run because the slot is elsewhere (or moving) goes again through the
/// cluster connection; `NOSCRIPT` loads the script on the node and sends the call once more;
/// a failure of the whole write sends every command through the cluster connection.
async fn pipelined(
    conn: &ConnectionManager,
    topology: Option<&Arc<Topology>>,
    cluster: &ClusterConnection,
    pipe: Pipe,
) -> Vec<Result<Value, StoreError>> {
    let count = pipe.len();
    let values = match pipe.send(conn).await {
        Ok(values) => values,
        // The node could not be reached at all: nothing was sent, so every call goes through
        // the cluster connection (which finds the slot's owner, after a failover too).
        Err(err) if err.is_connection_refusal() => {
            tracing::debug!(error = %err, "a cluster node cannot be reached; its calls go through the cluster connection");
            if let Some(topology) = topology {
                topology.refresh_soon();
            }
            return through_cluster(cluster, &pipe).await;
        }
        // Sent, but unanswered (a timeout, a connection lost on the way): each call may or may
        // not have run, and running it again could apply it twice (a rate-limit check). The
        // callers learn the outcome is unknown, as for any call.
        Err(err) => {
            if let Some(topology) = topology {
                topology.refresh_soon();
            }
            let err = StoreError::from(err);
            return (0..count).map(|_| Err(err.clone())).collect();
        }
    };
    let mut answers: Vec<Option<Result<Value, StoreError>>> = Vec::with_capacity(count);
    let mut again = Vec::new();
    let mut reload = Vec::new();
    for (i, value) in values.into_iter().enumerate() {
        match value {
            Value::ServerError(err) => match err.kind() {
                Some(ServerErrorKind::NoScript) if pipe.script_of(i).is_some() => {
                    reload.push(i);
                    answers.push(None);
                }
                Some(ServerErrorKind::Moved) => {
                    if let Some(topology) = topology {
                        topology.moved(err.details());
                        topology.refresh_soon();
                    }
                    again.push(i);
                    answers.push(None);
                }
                Some(
                    ServerErrorKind::Ask | ServerErrorKind::TryAgain | ServerErrorKind::ClusterDown,
                ) => {
                    again.push(i);
                    answers.push(None);
                }
                _ => answers.push(Some(Err(redis::RedisError::from(err).into()))),
            },
            value => answers.push(Some(Ok(value))),
        }
    }
    if !reload.is_empty() {
        // Each script once, then those calls again, in one more write (no second reload: a
        // call that still finds no script goes through the cluster connection).
        if let Err(err) = pipe.load(conn, &reload).await {
            tracing::debug!(error = %err, "cannot load a script on a cluster node");
        }
        match pipe.only(&reload).send(conn).await {
            Ok(values) => {
                for (&i, value) in reload.iter().zip(values) {
                    match value {
                        Value::ServerError(_) => again.push(i),
                        value => answers[i] = Some(Ok(value)),
                    }
                }
            }
            Err(_) => again.extend(reload.iter().copied()),
        }
    }
    if !again.is_empty() {
        let replies = through_cluster(cluster, &pipe.only(&again)).await;
        for (&i, answer) in again.iter().zip(replies) {
            answers[i] = Some(answer);
        }
    }
    answers
        .into_iter()
        .map(|answer| {
            answer.unwrap_or_else(|| {
                Err(StoreError::Protocol {
                    message: "a pipelined call was not answered".to_owned(),
                })
            })
        })
        .collect()
}

/// Each command of `pipe` alone through the cluster connection (which routes it by its first
/// key, follows redirects and retries within the response timeout), all at once.
async fn through_cluster(
    cluster: &ClusterConnection,
    pipe: &Pipe,
) -> Vec<Result<Value, StoreError>> {
    let sends = pipe.commands().enumerate().map(|(i, cmd)| async move {
        let reply = match pipe.script_of(i) {
            Some(script) => script.invoke::<Value, _>(cmd, cluster).await,
            None => cmd.query_async::<Value>(&mut cluster.clone()).await,
        };
        reply.map_err(StoreError::from)
    });
    futures_util::future::join_all(sends).await
}

/// A [`Calls`] script batched per node: a batch holds the concurrent items of every slot the
/// node owns, and goes as one call per slot, pipelined. Each item gets its own answer (a call
/// can fail while the others of its pipeline succeed).
#[derive(Clone)]
struct OnNode<K> {
    calls: K,
    conn: ConnectionManager,
    topology: Weak<Topology>,
}

impl<K: Calls> Batch for OnNode<K> {
    type Item = K::Item;
    type Reply = Result<K::Reply, StoreError>;
    const FLUSH_AT: usize = K::FLUSH_AT;

    async fn run(&self, items: &[K::Item]) -> Result<Vec<Self::Reply>, StoreError> {
        let topology = self
            .topology
            .upgrade()
            .ok_or_else(|| StoreError::unreachable("the cluster store was dropped"))?;
        let mut by_slot: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let slot = slot_of(K::slot_key(item));
            match by_slot.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, indices)) => indices.push(i),
                None => by_slot.push((slot, vec![i])),
            }
        }
        let mut calls = Pipe::with_capacity(by_slot.len());
        for (_, indices) in &by_slot {
            let group: Vec<&K::Item> = indices.iter().map(|&i| &items[i]).collect();
            let (script, cmd) = self.calls.encode(&group);
            calls.script(script, cmd);
        }
        let replies = pipelined(&self.conn, Some(&topology), &topology.cluster, calls).await;
        let mut answers: Vec<Option<Self::Reply>> = (0..items.len()).map(|_| None).collect();
        for ((_, indices), reply) in by_slot.into_iter().zip(replies) {
            let group: Vec<&K::Item> = indices.iter().map(|&i| &items[i]).collect();
            match reply.and_then(|value| self.calls.decode(value, &group)) {
                Ok(decoded) if decoded.len() == indices.len() => {
                    for (i, reply) in indices.into_iter().zip(decoded) {
                        answers[i] = Some(Ok(reply));
                    }
                }
                Ok(_) => {
                    for i in indices {
                        answers[i] = Some(Err(StoreError::Protocol {
                            message: "a call answered another number of items".to_owned(),
                        }));
                    }
                }
                Err(err) => {
                    for i in indices {
                        answers[i] = Some(Err(err.clone()));
                    }
                }
            }
        }
        Ok(answers
            .into_iter()
            .map(|answer| {
                answer.unwrap_or_else(|| {
                    Err(StoreError::Protocol {
                        message: "an item was not answered".to_owned(),
                    })
                })
            })
            .collect())
    }

    fn abandoned(&self, item: K::Item, reply: Self::Reply) {
        if let Ok(reply) = reply
            && let Some(undo) = self.calls.undo(item, &reply)
            && let Some(topology) = self.topology.upgrade()
        {
            release::in_background(topology.cluster.clone(), Publish::Sharded, undo);
        }
    }
}

/// Acquires batched per node: each batch in [`AcquireRounds`] (an uncontended item is a plain
/// `SET NX PX`, the others one script call per slot), each round one pipelined write to the
/// node. Each item gets its own answer.
#[derive(Clone)]
struct AcquiresOnNode {
    conn: ConnectionManager,
    topology: Weak<Topology>,
}

impl Batch for AcquiresOnNode {
    type Item = AcquireItem;
    type Reply = Result<AcquireReply, StoreError>;
    const FLUSH_AT: usize = <Acquires as Calls>::FLUSH_AT;

    async fn run(&self, items: &[AcquireItem]) -> Result<Vec<Self::Reply>, StoreError> {
        let topology = self
            .topology
            .upgrade()
            .ok_or_else(|| StoreError::unreachable("the cluster store was dropped"))?;
        let mut rounds = AcquireRounds::new(items, true);
        while let Some(pipe) = rounds.next_round() {
            rounds.answer(pipelined(&self.conn, Some(&topology), &topology.cluster, pipe).await);
        }
        Ok(rounds.replies())
    }

    fn abandoned(&self, item: AcquireItem, reply: Self::Reply) {
        if let Ok(reply) = reply
            && let Some(undo) = Acquires.undo(item, &reply)
            && let Some(topology) = self.topology.upgrade()
        {
            release::in_background(topology.cluster.clone(), Publish::Sharded, undo);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn slot_ranges_are_read_from_cluster_slots() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(30001), bulk("id1")]),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(30004), bulk("id4")]),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(10922),
                Value::Array(vec![bulk(""), Value::Int(30002), bulk("id2")]),
            ]),
            Value::Array(vec![
                Value::Int(10923),
                Value::Int(16383),
                Value::Array(vec![bulk("::1"), Value::Int(30003)]),
            ]),
        ]);
        assert_eq!(
            slot_ranges(reply),
            Some(vec![
                (0, 5460, "127.0.0.1".to_owned(), 30001),
                (10923, 16383, "::1".to_owned(), 30003),
            ]),
            "the primary of each range; one without an address left out"
        );
        assert_eq!(slot_ranges(Value::Int(1)), None);
        assert_eq!(
            slot_ranges(Value::Array(vec![Value::Array(vec![Value::Int(0)])])),
            None
        );
    }
}
