//! TESTPLAN 59, quorum leases heal (feature audit L34): a renewal re-takes the key on a node
//! that lost it, once that node's quarantine is over, if the key is free there.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use distlock::LockError;

use super::{quorum, start_nodes};

/// A 5-node quorum with node 5 down throughout, and one lease held for several ttls while
/// nodes 1 and 2 restart without persistence, one after the other. Without healing, the
/// second restart leaves the lease two copies (nodes 3 and 4): lost, although it was healthy
/// all along. With it, each restarted node gets the lease's copy back after its quarantine,
/// and the lease stays held. Meanwhile a second client tries to take the lock every 100 ms and
/// every node is read: no other token ever holds a majority of the nodes, and the second
/// client is never granted the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_lease_heals_as_nodes_restart_empty() {
    const TTL: Duration = Duration::from_secs(2);
    let quarantine = Duration::from_secs(3);
    let mut nodes = start_nodes();
    let urls: Vec<String> = nodes.iter().map(support_url).collect();
    let a = quorum(&nodes, quarantine).await;
    let b = quorum(&nodes, quarantine).await;
    // Let the nodes' boot values age past the quarantine, as in a long-running deployment.
    tokio::time::sleep(quarantine + Duration::from_millis(200)).await;
    nodes[4].kill();
    let lease = a
        .lock("heal")
        .ttl(TTL)
        .acquire()
        .await
        .expect("granted on nodes 1-4");
    let key = a.__inspect().lock_key("heal").expect("key");
    let token = node_values(&urls, &key).await[0]
        .clone()
        .expect("node 1 holds the lease");
    let started = Instant::now();

    // The second client, and a reader of every node, all along.
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicUsize::new(0));
    let watcher = tokio::spawn({
        let (stop, refused, urls, key, token) = (
            stop.clone(),
            refused.clone(),
            urls.clone(),
            key.clone(),
            token.clone(),
        );
        async move {
            while !stop.load(Ordering::SeqCst) {
                match b.lock("heal").ttl(TTL).acquire().await {
                    Err(LockError::Busy { .. }) => {
                        refused.fetch_add(1, Ordering::SeqCst);
                    }
                    // A node that is restarting may leave an attempt undecided.
                    Err(LockError::Store(err)) if err.is_transient() => {}
                    Err(other) => panic!("the second client: {other}"),
                    Ok(second) => panic!(
                        "the second client was granted the lock while the first lease is \
                         held: {second:?}"
                    ),
                }
                let values = node_values(&urls, &key).await;
                let others = values
                    .iter()
                    .flatten()
                    .filter(|v| trimmed(v) != trimmed(&token))
                    .count();
                assert!(
                    others < 3,
                    "another token holds a majority of the nodes: {values:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });

    for restarted in [0, 1] {
        nodes[restarted].restart();
        let restarted_at = Instant::now();
        // Healed once its quarantine is over: within the quarantine plus a few renewals.
        let deadline = restarted_at + quarantine + TTL * 3;
        loop {
            assert!(
                !lease.is_lost(),
                "the lease was lost {:?} after node {} restarted: {:?}",
                restarted_at.elapsed(),
                restarted + 1,
                lease.lost_reason()
            );
            let values = node_values(&urls, &key).await;
            if values[restarted]
                .as_deref()
                .is_some_and(|v| trimmed(v) == trimmed(&token))
            {
                eprintln!(
                    "node {} restarted empty; its copy was re-taken {:?} later",
                    restarted + 1,
                    restarted_at.elapsed()
                );
                assert!(
                    restarted_at.elapsed() + Duration::from_millis(200) >= quarantine,
                    "re-taken before the node's quarantine was over"
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {} never got the lease's copy back: {values:?}",
                restarted + 1
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // One more renewal or two, on four healthy copies.
    tokio::time::sleep(TTL).await;
    assert!(!lease.is_lost(), "{:?}", lease.lost_reason());
    let held = started.elapsed();
    assert!(held > TTL * 4, "held for {held:?} only");
    stop.store(true, Ordering::SeqCst);
    watcher.await.expect("the second client never got the lock");
    assert!(
        refused.load(Ordering::SeqCst) > 10,
        "the second client was refused only {} times",
        refused.load(Ordering::SeqCst)
    );
    let values = node_values(&urls, &key).await;
    for (i, value) in values.iter().take(4).enumerate() {
        assert_eq!(
            value.as_deref().map(trimmed),
            Some(trimmed(&token)),
            "node {}: {values:?}",
            i + 1
        );
    }
    eprintln!(
        "the lease was held {held:?} ({} ttls) through two restarts",
        held.as_secs_f64() / TTL.as_secs_f64()
    );
    lease.release().await.expect("release");
}

fn support_url(node: &crate::support::RedisServer) -> String {
    node.url()
}

/// A lock key's value without a waiter's mark.
fn trimmed(value: &str) -> &str {
    value.trim_end_matches(['*', '!'])
}

/// `key`'s value on each node (`None`: absent, or the node does not answer).
async fn node_values(urls: &[String], key: &str) -> Vec<Option<String>> {
    let mut values = Vec::with_capacity(urls.len());
    for url in urls {
        let read = async {
            let client = redis::Client::open(url.as_str()).ok()?;
            let mut conn = client.get_multiplexed_async_connection().await.ok()?;
            redis::cmd("GET")
                .arg(key)
                .query_async::<Option<String>>(&mut conn)
                .await
                .ok()
                .flatten()
        };
        values.push(
            tokio::time::timeout(Duration::from_millis(500), read)
                .await
                .ok()
                .flatten(),
        );
    }
    values
}
