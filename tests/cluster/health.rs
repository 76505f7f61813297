//! `Client::ping` on a Cluster (issue 29 §3): every master is asked, and a master down makes
//! the client not ready, named.

use std::time::Duration;

use distlock::Client;

use crate::support::cluster::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_asks_every_master_and_names_one_that_is_down() {
    let cluster = RedisCluster::start();
    let client = Client::builder()
        .response_timeout(Duration::from_millis(500))
        .connect_cluster(cluster.seed_urls())
        .await
        .unwrap_or_else(|e| panic!("connect_cluster: {e}\n{}", cluster.logs()));
    let health = client.ping().await;
    assert!(health.ready, "{health:?}");
    assert_eq!(health.store, "cluster");
    let masters = cluster.masters().await;
    let mut expected: Vec<String> = masters
        .iter()
        .map(|m| format!("127.0.0.1:{}", m.port()))
        .collect();
    expected.sort();
    let mut asked: Vec<String> = health.nodes.iter().map(|n| n.node.clone()).collect();
    asked.sort();
    assert_eq!(asked, expected, "one ping per master");
    assert!(health.nodes.iter().all(|n| n.is_up()), "{health:?}");

    // Killed, and asked at once: well inside the cluster's 1 s node timeout, before any
    // replica could be promoted.
    let victim = masters[1];
    let victim_name = format!("127.0.0.1:{}", victim.port());
    cluster.kill_node(victim);
    let health = client.ping().await;
    assert!(!health.ready, "{health:?}");
    let down: Vec<&str> = health
        .nodes
        .iter()
        .filter(|n| !n.is_up())
        .map(|n| n.node.as_str())
        .collect();
    assert_eq!(down, [victim_name.as_str()], "{health:?}");
}
