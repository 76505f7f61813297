//! A quorum's pub/sub link for release wake-ups: one RESP3 pub/sub connection per node (the
//! single primary's link, once per node). A release publishes on every node where its copy of
//! the lock was marked, so a waiter subscribes on every node; it counts as listening once a
//! majority confirmed (the others subscribe when they come back, and a missed message costs
//! at most the waiter's PTTL-bounded sleep anyway).

use std::sync::Arc;

use crate::error::StoreError;
use crate::store::connect::RedisSettings;
use crate::store::pubsub::PubSubLink;
use crate::store::wakeups::{SubscribeFuture, Subscriber, Wakeups};

pub(crate) struct QuorumLink {
    nodes: Vec<PubSubLink>,
    quorum: usize,
}

impl QuorumLink {
    pub(crate) fn new(
        nodes: &[redis::ConnectionInfo],
        settings: &RedisSettings,
        wakeups: &Arc<Wakeups>,
        quorum: usize,
    ) -> Result<Self, StoreError> {
        let nodes = nodes
            .iter()
            .map(|info| PubSubLink::new(info, settings, wakeups))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { nodes, quorum })
    }

    /// Runs `op` on every node's link; `Ok` once a majority succeeded.
    async fn on_majority<'a, F>(&'a self, op: F) -> Result<(), StoreError>
    where
        F: Fn(&'a PubSubLink) -> SubscribeFuture<'a>,
    {
        let results = futures_util::future::join_all(self.nodes.iter().map(op)).await;
        let ok = results.iter().filter(|r| r.is_ok()).count();
        if ok >= self.quorum {
            return Ok(());
        }
        results
            .into_iter()
            .find_map(Result::err)
            .map_or(Ok(()), Err)
    }
}

impl Subscriber for QuorumLink {
    fn subscribe(&self, channels: Vec<String>) -> SubscribeFuture<'_> {
        Box::pin(self.on_majority(move |link| link.subscribe(channels.clone())))
    }

    fn unsubscribe(&self, channels: Vec<String>) -> SubscribeFuture<'_> {
        Box::pin(self.on_majority(move |link| link.unsubscribe(channels.clone())))
    }
}
