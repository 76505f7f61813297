//! TESTPLAN 44: every primitive built on a store that cannot serve it is a typed error where
//! it is built, not on each request, and a client says what it can serve.

use std::time::Duration;

use distlock::{BloomError, Capability, LockError};
use distlock_tower::ConfigError;
use distlock_tower::concurrency::ConcurrencyLimitLayer;
use distlock_tower::extract::Constant;

use super::{quorum, start_nodes};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_client_refuses_counting_primitives_when_they_are_built() {
    let nodes = start_nodes();
    let client = quorum(&nodes, Duration::from_secs(30)).await;
    let commands_before = commands_processed(&nodes).await;

    for capability in [
        Capability::HolderSets,
        Capability::RateLimits,
        Capability::BloomFilters,
        Capability::ReplicaAcknowledgement,
        Capability::HandOff,
        Capability::FencedWrites,
        Capability::IdempotencyRecords,
    ] {
        let refused = client
            .supports(capability)
            .expect_err("a quorum serves locks only");
        assert_eq!(refused.store, "quorum");
        assert_eq!(refused.capability, capability);
        assert!(!refused.reason.is_empty());
    }
    let holder_sets = client
        .supports(Capability::HolderSets)
        .expect_err("no holder sets");
    assert!(
        holder_sets.reason.contains("Client::connect"),
        "the reason says what to use instead: {holder_sets}"
    );
    // Each counting refusal names the fix the Redlock guide gives: count elsewhere.
    for capability in [
        Capability::HolderSets,
        Capability::RateLimits,
        Capability::BloomFilters,
        Capability::FencedWrites,
    ] {
        let refused = client.supports(capability).expect_err("refused");
        assert!(
            refused.reason.contains("counting_on"),
            "{capability:?}: {}",
            refused.reason
        );
    }
    let limiter = client
        .rate_limiter(
            distlock::ratelimit::Policy::gcra(
                "api",
                distlock::ratelimit::Rate::per_second(10).expect("rate"),
            )
            .expect("policy"),
        )
        .build()
        .expect_err("a quorum cannot count");
    assert!(limiter.to_string().contains("counting_on"), "{limiter}");

    // The concurrency layer: refused where the router is built.
    match ConcurrencyLimitLayer::new(client.clone(), Constant::from_static("exports"), 2) {
        Err(ConfigError::UnsupportedStore(refused)) => {
            assert_eq!(refused.capability, Capability::HolderSets);
            assert_eq!(refused.store, "quorum");
        }
        Err(other) => panic!("expected UnsupportedStore, got {other:?}"),
        Ok(_) => panic!("a concurrency layer on a quorum was built"),
    }
    assert!(
        ConcurrencyLimitLayer::builder(client.clone(), Constant::from_static("exports"), 2)
            .build()
            .is_err(),
        "the builder refuses it too"
    );

    // A fenced resource: refused by `Client::fenced`, with the capability's reason.
    match client.fenced("invoice:1") {
        Err(distlock::FencedError::UnsupportedStore { reason }) => assert_eq!(
            reason,
            client
                .supports(Capability::FencedWrites)
                .expect_err("no fenced writes")
                .reason
        ),
        other => panic!("a fenced resource on a quorum: {other:?}"),
    }

    // A Bloom filter: refused by `open`.
    assert!(matches!(
        client.bloom_filter("seen").expected_items(10).open().await,
        Err(BloomError::UnsupportedStore { .. })
    ));
    // Semaphores and read-write locks: refused by the acquire that builds the lease.
    for result in [
        client.semaphore("exports", 2).acquire().await.map(drop),
        client.rw_lock("doc").read().await.map(drop),
        client.rw_lock("doc").write().await.map(drop),
    ] {
        assert!(
            matches!(result, Err(LockError::UnsupportedStore { .. })),
            "{result:?}"
        );
    }
    // A lock that asks for replica acknowledgement: an invalid configuration, at acquire.
    let err = client
        .lock("acked")
        .replicas(1, Duration::from_millis(100))
        .acquire()
        .await
        .expect_err("no WAIT on a quorum");
    assert!(
        matches!(err, LockError::InvalidConfig { ref reason } if reason.contains("quorum")),
        "{err}"
    );

    // None of them reached a node.
    assert_eq!(
        commands_processed(&nodes).await,
        commands_before,
        "a refused primitive ran a script"
    );
}

/// Script calls (and script loads) each node processed so far: every primitive runs scripts.
async fn commands_processed(nodes: &[super::support::RedisServer]) -> Vec<u64> {
    let mut counts = Vec::new();
    for node in nodes {
        let mut conn = node.conn().await;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .expect("INFO");
        let total = info
            .lines()
            .filter(|line| {
                ["cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_script|load:"]
                    .iter()
                    .any(|name| line.starts_with(name))
            })
            .filter_map(|line| {
                line.split(['=', ','])
                    .nth(1)
                    .and_then(|calls| calls.parse::<u64>().ok())
            })
            .sum();
        counts.push(total);
    }
    counts
}
