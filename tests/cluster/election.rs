//! Leader election on a real Redis Cluster: the record lives in the lock's slot on every
//! master, followers are woken through the lock's sharded channel, resign hands over at once,
//! and a record whose lease lost the lock is never named.

use std::time::Duration;

use tokio::time::Instant;

use crate::locks::{client, names_on_every_master};
use crate::support::cluster::RedisCluster;
use crate::support::election::{follow, until_a_campaigner_waits};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_on_every_master() {
    const TTL: Duration = Duration::from_secs(30);
    let cluster = RedisCluster::shared();
    let a = client(cluster, "elected").await;
    let b = client(cluster, "elected").await;
    for name in names_on_every_master(cluster, &a, 1).await {
        let ea = a.election(&name).ttl(TTL).build().expect("election");
        let eb = b.election(&name).ttl(TTL).build().expect("election");
        let mut followed = follow(&eb);
        assert_eq!(eb.leader().await.expect("leader"), None);
        let first = ea.campaign("a").await.expect("campaign");
        let seen =
            tokio::time::timeout(eb.observe_bound() + Duration::from_secs(5), followed.recv())
                .await
                .expect("the follower saw the leader")
                .expect("never ends");
        assert_eq!((seen.term, seen.identity.as_str()), (first.term(), "a"));

        let waiting = tokio::spawn({
            let eb = eb.clone();
            async move {
                let leadership = eb.campaign("b").await.expect("campaign");
                (Instant::now(), leadership)
            }
        });
        until_a_campaigner_waits(&b, &name).await;
        let resigned_at = Instant::now();
        let first_term = first.term();
        first.resign().await.expect("resign");
        let (elected_at, second) = waiting.await.expect("campaigner");
        let handover = elected_at - resigned_at;
        println!(
            "cluster hand-over for {name}: {:.1} ms",
            handover.as_secs_f64() * 1000.0
        );
        assert!(handover < Duration::from_secs(5), "not woken: {handover:?}");
        assert!(second.term() > first_term);
        let seen =
            tokio::time::timeout(eb.observe_bound() + Duration::from_secs(5), followed.recv())
                .await
                .expect("the follower saw the new leader")
                .expect("never ends");
        assert_eq!((seen.term, seen.identity.as_str()), (second.term(), "b"));

        // Taken from under the leader: its record stays, and is never named.
        assert!(a.force_unlock(&name).await.expect("force_unlock"));
        assert_eq!(ea.leader().await.expect("leader"), None);
        drop(second);
    }
}
