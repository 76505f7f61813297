//! Leader election on a Redlock quorum of five independent primaries: the record is written
//! on every node and named where a majority agrees (each node checks it against its own copy
//! of the lock), resign hands over at once, and a minority of nodes down changes nothing.

use std::time::Duration;

use tokio::time::Instant;

use super::{quorum, start_nodes};
use crate::support::election::{follow, until_a_campaigner_waits};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_on_a_quorum_survives_a_minority_down() {
    const TTL: Duration = Duration::from_secs(30);
    let mut nodes = start_nodes();
    let a = quorum(&nodes, Duration::from_secs(1)).await;
    let b = quorum(&nodes, Duration::from_secs(1)).await;
    let ea = a.election("leader").ttl(TTL).build().expect("election");
    let eb = b.election("leader").ttl(TTL).build().expect("election");
    let mut followed = follow(&eb);
    let first = ea.campaign("a").await.expect("campaign");
    let within = eb.observe_bound() + Duration::from_secs(5);
    let seen = tokio::time::timeout(within, followed.recv())
        .await
        .expect("the follower saw the leader")
        .expect("never ends");
    assert_eq!((seen.term, seen.identity.as_str()), (first.term(), "a"));

    // Two of five nodes down: the leader is still named.
    nodes[0].kill();
    nodes[1].kill();
    let named = eb.leader().await.expect("leader").expect("a leader");
    assert_eq!(named.identity, "a");

    let waiting = tokio::spawn({
        let eb = eb.clone();
        async move {
            let leadership = eb.campaign("b").await.expect("campaign");
            (Instant::now(), leadership)
        }
    });
    until_a_campaigner_waits(&b, "leader").await;
    let resigned_at = Instant::now();
    let first_term = first.term();
    first.resign().await.expect("resign");
    let (elected_at, second) = waiting.await.expect("campaigner");
    let handover = elected_at - resigned_at;
    println!(
        "quorum hand-over: {:.1} ms",
        handover.as_secs_f64() * 1000.0
    );
    assert!(handover < Duration::from_secs(5), "not woken: {handover:?}");
    assert!(second.term() > first_term);
    let seen = tokio::time::timeout(within, followed.recv())
        .await
        .expect("the follower saw the new leader")
        .expect("never ends");
    assert_eq!((seen.term, seen.identity.as_str()), (second.term(), "b"));

    // Taken from under the leader: never named again.
    assert!(a.force_unlock("leader").await.expect("force_unlock"));
    assert_eq!(ea.leader().await.expect("leader"), None);
    drop(second);
}
