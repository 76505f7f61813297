//! Whether the store answers: [`Client::ping`], for readiness probes and dashboards.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use tokio::time::Instant;

use crate::client::Client;
use crate::error::StoreError;
use crate::store::masters;
use crate::store::{PingTarget, StoreKind};

/// What [`Client::ping`] found: each server asked, and whether the client can work.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// The kind of store: [`StoreKind::Redis`] (a primary, plain or behind Sentinel),
    /// `Cluster`, `Quorum` or `Memory`; it compares equal to its name (`health.store == "quorum"`).
    pub store: StoreKind,
    /// Whether the client can work now: the primary answered; every Cluster master answered
    /// (each owns slots no other serves); a majority of a quorum answered; always in memory.
    /// A client that counts on another store is ready when both are.
    pub ready: bool,
    /// Each server asked, in the store's order (a Cluster's masters as the Cluster lists
    /// them; none in memory), then those of the client's
    /// [`counting_on`](crate::ClientBuilder::counting_on) store, if it has one, each named
    /// `counting <node>`.
    pub nodes: Vec<NodeHealth>,
}

/// One server's answer to a ping.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeHealth {
    /// `host:port` (the primary behind Sentinel is `"primary"`: the sentinels say which).
    pub node: String,
    /// The round trip of its `PING`, or why there was none (never a password).
    pub answer: Result<Duration, String>,
    /// Its `maxmemory-policy` (from `INFO memory`, asked after the `PING`), if it answered
    /// it. Any policy but `noeviction` can delete lock keys before their ttl: see
    /// [`Health::evicting`].
    pub eviction_policy: Option<String>,
}

impl NodeHealth {
    /// Whether it answered.
    #[must_use]
    pub fn is_up(&self) -> bool {
        self.answer.is_ok()
    }

    /// A server that did not answer: why.
    fn down(node: String, why: String) -> Self {
        Self {
            node,
            answer: Err(why),
            eviction_policy: None,
        }
    }
}

impl Health {
    /// The servers whose eviction policy can delete keys before their ttl (any
    /// `maxmemory-policy` but `noeviction`), with the policy: a lock key evicted while its
    /// holder works lets a second holder in, with nobody told. Empty when every server said
    /// `noeviction` (or would not say). See
    /// [`ClientBuilder::require_noeviction`](crate::ClientBuilder::require_noeviction).
    #[must_use]
    pub fn evicting(&self) -> Vec<(&str, &str)> {
        self.nodes
            .iter()
            .filter_map(|n| {
                let policy = n.eviction_policy.as_deref()?;
                crate::store::can_evict(policy).then_some((n.node.as_str(), policy))
            })
            .collect()
    }
}

impl Client {
    /// Pings every server the client works with, each bounded by the client's
    /// `response_timeout`, and says whether the client can work now ([`Health::ready`]). It
    /// never fails: a server that does not answer is a [`NodeHealth`] with the reason. For a
    /// readiness probe, `distlock_tower::health` serves it over HTTP. A client built with
    /// [`counting_on`](crate::ClientBuilder::counting_on) pings both of its stores at once.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let client = distlock::Client::in_memory();
    /// let health = client.ping().await;
    /// assert!(health.ready);
    /// # }
    /// ```
    pub async fn ping(&self) -> Health {
        let counting = self.counting();
        if std::ptr::eq(counting, self) {
            return self.ping_store().await;
        }
        let (mut health, other) = tokio::join!(self.ping_store(), counting.ping_store());
        health.ready &= other.ready;
        health
            .nodes
            .extend(other.nodes.into_iter().map(|node| NodeHealth {
                node: format!("counting {}", node.node),
                ..node
            }));
        health
    }

    /// [`ping`](Self::ping) of this client's own store.
    async fn ping_store(&self) -> Health {
        let store = self.store();
        let limit = store.op_timeout();
        let (nodes, ready) = match store.ping_target() {
            PingTarget::Memory => (Vec::new(), true),
            PingTarget::Primary(conn) => {
                let node = ping_one("primary".to_owned(), conn, limit).await;
                let ready = node.is_up();
                (vec![node], ready)
            }
            PingTarget::Quorum(named, majority) => {
                let pings = named
                    .into_iter()
                    .map(|(name, conn)| ping_one(name, conn, limit));
                let nodes = futures_util::future::join_all(pings).await;
                let up = nodes.iter().filter(|n| n.is_up()).count();
                (nodes, up >= majority)
            }
            PingTarget::Cluster(conn) => match masters(conn.clone(), limit).await {
                Ok(masters) => {
                    let pings = masters.into_iter().map(|(host, port)| {
                        let conn = conn.clone();
                        async move {
                            let routing =
                                RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                                    host: host.clone(),
                                    port,
                                });
                            probe(format!("{host}:{port}"), limit, |cmd| {
                                let (mut conn, routing) = (conn.clone(), routing.clone());
                                async move { conn.route_command(cmd, routing).await }
                            })
                            .await
                        }
                    });
                    let nodes = futures_util::future::join_all(pings).await;
                    let ready = !nodes.is_empty() && nodes.iter().all(NodeHealth::is_up);
                    (nodes, ready)
                }
                Err(why) => (
                    vec![NodeHealth::down(
                        "cluster".to_owned(),
                        match why {
                            StoreError::Timeout { .. } => format!("no answer within {limit:?}"),
                            other => other.to_string(),
                        },
                    )],
                    false,
                ),
            },
        };
        Health {
            store: store.kind(),
            ready,
            nodes,
        }
    }
}

async fn ping_one<C: ConnectionLike + Clone + Send>(
    node: String,
    conn: C,
    limit: Duration,
) -> NodeHealth {
    probe(node, limit, |cmd| {
        let mut conn = conn.clone();
        async move { cmd.query_async::<redis::Value>(&mut conn).await }
    })
    .await
}

/// One server's health: the round trip of a `PING` sent by `send`, then, if it answered, its
/// `maxmemory-policy` (`INFO memory`), each within `limit`.
async fn probe<F, Fut>(node: String, limit: Duration, mut send: F) -> NodeHealth
where
    F: FnMut(redis::Cmd) -> Fut,
    Fut: std::future::Future<Output = redis::RedisResult<redis::Value>>,
{
    let started = Instant::now();
    let answer = match tokio::time::timeout(limit, send(redis::cmd("PING"))).await {
        Ok(Ok(_)) => Ok(started.elapsed()),
        Ok(Err(err)) => Err(StoreError::from(err).to_string()),
        Err(_) => Err(format!("no answer within {limit:?}")),
    };
    let eviction_policy = if answer.is_ok() {
        let mut info = redis::cmd("INFO");
        info.arg("memory");
        match tokio::time::timeout(limit, send(info)).await {
            Ok(Ok(reply)) => redis::from_redis_value::<String>(reply)
                .ok()
                .and_then(|text| crate::store::policy_in(&text)),
            _ => None,
        }
    } else {
        None
    };
    NodeHealth {
        node,
        answer,
        eviction_policy,
    }
}
