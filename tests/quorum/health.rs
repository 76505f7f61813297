//! `Client::ping` (issue 29 §3): which servers answer, and whether the client can work, on a
//! quorum, a single primary and in memory.

use std::time::Duration;

use distlock::Client;

use super::support::RedisServer;
use super::support::fixture::connect_with_timeout;
use super::{quorum, start_nodes};

fn down(health: &distlock::Health) -> Vec<String> {
    let mut down: Vec<String> = health
        .nodes
        .iter()
        .filter(|n| !n.is_up())
        .map(|n| n.node.clone())
        .collect();
    down.sort();
    down
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_names_the_quorum_nodes_down_and_needs_a_majority_up() {
    let mut nodes = start_nodes();
    let client = quorum(&nodes, Duration::from_secs(30)).await;
    let health = client.ping().await;
    assert!(health.ready, "{health:?}");
    assert_eq!(health.store, "quorum");
    assert_eq!(health.nodes.len(), nodes.len());
    assert!(down(&health).is_empty(), "{health:?}");

    let name = |node: &RedisServer| format!("127.0.0.1:{}", node.port());
    let mut expected = vec![name(&nodes[0]), name(&nodes[3])];
    expected.sort();
    nodes[0].kill();
    nodes[3].kill();
    let health = client.ping().await;
    assert!(health.ready, "three of five answer: {health:?}");
    assert_eq!(down(&health), expected);
    assert!(
        health
            .nodes
            .iter()
            .filter(|n| !n.is_up())
            .all(|n| n.answer.as_ref().is_err_and(|why| !why.is_empty())),
        "a node down says why: {health:?}"
    );

    nodes[4].kill();
    let health = client.ping().await;
    assert!(!health.ready, "two of five answer: {health:?}");
    assert_eq!(down(&health).len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_on_a_primary_follows_it_down_and_memory_is_always_ready() {
    let mut server = RedisServer::start();
    let client = connect_with_timeout(&server.url(), Duration::from_millis(500)).await;
    let health = client.ping().await;
    assert!(health.ready, "{health:?}");
    assert_eq!(health.store, "redis");
    assert_eq!(health.nodes.len(), 1);
    assert!(health.nodes[0].is_up());

    server.kill();
    let health = client.ping().await;
    assert!(!health.ready, "{health:?}");
    assert!(!health.nodes[0].is_up());

    let memory = Client::in_memory().ping().await;
    assert!(memory.ready);
    assert_eq!(memory.store, "memory");
    assert!(memory.nodes.is_empty());
}
