//! Leader election on a real Redis Cluster: the record lives in the lock's slot on every
//! master, followers are woken through the lock's sharded channel, resign hands over at once,
//! and a record whose lease lost the lock is never named.

use std::time::Duration;

use crate::locks::{client, names_on_every_master};
use crate::support::cluster::RedisCluster;
use crate::support::election::a_leads;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_on_every_master() {
    const TTL: Duration = Duration::from_secs(30);
    let cluster = RedisCluster::shared();
    let a = client(cluster, "elected").await;
    let b = client(cluster, "elected").await;
    for name in names_on_every_master(cluster, &a, 1).await {
        let (mut e, first) = a_leads(&a, &b, &name, TTL).await;
        let label = format!("cluster {name}");
        let second = e.hand_over_to_b(first, &b, &name, &label).await;

        // Taken from under the leader: its record stays, and is never named.
        assert!(a.force_unlock(&name).await.expect("force_unlock"));
        assert_eq!(e.ea.leader().await.expect("leader"), None);
        drop(second);
    }
}
