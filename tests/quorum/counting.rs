//! One client whose locks go to a Redlock quorum and whose counting primitives (rate limits,
//! Bloom filters, semaphores, read-write locks, the concurrency layer) go to a single primary
//! (`ClientBuilder::counting_on`), on real servers: each lands on the store it belongs to.

use std::time::Duration;

use distlock::ratelimit::{Policy, Rate};
use distlock::{Capability, Client, StoreError};
use distlock_tower::concurrency::ConcurrencyLimitLayer;
use distlock_tower::extract::Constant;
use redis::AsyncCommands as _;

use super::support::RedisServer;
use super::{copies, start_nodes, urls};

/// Keys under `prefix` on `server`.
async fn keys_on(server: &RedisServer, prefix: &str) -> Vec<String> {
    let mut conn = server.conn().await;
    let mut keys: Vec<String> = conn.keys(format!("{prefix}:*")).await.expect("KEYS");
    keys.sort();
    keys
}

async fn counting_client(nodes: &[RedisServer], primary: &RedisServer, prefix: &str) -> Client {
    let limits = Client::builder()
        .prefix(prefix)
        .connect(&primary.url())
        .await
        .expect("connect the primary");
    Client::builder()
        .prefix(prefix)
        .response_timeout(Duration::from_secs(1))
        .counting_on(limits)
        .connect_quorum(urls(nodes))
        .await
        .expect("connect the quorum, counting on the primary")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_the_quorum_counting_on_the_primary() {
    let nodes = start_nodes();
    let primary = RedisServer::start();
    let client = counting_client(&nodes, &primary, "split").await;
    assert_eq!(client.store_kind(), "quorum");
    for capability in [
        Capability::HolderSets,
        Capability::RateLimits,
        Capability::BloomFilters,
    ] {
        client
            .supports(capability)
            .unwrap_or_else(|refused| panic!("{capability}: {refused}"));
    }
    // Locks stay Redlock's: no replica acknowledgement, no hand-off.
    assert!(client.supports(Capability::ReplicaAcknowledgement).is_err());
    assert_eq!(
        client
            .supports(Capability::HandOff)
            .expect_err("a quorum hands nothing off")
            .store,
        "quorum"
    );

    // A lock: on every node of the quorum, never on the primary.
    let lease = client.lock("order:42").acquire().await.expect("lock");
    assert_eq!(copies(&nodes, &client, "order:42").await, nodes.len());
    let lock_key = client.__inspect().lock_key("order:42").expect("name");
    assert!(!keys_on(&primary, "split").await.contains(&lock_key));

    // Counting primitives: on the primary, never on a quorum node.
    let limiter = client
        .rate_limiter(Policy::gcra("api", Rate::per_minute(2).expect("rate")).expect("policy"))
        .deny_cache(0)
        .build()
        .expect("a rate limiter on a quorum client that counts on a primary");
    assert!(limiter.check("user:7").await.expect("check").allowed);
    assert!(limiter.check("user:7").await.expect("check").allowed);
    assert!(!limiter.check("user:7").await.expect("check").allowed);
    let permit = client
        .semaphore("exports", 1)
        .acquire()
        .await
        .expect("semaphore");
    assert!(
        matches!(
            client.semaphore("exports", 1).acquire().await,
            Err(distlock::LockError::Busy { .. })
        ),
        "the one permit is held"
    );
    let read = client.rw_lock("doc").read().await.expect("read");
    let row = client
        .hierarchy_lock("db/orders/1")
        .exclusive()
        .await
        .expect("a hierarchical lock on a quorum client that counts on a primary");
    row.extend(std::time::Duration::from_secs(20))
        .await
        .expect("renewed where it was taken");
    let filter = client
        .bloom_filter("seen")
        .expected_items(100)
        .open()
        .await
        .expect("bloom filter");
    filter.add("a").await.expect("add");
    assert!(filter.contains("a").await.expect("contains"));

    let on_primary = keys_on(&primary, "split").await;
    for kind in [":rl:", ":sem:", ":rw", ":bloom", ":hier-"] {
        assert!(
            on_primary.iter().any(|k| k.contains(kind)),
            "no {kind} key on the primary: {on_primary:?}"
        );
    }
    for node in &nodes {
        let on_node = keys_on(node, "split").await;
        assert!(
            on_node.iter().all(|k| !(k.contains(":rl:")
                || k.contains(":sem:")
                || k.contains(":bloom")
                || k.contains(":hier-"))),
            "a counting key on a quorum node: {on_node:?}"
        );
    }

    // The concurrency layer is built on it too.
    let _layer = ConcurrencyLimitLayer::new(client.clone(), Constant::from_static("work"), 2)
        .expect("a concurrency layer on a quorum client that counts on a primary");

    for lease in [lease, permit, read] {
        lease.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counting_on_a_store_that_cannot_count_or_another_prefix_is_refused() {
    let nodes = start_nodes();
    let primary = RedisServer::start();
    let quorum = Client::builder()
        .connect_quorum(urls(&nodes))
        .await
        .expect("quorum");
    match Client::builder()
        .counting_on(quorum)
        .connect_quorum(urls(&nodes))
        .await
    {
        Err(StoreError::Config { message }) => {
            assert!(message.contains("counting_on"), "{message}");
        }
        other => panic!("counting on a quorum: {other:?}"),
    }
    let elsewhere = Client::builder()
        .prefix("other")
        .connect(&primary.url())
        .await
        .expect("primary");
    match Client::builder()
        .counting_on(elsewhere)
        .connect_quorum(urls(&nodes))
        .await
    {
        Err(StoreError::Config { message }) => assert!(message.contains("prefix"), "{message}"),
        other => panic!("counting on another prefix: {other:?}"),
    }
}

/// `ping` asks both stores: the quorum's nodes and, named `counting …`, the primary; the client
/// is ready only while both can work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_asks_the_counting_store_too() {
    let nodes = start_nodes();
    let primary = RedisServer::start();
    let client = counting_client(&nodes, &primary, "pinged").await;
    let health = client.ping().await;
    assert!(health.ready, "{health:?}");
    assert_eq!(health.store, "quorum");
    assert_eq!(health.nodes.len(), nodes.len() + 1, "{health:?}");
    let counting: Vec<_> = health
        .nodes
        .iter()
        .filter(|n| n.node.starts_with("counting "))
        .collect();
    assert_eq!(counting.len(), 1, "{health:?}");
    assert!(counting[0].is_up(), "{health:?}");

    // The primary goes away: the locks could still be taken, the limits could not.
    drop(primary);
    let health = client.ping().await;
    assert!(!health.ready, "{health:?}");
    for node in &health.nodes {
        let is_counting = node.node.starts_with("counting ");
        assert_eq!(node.is_up(), !is_counting, "{node:?}");
    }
}
