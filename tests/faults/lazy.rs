//! A lazy start (`ClientBuilder::lazy`): a process starts while Redis is down, decides by the
//! outage policy meanwhile, and works once Redis answers; a server that an eager `connect`
//! would refuse is refused once it answers, with the same typed error.

use std::time::Duration;

use distlock::ratelimit::{Origin, Outage, Policy};
use distlock::{Client, LockError, StoreError};

use crate::common::{is_unavailable, poll_until_async};
use crate::support::RedisServer;

/// How long the tests let the background check take to see a server that has come up: it
/// probes at most every 2 s (the library's bound), so this is that bound many times over.
const SEEN_WITHIN: Duration = Duration::from_secs(30);

fn lazy() -> distlock::ClientBuilder {
    Client::builder()
        .lazy(true)
        .response_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(300))
        .reconnect_retries(1)
}

/// Started with the server down: `connect` succeeds (an eager one fails), `ping` is not
/// ready, a lock fails with a store error and a fail-open limiter lets requests through.
/// Once the server is up: ready, locks exclude another client, and the limiter counts in
/// Redis again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_client_starts_while_redis_is_down_and_works_once_it_answers() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();

    let eager = Client::builder()
        .connect_timeout(Duration::from_millis(300))
        .connect(&url)
        .await;
    assert!(
        matches!(
            eager,
            Err(StoreError::Unreachable { .. } | StoreError::Timeout { .. })
        ),
        "an eager connect fails while the server is down: {:?}",
        eager.map(|_| ())
    );
    let client = lazy()
        .connect(&url)
        .await
        .expect("a lazy connect needs no server");

    let health = client.ping().await;
    assert!(!health.ready, "ready without a server: {health:?}");
    let err = client.lock("lazy:a").acquire().await.unwrap_err();
    assert!(is_unavailable(&err), "{err:?}");
    let limiter = client
        .rate_limiter("lazy: 2 per 1min".parse::<Policy>().expect("policy"))
        .on_outage(Outage::FailOpen)
        .deadline(Duration::from_millis(300))
        .build()
        .expect("limiter");
    let decision = limiter.check("s").await.expect("fail open");
    assert_eq!(decision.origin, Origin::FailOpen);

    server.restart();
    assert!(
        poll_until_async(SEEN_WITHIN, Duration::from_millis(50), || async {
            client.ping().await.ready
        })
        .await,
        "not ready {SEEN_WITHIN:?} after the server came up: {:?}",
        client.ping().await
    );
    let lease = client.lock("lazy:a").acquire().await.expect("acquire");
    let other = Client::connect(&url).await.expect("eager client");
    assert!(matches!(
        other.lock("lazy:a").acquire().await,
        Err(LockError::Busy { .. })
    ));
    lease.release().await.expect("release");
    for allowed in [true, true, false] {
        let decision = limiter.check("s").await.expect("check");
        assert_eq!(decision.origin, Origin::Store);
        assert_eq!(decision.allowed, allowed);
    }
}

/// A Cluster node given as a single primary: an eager `connect` refuses it with a
/// `Config` error naming `connect_cluster`. A lazy client refuses it too, once the
/// background check has seen it: every operation and `ping` then give that error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_client_refuses_what_an_eager_connect_refuses() {
    let server = RedisServer::builder()
        .config("cluster-enabled", &["yes"])
        .start();
    match Client::connect(&server.url()).await {
        Err(StoreError::Config { message }) => assert!(message.contains("connect_cluster")),
        other => panic!("expected Config, got {:?}", other.map(|_| ())),
    }
    let client = lazy().connect(&server.url()).await.expect("lazy connect");
    let refused = |err: &LockError| {
        matches!(err, LockError::Store(StoreError::Config { message })
            if message.contains("connect_cluster"))
    };
    assert!(
        poll_until_async(SEEN_WITHIN, Duration::from_millis(50), || async {
            client
                .lock("lazy:b")
                .acquire()
                .await
                .is_err_and(|err| refused(&err))
        })
        .await,
        "never refused: {:?}",
        client.lock("lazy:b").acquire().await.map(|_| ())
    );
    let health = client.ping().await;
    assert!(!health.ready);
    assert!(
        health.nodes.iter().all(|node| node
            .answer
            .as_ref()
            .is_err_and(|e| e.contains("connect_cluster"))),
        "{health:?}"
    );
}

/// Stores that need their servers at start refuse `lazy(true)` before contacting anything.
#[tokio::test]
async fn stores_that_need_their_servers_refuse_a_lazy_start() {
    let url = "redis://127.0.0.1:1/";
    let results = [
        (
            "connect_cluster",
            lazy().connect_cluster([url]).await.map(|_| ()),
        ),
        (
            "connect_quorum",
            lazy().connect_quorum([url, url, url]).await.map(|_| ()),
        ),
        (
            "connect_sentinel",
            lazy().connect_sentinel("mymaster", [url]).await.map(|_| ()),
        ),
    ];
    for (constructor, result) in results {
        match result {
            Err(StoreError::Config { message }) => {
                assert!(
                    message.contains(constructor) && message.contains("lazy"),
                    "{message}"
                );
            }
            other => panic!("{constructor}: expected Config, got {other:?}"),
        }
    }
}
