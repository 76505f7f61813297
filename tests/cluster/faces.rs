//! Rate limits, the macro and both layers on a cluster client, unchanged (TESTPLAN 19 on the
//! cluster): every key of one check lives in the subject's slot, exactly the limit passes when
//! many callers fire at once, and the three faces of the library work as on one primary.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use distlock::ratelimit::{Policy, Rate};
use distlock_tower::extract::{Header, PathSegment, Prefixed};
use distlock_tower::lock::LockLayer;
use distlock_tower::rate_limit::RateLimitLayer;
use http::{Request, StatusCode};
use tower::ServiceExt as _;

use crate::locks::client;
use crate::macro_lock::the_macro_serialises_calls;
use crate::support::bloom::add_and_count_false_positives;
use crate::support::cluster::{RedisCluster, slot_of};

/// TESTPLAN 19: 150 callers at one instant against a budget of 100: exactly 100 pass, and
/// the keys of a two-policy check share the subject's slot. The budget refills at 100 per
/// hour (one unit per 36 s), so no unit comes back while the callers run, however slow the
/// machine (at 100 per 10 s, one came back every 100 ms, and a loaded run let 102 pass).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_the_limit_passes_on_a_cluster() {
    let cluster = RedisCluster::shared();
    let client = client(cluster, "rl").await;
    let limiter = client
        .rate_limiter_all([
            Policy::gcra("burst", Rate::per_hour(100).expect("rate")).expect("policy"),
            Policy::sliding_window("hourly", Rate::per_hour(10_000).expect("rate"))
                .expect("policy"),
        ])
        .deny_cache(0)
        .build()
        .expect("limiter");
    for subject in ["a", "user:{7}", "}{", "x:y:z"] {
        let keys = limiter.__keys(subject).expect("keys");
        assert!(
            keys.iter().all(|k| slot_of(k) == slot_of(&keys[0])),
            "{keys:?}"
        );
    }
    let allowed = Arc::new(AtomicU64::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(150));
    let tasks: Vec<_> = (0..150)
        .map(|_| {
            let (limiter, allowed, start) = (limiter.clone(), allowed.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                if limiter.check("burst:subject").await.expect("check").allowed {
                    allowed.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(allowed.load(Ordering::SeqCst), 100);
    // All or nothing: the hourly policy consumed only what passed.
    let peek = limiter.peek("burst:subject").await.expect("peek");
    assert_eq!(peek.policies[1].remaining, 10_000 - 100);
}

/// The macro runs unchanged on a cluster client: concurrent calls on one key are serialised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_macro_runs_on_a_cluster() {
    let cluster = RedisCluster::shared();
    let client = client(cluster, "macro").await;
    the_macro_serialises_calls(&client, 8, 20).await;
}

/// Both layers run unchanged on a cluster client. The policy's burst is 2 and it refills one
/// request a minute, so the third request is refused however slowly the first two ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_layers_run_on_a_cluster() {
    let cluster = RedisCluster::shared();
    let client = client(cluster, "layers").await;
    let limiter = client
        .rate_limiter(
            Policy::gcra(
                "api",
                Rate::per_hour(60).expect("rate").burst(2).expect("burst"),
            )
            .expect("policy"),
        )
        .build()
        .expect("valid limiter");
    let app = Router::new()
        .route("/orders/{id}", get(|| async { "settled" }))
        .route_layer(LockLayer::new(
            client.clone(),
            Prefixed::new("order:", PathSegment(1)),
        ))
        .layer(RateLimitLayer::new(limiter, Header::from_static("x-key")));
    let request = |key: &str| {
        Request::get("/orders/42")
            .header("x-key", key)
            .body(Body::empty())
            .expect("request")
    };
    for _ in 0..2 {
        let response = app.clone().oneshot(request("k")).await.expect("infallible");
        assert_eq!(response.status(), StatusCode::OK);
        axum::body::to_bytes(response.into_body(), 1024)
            .await
            .expect("body");
    }
    let refused = app.clone().oneshot(request("k")).await.expect("infallible");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // The lock layer: a held order is 423 for another request (the layer's lock is
    // `http/order:42`).
    let held = client
        .lock("http/order:42")
        .acquire()
        .await
        .expect("acquire");
    let busy = app.oneshot(request("other")).await.expect("infallible");
    assert_eq!(busy.status(), StatusCode::LOCKED);
    held.release().await.expect("release");
}

/// A Bloom filter larger than one shard spreads over the cluster's slots: each shard in its
/// own slot, every operation answered across them at once, the configuration checked on
/// every shard, and one ttl on all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_bloom_filter_spreads_over_the_slots() {
    let cluster = RedisCluster::shared();
    let client = client(cluster, "bloom").await;
    const TTL: Duration = Duration::from_secs(60);
    let opened = std::time::Instant::now();
    let filter = client
        .bloom_filter("big{set}")
        .expected_items(50_000)
        .false_positive_rate(0.01)
        .ttl(TTL)
        .__shard_bits(32_768)
        .open()
        .await
        .expect("open");
    assert!(filter.shards() >= 10, "{} shards", filter.shards());
    let slots: std::collections::HashSet<u16> = (0..filter.shards())
        .map(|i| slot_of(format!("bloom:bloom:{{big%7Bset%7D%S{i}}}")))
        .collect();
    assert!(slots.len() >= 10, "shards share slots: {slots:?}");
    let items: Vec<String> = (0..50_000).map(|i| format!("member:{i}")).collect();
    let absent: Vec<String> = (0..50_000).map(|i| format!("stranger:{i}")).collect();
    let fp = add_and_count_false_positives(&filter, &items, &absent).await;
    assert!(fp < 50_000 * 15 / 1000, "{fp} false positives of 50 000");
    let count = filter.count().await.expect("count");
    assert!((48_500..=51_500).contains(&count), "count {count}");
    // The ttl is set when the filter is created, so each shard has at least what is left of
    // it since `open` was called (however long the adds took on a busy machine), and none
    // has more than the ttl.
    for i in 0..filter.shards() {
        let ttl = client
            .__inspect()
            .pttl(&format!("bloom:bloom:{{big%7Bset%7D%S{i}}}"))
            .await
            .expect("pttl");
        let least = TTL.saturating_sub(opened.elapsed());
        assert!(
            ttl.is_some_and(|t| t >= least && t <= TTL),
            "shard {i}: {ttl:?}, expected {least:?}..={TTL:?}"
        );
    }
    assert!(matches!(
        client
            .bloom_filter("big{set}")
            .expected_items(60_000)
            .__shard_bits(32_768)
            .open()
            .await,
        Err(distlock::BloomError::ConfigMismatch { .. })
    ));
}
