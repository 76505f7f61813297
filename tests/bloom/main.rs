//! Bloom filters against real `redis-server` processes and the in-memory store (the same
//! bodies on both): the false-positive rate over a million absent items, no false negatives,
//! the configuration check, a ttl shared by every key, sharding, count and clear, and bounds.
//! The RedisBloom module is used when `DISTLOCK_TEST_REDISBLOOM` names its `.so` (see
//! `native_storage_with_the_module`).

#[path = "../support/mod.rs"]
mod support;

use std::time::Duration;

use distlock::bloom::{BloomStorage, MAX_TTL};
use distlock::{BloomError, Client};

use crate::support::RedisServer;
use crate::support::bloom::add_and_count_false_positives;
use crate::support::fixture::{Fixture, on_both_stores};

on_both_stores!(
    the_false_positive_rate_is_the_configured_one,
    a_different_configuration_is_refused,
    a_ttl_expires_every_key_together,
    a_sharded_filter_behaves_as_one,
    count_estimates_and_clear_empties,
    settings_at_their_bounds,
);

/// Adds `n` items, checks they are all present, then asks for 1 million absent items:
/// the rate of false positives, and the filter's count.
async fn measure(client: &Client, name: &str, n: u64, p: f64) -> (f64, u64) {
    let filter = client
        .bloom_filter(name)
        .expected_items(n)
        .false_positive_rate(p)
        .open()
        .await
        .expect("open");
    let present: Vec<String> = (0..n).map(|i| format!("present:{i}")).collect();
    let new = filter.add_many(&present).await.expect("add");
    assert!(
        new.iter().filter(|b| **b).count() as f64 >= n as f64 * (1.0 - 2.0 * p),
        "almost every item is new when added"
    );
    let found = filter.contains_many(&present).await.expect("contains");
    assert!(
        found.iter().all(|b| *b),
        "a Bloom filter has no false negatives"
    );
    let mut false_positives = 0u64;
    let absent = 1_000_000u64;
    for start in (0..absent).step_by(10_000) {
        let batch: Vec<String> = (start..start + 10_000)
            .map(|i| format!("absent:{i}"))
            .collect();
        false_positives += filter
            .contains_many(&batch)
            .await
            .expect("contains")
            .into_iter()
            .filter(|b| *b)
            .count() as u64;
    }
    let count = filter.count().await.expect("count");
    (false_positives as f64 / absent as f64, count)
}

/// The measurement: at the expected fill, the observed rate over 1 000 000 absent
/// items is within 10 % of the configured one (for 1 % and 0.1 %).
async fn the_false_positive_rate_is_the_configured_one(fx: Fixture) {
    for p in [0.01, 0.001] {
        let n = 100_000;
        let (observed, count) = measure(&fx.client, &format!("fp:{p}"), n, p).await;
        println!(
            "bloom ({}): n = {n}, configured p = {p}, observed {observed:.5} over 1 000 000 absent \
             items ({:+.1} %), count {count}",
            if fx.server.is_some() {
                "redis"
            } else {
                "memory"
            },
            (observed / p - 1.0) * 100.0
        );
        assert!(
            (observed / p - 1.0).abs() <= 0.10,
            "observed {observed} for a configured {p}"
        );
        assert!(
            (count as f64 / n as f64 - 1.0).abs() <= 0.03,
            "count {count} for {n} items"
        );
    }
}

/// Two services that disagree on a filter's size: the second one is refused, whatever it
/// changed; the same configuration opens the same filter.
async fn a_different_configuration_is_refused(fx: Fixture) {
    let open = |n: u64, p: f64| {
        fx.client
            .bloom_filter("users")
            .expected_items(n)
            .false_positive_rate(p)
            .open()
    };
    let first = open(10_000, 0.01).await.expect("create");
    assert_eq!(first.storage(), BloomStorage::Bitmaps);
    first.add("alice").await.expect("add");
    let other = fx.another_client().await;
    let same = other
        .bloom_filter("users")
        .expected_items(10_000)
        .false_positive_rate(0.01)
        .open()
        .await
        .expect("same configuration");
    assert!(same.contains("alice").await.expect("contains"));
    for (n, p) in [(20_000, 0.01), (10_000, 0.001)] {
        match open(n, p).await {
            Err(BloomError::ConfigMismatch {
                stored, requested, ..
            }) => {
                assert!(stored.contains("n=10000") && requested.contains(&format!("n={n}")));
            }
            other => panic!("expected ConfigMismatch, got {other:?}"),
        }
    }
    // Storage asked for against what exists.
    assert!(matches!(
        fx.client
            .bloom_filter("users")
            .expected_items(10_000)
            .storage(BloomStorage::RedisBloom)
            .open()
            .await,
        Err(BloomError::ConfigMismatch { .. })
    ));
}

/// Every shard of a filter with a ttl gets it at once, and they expire together; an add
/// afterwards starts the filter again, empty.
async fn a_ttl_expires_every_key_together(fx: Fixture) {
    let filter = fx
        .client
        .bloom_filter("sessions")
        .expected_items(2_000)
        .ttl(Duration::from_millis(600))
        .__shard_bits(4096)
        .open()
        .await
        .expect("open");
    assert!(filter.shards() >= 4, "{} shards", filter.shards());
    let items: Vec<String> = (0..200).map(|i| format!("s{i}")).collect();
    filter.add_many(&items).await.expect("add");
    let inspect = fx.client.__inspect();
    // Each shard's expiry, as an interval: the server read its ttl between the request and
    // the answer, so it expires between `asked + ttl` and `answered + ttl`. Read one after
    // another, the ttls fall with the time the reads take (a busy machine's reads took 24 ms
    // across five shards); the expiries do not. They are one if the intervals, widened by
    // the 20 ms a ttl may differ by, share an instant.
    let mut expiries = Vec::new();
    for shard in 0..filter.shards() {
        let key = format!("distlock:bloom:{{sessions%S{shard}}}");
        let asked = tokio::time::Instant::now();
        let ttl = inspect
            .pttl(&key)
            .await
            .expect("pttl")
            .expect("every shard has a ttl");
        expiries.push((asked + ttl, tokio::time::Instant::now() + ttl));
    }
    let latest_start = expiries.iter().map(|e| e.0).max().expect("shards");
    let earliest_end = expiries.iter().map(|e| e.1).min().expect("shards");
    assert!(
        latest_start <= earliest_end + Duration::from_millis(20),
        "the shards expire apart: {:?} after the earliest",
        latest_start - earliest_end
    );
    assert!(filter.contains("s7").await.expect("contains"));
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!filter.contains("s7").await.expect("contains"), "expired");
    assert!(filter.add("new").await.expect("add after expiry"));
    assert!(filter.contains("new").await.expect("contains"));
    assert!(!filter.contains("s8").await.expect("contains"));
}

/// Shards of 4096 bits: items spread over them, and the filter answers as one.
async fn a_sharded_filter_behaves_as_one(fx: Fixture) {
    let filter = fx
        .client
        .bloom_filter("sharded")
        .expected_items(20_000)
        .false_positive_rate(0.01)
        .__shard_bits(4096)
        .open()
        .await
        .expect("open");
    assert!(filter.shards() > 40, "{}", filter.shards());
    let items: Vec<String> = (0..20_000).map(|i| format!("item:{i}")).collect();
    let absent: Vec<String> = (0..20_000).map(|i| format!("other:{i}")).collect();
    let fp = add_and_count_false_positives(&filter, &items, &absent).await;
    assert!(fp < 20_000 * 2 / 100, "{fp} false positives of 20 000");
}

/// `count` estimates the distinct items added; `clear` empties the filter and keeps it
/// configured.
async fn count_estimates_and_clear_empties(fx: Fixture) {
    let filter = fx
        .client
        .bloom_filter("counted")
        .expected_items(50_000)
        .open()
        .await
        .expect("open");
    assert_eq!(filter.count().await.expect("count"), 0);
    let items: Vec<String> = (0..30_000).map(|i| format!("c{i}")).collect();
    filter.add_many(&items).await.expect("add");
    filter.add_many(&items[..1000]).await.expect("add again");
    let count = filter.count().await.expect("count");
    assert!(
        (29_000..=31_000).contains(&count),
        "count {count} for 30 000 distinct items"
    );
    filter.clear().await.expect("clear");
    assert_eq!(filter.count().await.expect("count"), 0);
    assert!(!filter.contains("c1").await.expect("contains"));
    assert!(filter.add("c1").await.expect("add"));
}

/// Every setting at 0, its bounds and beyond is a typed error, never a panic; odd items
/// (empty, binary, large) work.
async fn settings_at_their_bounds(fx: Fixture) {
    let filter_b = || fx.client.bloom_filter("b");
    let ten_items = || filter_b().expected_items(10);
    let builders = [
        filter_b(),
        filter_b().expected_items(0),
        filter_b().expected_items(u64::MAX),
        ten_items().false_positive_rate(0.0),
        ten_items().false_positive_rate(1.0),
        ten_items().false_positive_rate(f64::NAN),
        ten_items().ttl(Duration::ZERO),
        ten_items().ttl(Duration::MAX),
    ];
    let mut invalid = Vec::new();
    for builder in builders {
        invalid.push(builder.open().await.err());
    }
    for (i, err) in invalid.into_iter().enumerate() {
        assert!(
            matches!(err, Some(BloomError::InvalidConfig { .. })),
            "case {i}: {err:?}"
        );
    }
    assert!(matches!(
        fx.client.bloom_filter("").expected_items(10).open().await,
        Err(BloomError::InvalidName(_))
    ));
    let edge = fx
        .client
        .bloom_filter("edge{}%S1")
        .expected_items(1)
        .false_positive_rate(0.5)
        .ttl(MAX_TTL)
        .open()
        .await
        .expect("the smallest filter");
    let big = vec![0xFFu8; 100_000];
    for item in [&b""[..], &[0, 1, 2, 255], &big] {
        edge.add(item).await.expect("add");
        assert!(edge.contains(item).await.expect("contains"));
    }
    assert_eq!(
        edge.add_many(Vec::<String>::new()).await.expect("none"),
        Vec::<bool>::new()
    );
}

/// With the RedisBloom module loaded (`DISTLOCK_TEST_REDISBLOOM=/path/to/redisbloom.so`), a
/// new filter uses it, visibly, with the same checks and a ttl on both of its keys. Without
/// it, the test says so and checks that `Auto` chose bitmaps and `RedisBloom` is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_storage_with_the_module() {
    let Some(module) = std::env::var_os("DISTLOCK_TEST_REDISBLOOM") else {
        let server = RedisServer::start();
        let client = support::fixture::connect(&server.url()).await;
        let filter = client
            .bloom_filter("plain")
            .expected_items(100)
            .open()
            .await
            .expect("open");
        assert_eq!(filter.storage(), BloomStorage::Bitmaps);
        assert!(matches!(
            client
                .bloom_filter("plain2")
                .expected_items(100)
                .storage(BloomStorage::RedisBloom)
                .open()
                .await,
            Err(BloomError::ModuleMissing)
        ));
        println!(
            "RedisBloom is not configured (DISTLOCK_TEST_REDISBLOOM): the native storage was \
             not exercised; Auto chose bitmaps and RedisBloom was refused"
        );
        return;
    };
    let module = module.to_str().expect("a UTF-8 path").to_owned();
    let server = RedisServer::builder().arg("loadmodule", &module).start();
    let client = support::fixture::connect(&server.url()).await;
    let (observed, count) = measure(&client, "native-fp", 100_000, 0.01).await;
    println!("bloom (RedisBloom): observed {observed:.5} for 0.01, count {count}");
    // The module sizes a scalable filter's first layer for a tighter rate than asked (so that
    // the layers it may add keep the total under it): never worse than configured.
    assert!(observed <= 0.01 * 1.10, "observed {observed}");
    // It counts the adds that were new (a false positive while adding is not counted).
    assert!((99_000..=100_000).contains(&count), "count {count}");
    let filter = client
        .bloom_filter("native")
        .expected_items(1000)
        .ttl(Duration::from_secs(60))
        .open()
        .await
        .expect("open");
    assert_eq!(filter.storage(), BloomStorage::RedisBloom);
    assert!(filter.add("x").await.expect("add"));
    assert!(!filter.add("x").await.expect("add again"));
    assert!(filter.contains("x").await.expect("contains"));
    let inspect = client.__inspect();
    for key in ["distlock:bf:{native%S0}", "distlock:bf:{native%S0}:cfg"] {
        let ttl = inspect.pttl(key).await.expect("pttl");
        assert!(
            ttl.is_some_and(|t| t > Duration::from_secs(50)),
            "{key}: {ttl:?}"
        );
    }
    assert!(matches!(
        client
            .bloom_filter("native")
            .expected_items(2000)
            .open()
            .await,
        Err(BloomError::ConfigMismatch { .. })
    ));
    assert!(matches!(
        client
            .bloom_filter("native")
            .expected_items(1000)
            .storage(BloomStorage::Bitmaps)
            .open()
            .await,
        Err(BloomError::ConfigMismatch { .. })
    ));
    filter.clear().await.expect("clear");
    assert!(!filter.contains("x").await.expect("contains"));
}
