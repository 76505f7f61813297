//! A Redis Cluster: the scripted backend over the by-slot route, on redis-rs's cluster-async
//! connection (which follows `MOVED` and `ASK`, retries `TRYAGAIN` and refreshes its slot map,
//! within the operation's deadline) and a connection of the route's own to each primary.
//!
//! Every script call is single-slot: a lock's keys, its channel and (unlike on a single
//! primary) its fence key share the lock's slot, and every key of one rate-limit check shares
//! the subject's. Concurrent calls are batched per node (`scripted/by_slot.rs`): one call per
//! slot, the calls of one node in one pipelined write. Wake-ups travel on sharded pub/sub
//! (`SSUBSCRIBE`/`SPUBLISH`, Redis 7) in the lock's slot.

use super::connect::{RedisSettings, check_cluster_mode, cluster_client, probe};
use super::pubsub::ShardedLink;
use super::scripted::{BySlot, Route, ScriptedStore};
use super::wakeups::Wakeups;
use crate::error::StoreError;

/// Connects to the cluster that `nodes` belong to: one plain attempt to the first node (wrong
/// credentials fail once, clearly; the node must run in cluster mode and be Redis 7.0 or
/// newer, for sharded pub/sub), then the cluster connection and the slot map, then the lazily
/// used pub/sub link.
pub(crate) async fn connect(
    nodes: Vec<redis::ConnectionInfo>,
    settings: RedisSettings,
) -> Result<ScriptedStore, StoreError> {
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
    let link = ShardedLink::connect(&nodes, &settings, &wakeups).await;
    if let Some(err) = wakeups.link_or_deaf(link) {
        tracing::warn!(error = %err, "no pub/sub connection for release wake-ups; waiters will poll");
    }
    let route = tokio::time::timeout(limit, BySlot::new(conn, first.clone(), settings.clone()))
        .await
        .map_err(|_| StoreError::Timeout { after: limit })?;
    Ok(ScriptedStore::new(Route::BySlot(route), settings, wakeups))
}
