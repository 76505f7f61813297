//! The cluster's pub/sub link for release wake-ups: sharded channels (`SSUBSCRIBE`), which
//! live in the lock's own slot, on a RESP3 cluster connection whose pushes reach the wake-up
//! registry. A sharded subscription covers one slot per command, so the reconciler's channels
//! are sent one slot at a time, all slots at once.
//!
//! redis-rs resubscribes after a reconnect. When a slot moves (resharding, failover), the
//! server drops its sharded subscriptions with an `SUNSUBSCRIBE` push: the registry then
//! wakes the channel's waiters (they may have missed a release) and resubscribes, which the
//! cluster connection routes to the slot's new owner.

use std::collections::HashMap;
use std::sync::Arc;

use redis::cluster_async::ClusterConnection;
use redis::{ProtocolVersion, PushInfo, PushKind, Value};

use super::route_push;
use crate::error::StoreError;
use crate::keys::slot_of;
use crate::store::connect::{RedisSettings, cluster_client};
use crate::store::wakeups::{SubscribeFuture, Subscriber, Wakeups};

pub(crate) struct ShardedLink {
    conn: ClusterConnection,
}

impl ShardedLink {
    pub(crate) async fn connect(
        nodes: &[redis::ConnectionInfo],
        settings: &RedisSettings,
        wakeups: &Arc<Wakeups>,
    ) -> Result<Self, StoreError> {
        let weak = Arc::downgrade(wakeups);
        let on_push = move |push: PushInfo| {
            if let Some(wakeups) = weak.upgrade() {
                if push.kind == PushKind::SUnsubscribe
                    && let Some(Value::BulkString(channel)) = push.data.first()
                {
                    wakeups.dropped(&String::from_utf8_lossy(channel));
                } else {
                    route_push(&wakeups, &push);
                }
            }
            Ok::<(), redis::aio::SendError>(())
        };
        let client = cluster_client(nodes, settings)
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(on_push)
            .build()?;
        let limit = settings.connect_timeout.saturating_mul(2);
        let conn = tokio::time::timeout(limit, client.get_async_connection())
            .await
            .map_err(|_| StoreError::Timeout { after: limit })??;
        Ok(Self { conn })
    }
}

/// `channels` grouped by hash slot.
fn by_slot(channels: Vec<String>) -> Vec<Vec<String>> {
    let mut groups: HashMap<u16, Vec<String>> = HashMap::new();
    for channel in channels {
        groups.entry(slot_of(&channel)).or_default().push(channel);
    }
    groups.into_values().collect()
}

impl Subscriber for ShardedLink {
    fn subscribe(&self, channels: Vec<String>) -> SubscribeFuture<'_> {
        Box::pin(async move {
            let calls = by_slot(channels).into_iter().map(|group| {
                let mut conn = self.conn.clone();
                async move { conn.ssubscribe(group).await }
            });
            for result in futures_util::future::join_all(calls).await {
                result?;
            }
            Ok(())
        })
    }

    fn unsubscribe(&self, channels: Vec<String>) -> SubscribeFuture<'_> {
        Box::pin(async move {
            let calls = by_slot(channels).into_iter().map(|group| {
                let mut conn = self.conn.clone();
                async move { conn.sunsubscribe(group).await }
            });
            for result in futures_util::future::join_all(calls).await {
                result?;
            }
            Ok(())
        })
    }
}
