//! Replica acknowledgement (TESTPLAN 14 and 39): with `.replicas(1, 100ms)` and the replica
//! frozen, an acquire fails with a typed error and leaves no lock behind, and renewals count as
//! failed; with the replica live, the lock is on the replica before the holder acts, and it
//! survives a forced promotion. A read-only node answers `READONLY`, a typed refusal, never
//! "busy".

use std::time::{Duration, Instant};

use distlock::{LockError, RefusedKind, StoreError};
use redis::AsyncCommands as _;

use crate::support::RedisServer;
use crate::support::fixture::connect;

/// How long an acquire or renewal waits for a *live* replica's acknowledgement: it normally
/// takes a millisecond, but a busy machine can leave the replica unscheduled for much longer,
/// and then `NotReplicated` is the right answer. Long, so that only a frozen replica fails.
const LIVE_REPLICA_WAIT: Duration = Duration::from_secs(3);

/// A primary and one replica of it, linked and in sync.
pub(super) async fn primary_and_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start();
    let replica = RedisServer::start();
    let mut conn = replica.conn().await;
    let (): () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.port())
        .query_async(&mut conn)
        .await
        .expect("REPLICAOF");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await
            .expect("INFO");
        if info.contains("master_link_status:up") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replica never linked:\n{info}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (primary, replica)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_fails_the_acquire_and_leaves_no_lock() {
    let (primary, replica) = primary_and_replica().await;
    let client = connect(&primary.url()).await;
    let key = client.__inspect().lock_key("acked").expect("name");

    // Live replica: granted, and the key is on the replica already when acquire returns.
    let lease = client
        .lock("acked")
        .ttl(Duration::from_secs(5))
        .replicas(1, LIVE_REPLICA_WAIT)
        .acquire()
        .await
        .expect("acquire with a live replica");
    let mut on_replica = replica.conn().await;
    let copied: Option<String> = on_replica.get(&key).await.expect("GET on the replica");
    assert!(
        copied.is_some(),
        "the grant was not on the replica when acquire returned"
    );
    lease.release().await.expect("release");

    // Frozen replica: no acknowledgement, a typed error, and no lock left behind.
    let frozen = replica.stop_guard();
    let asked = Instant::now();
    let result = client
        .lock("acked")
        .ttl(Duration::from_secs(5))
        .replicas(1, Duration::from_millis(100))
        .acquire()
        .await;
    match result {
        Err(LockError::Store(StoreError::NotReplicated {
            acked: 0,
            wanted: 1,
        })) => {}
        other => panic!("acquire with a frozen replica: {other:?}"),
    }
    // WAIT gave up after its 100 ms: a wait for the frozen replica's acknowledgement would
    // last until the client's 15 s response timeout; 10 s tells the two apart with room for
    // a busy machine.
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "took {:?}",
        asked.elapsed()
    );
    // Given back at once; the deadline only outlasts a busy machine.
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.__inspect().get(&key).await.expect("GET").is_some() {
        assert!(
            Instant::now() < deadline,
            "the unacknowledged grant was left behind"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // A lease taken while the replica was live: its renewals fail while it is frozen, and it
    // is lost at its deadline rather than believed on an unacknowledged renewal.
    drop(frozen);
    let lease = client
        .lock("renewed")
        .ttl(Duration::from_secs(4))
        .replicas(1, LIVE_REPLICA_WAIT)
        .acquire()
        .await
        .expect("acquire");
    let _frozen = replica.stop_guard();
    tokio::time::timeout(Duration::from_secs(15), lease.lost())
        .await
        .expect("the lease was not reported lost while no renewal was acknowledged");
    assert!(lease.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_lock_survives_a_forced_promotion() {
    let (primary, replica) = primary_and_replica().await;
    let client = connect(&primary.url()).await;
    let lease = client
        .lock("promoted")
        .ttl(Duration::from_secs(10))
        .replicas(1, LIVE_REPLICA_WAIT)
        .acquire()
        .await
        .expect("acquire");
    let key = client.__inspect().lock_key("promoted").expect("name");
    // The replica is promoted (as a failover would) and the old primary dies.
    let mut conn = replica.conn().await;
    let (): () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut conn)
        .await
        .expect("REPLICAOF NO ONE");
    drop(primary);
    let value: Option<String> = conn.get(&key).await.expect("GET");
    assert!(
        value.is_some(),
        "the acknowledged grant is gone from the promoted replica"
    );
    let pttl: i64 = conn.pttl(&key).await.expect("PTTL");
    assert!(pttl > 5_000, "ttl {pttl} ms on the promoted replica");
    // The new primary refuses a second holder.
    let other = connect(&replica.url()).await;
    assert!(matches!(
        other.lock("promoted").acquire().await,
        Err(LockError::Busy { .. })
    ));
    drop(lease);
}

/// TESTPLAN 14: a client pointed at a read-only node (a demoted primary) gets `READONLY` as a
/// typed refusal, never `Busy`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_node_is_a_typed_refusal_not_busy() {
    let (_primary, replica) = primary_and_replica().await;
    let client = connect(&replica.url()).await;
    match client.lock("read-only").acquire().await {
        Err(LockError::Store(StoreError::Refused {
            kind: RefusedKind::ReadOnly,
            ..
        })) => {}
        other => panic!("acquire on a replica: {other:?}"),
    }
    let replicas_elsewhere = client
        .lock("x")
        .replicas(1, Duration::from_millis(100))
        .ttl(Duration::from_millis(50))
        .acquire()
        .await;
    assert!(
        matches!(replicas_elsewhere, Err(LockError::InvalidConfig { .. })),
        "a replicas timeout above the ttl: {replicas_elsewhere:?}"
    );
    let memory = distlock::Client::in_memory();
    assert!(matches!(
        memory
            .lock("x")
            .replicas(1, Duration::from_millis(100))
            .acquire()
            .await,
        Err(LockError::InvalidConfig { .. })
    ));
}
