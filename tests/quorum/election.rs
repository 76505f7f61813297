//! Leader election on a Redlock quorum of five independent primaries: the record is written
//! on every node and named where a majority agrees (each node checks it against its own copy
//! of the lock), resign hands over at once, and a minority of nodes down changes nothing.

use std::time::Duration;

use super::{quorum, start_nodes};
use crate::support::election::a_leads;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_on_a_quorum_survives_a_minority_down() {
    const TTL: Duration = Duration::from_secs(30);
    let mut nodes = start_nodes();
    let a = quorum(&nodes, Duration::from_secs(1)).await;
    let b = quorum(&nodes, Duration::from_secs(1)).await;
    let (mut e, first) = a_leads(&a, &b, "leader", TTL).await;

    // Two of five nodes down: the leader is still named.
    nodes[0].kill();
    nodes[1].kill();
    let named = e.eb.leader().await.expect("leader").expect("a leader");
    assert_eq!(named.identity, "a");

    let second = e.hand_over_to_b(first, &b, "leader", "quorum").await;

    // Taken from under the leader: never named again.
    assert!(a.force_unlock("leader").await.expect("force_unlock"));
    assert_eq!(e.ea.leader().await.expect("leader"), None);
    drop(second);
}
