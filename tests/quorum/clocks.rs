//! TESTPLAN 16 on a quorum (issue 26 §2): one node whose clock steps forward expires its copy
//! of a lease early; its vote must not give a second client the lock while the first lease is
//! valid, and its fences (minted on the jumped clock) must not be used.

use std::time::{Duration, Instant};

use distlock::{Client, LockError};

use super::support::faketime::ClockedServer;

/// The quorum node whose clock jumps.
const JUMPER: usize = 2;
const TTL: Duration = Duration::from_secs(3);

async fn client(nodes: &[ClockedServer]) -> Client {
    Client::builder()
        .response_timeout(Duration::from_secs(1))
        // The default 50 ms per node is for production; a busy test machine misses it on
        // every node at once, and this test is about clocks, not latency.
        .quorum_node_timeout(Duration::from_millis(500))
        .restart_quarantine(Duration::from_secs(1))
        .connect_quorum(nodes.iter().map(ClockedServer::url).collect::<Vec<_>>())
        .await
        .unwrap_or_else(|e| panic!("connect_quorum: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_clock_jumps_does_not_vote_for_a_second_holder() {
    let nodes: Vec<ClockedServer> = (0..5)
        .map(|i| ClockedServer::start(&format!("node{i}"), i == JUMPER))
        .collect();
    let a = client(&nodes).await;
    let b = client(&nodes).await;

    // A bare majority, {0, 1, 2}: nodes 3 and 4 are stopped while it is granted. No watchdog,
    // so the lease stays valid (and its holder trusts it) until its local deadline.
    nodes[3].stop_process();
    nodes[4].stop_process();
    let granted = Instant::now();
    let lease = a
        .lock("jump")
        .ttl(TTL)
        .watchdog(false)
        .acquire()
        .await
        .expect("granted on nodes 0-2");
    // Minted at once, while the lease holds its three copies.
    let first = lease.fence().await.expect("fence");
    nodes[3].cont_process();
    nodes[4].cont_process();

    // Node 2's clock steps past the lease's expiry: its copy is gone, so it grants the lock to
    // the next client along with nodes 3 and 4 - a majority, if its vote counted.
    // Read back from the node's own TIME: a jump it never saw would prove nothing.
    let ahead = nodes[JUMPER].jump_clock(TTL + Duration::from_secs(2)).await;
    eprintln!("node {JUMPER}'s TIME runs {ahead:?} ahead");
    let mut tries = 0;
    while !lease.is_lost() && granted.elapsed() < TTL {
        match b.lock("jump").ttl(TTL).acquire().await {
            Err(LockError::Busy { .. }) => tries += 1,
            // Not a grant either (a node too slow to answer on a busy machine); only the
            // refusals count as tries below.
            Err(LockError::Store(err)) if err.is_transient() => {}
            Ok(second) => panic!(
                "a second client was granted the lock (fence {:?}) while the first lease (fence \
                 {first}) is valid: the node whose clock jumped voted for it",
                second.fence().await,
            ),
            Err(other) => panic!("second client: {other}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        tries >= 3,
        "only {tries} tries while the first lease was valid"
    );

    // Once the first is released, four nodes without node 2 are a majority: granted, and its
    // fence (minted lazily, on every node) comes from the others' clocks, not node 2's (which
    // runs 5 s, 5 000 000 µs, ahead).
    lease.release().await.expect("release");
    let second = b
        .lock("jump")
        .ttl(TTL)
        .acquire()
        .await
        .expect("granted by the four nodes whose clocks agree");
    let second_fence = second.fence().await.expect("fence");
    assert!(second_fence > first, "fences increase");
    assert!(
        second_fence - first < 4_000_000,
        "the second fence ({second_fence}) came from the jumped node's clock (the first was \
         {first})"
    );
    second.release().await.expect("release");
}
