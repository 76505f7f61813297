//! Every configuration feature, answered over gRPC: matching (exact, key-only, nested, by
//! prefix, too deep), `unlimited`, `requests_per_unit: 0`, `shadow_mode`, `replaces`,
//! `hits_addend` (the request's and a descriptor's), `is_negative_hits`, a descriptor's own
//! limit, distlock's extensions (an algorithm with a burst, extra limits all or any, a
//! lockout, a hidden limit), the response headers and statuses, and exact totals under 64
//! concurrent callers. The same bodies on Redis, in memory and on a Cluster.

use std::time::Duration;

use distlock::Client;
use distlock_tower::rls::Settings;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::google::protobuf::UInt64Value;
use tonic::transport::Channel;

use crate::common::{ask, ask_one, descriptor, header, ok, oks, serve, server};
use crate::support::RedisServer;
use crate::support::fixture::{connect, shared_cluster_client};

/// Days keep a test's counts inside one fixed window (aligned to the epoch) unless it runs
/// across midnight UTC, a second in 86,400.
const CONFIG: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: day, requests_per_unit: 3 }
    descriptors:
      - key: path
        value: /login
        rate_limit: { unit: day, requests_per_unit: 2, name: login }
  - key: database
    value: users
    rate_limit: { unit: day, requests_per_unit: 5 }
  - key: path
    value: /api/*
    rate_limit: { unit: day, requests_per_unit: 1 }
  - key: generic_key
    value: free
    rate_limit: { unlimited: true }
  - key: generic_key
    value: closed
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: generic_key
    value: trial
    shadow_mode: true
    rate_limit: { unit: day, requests_per_unit: 1 }
  - key: tenant
    rate_limit: { unit: day, requests_per_unit: 100, replaces: [{ name: login }] }
  - key: api_key
    rate_limit: { unit: day, requests_per_unit: 1000 }
    distlock:
      algorithm: gcra
      burst: 4
      extra_limits: [{ unit: day, requests_per_unit: 6 }]
  - key: either
    rate_limit: { unit: day, requests_per_unit: 1 }
    distlock:
      extra_limits: [{ unit: day, requests_per_unit: 2 }]
      any_of: true
  - key: otp
    rate_limit: { unit: day, requests_per_unit: 2 }
    distlock: { lockout: ["1h"] }
  - key: internal
    rate_limit: { unit: day, requests_per_unit: 1 }
    distlock: { hidden: true }
  - key: totals
    rate_limit: { unit: day, requests_per_unit: 200 }
    distlock: { algorithm: gcra, burst: 200 }
"#;

/// The answer to `descriptors` in domain `edge`, one hit each.
async fn edge(
    c: &mut RateLimitServiceClient<Channel>,
    descriptors: Vec<RateLimitDescriptor>,
) -> RateLimitResponse {
    ask(c, "edge", descriptors, 0).await.expect("answer")
}

async fn every_feature(store: Client) {
    let served = serve(server(store, CONFIG, Settings::default())).await;
    let mut c = served.client.clone();
    let one = |entries: &[(&str, &str)]| vec![descriptor(entries)];

    // A key-only entry: any value, one counter per value.
    let first = one(&[("remote_address", "10.0.0.1")]);
    assert_eq!(oks(&mut c, "edge", &first, 3).await, [true; 3]);
    let over = ask_one(&mut c, "edge", &[("remote_address", "10.0.0.1")]).await;
    assert!(!ok(&over), "the fourth in the day");
    let status = &over.statuses[0];
    assert_eq!(status.code, Code::OverLimit as i32);
    assert_eq!(status.limit_remaining, 0);
    let current = status.current_limit.as_ref().expect("current limit");
    assert_eq!(
        (current.requests_per_unit, current.unit),
        (3, 4),
        "3 per DAY"
    );
    let reset = status.duration_until_reset.as_ref().expect("reset");
    assert!(reset.seconds <= 86_400, "{reset:?}");
    let other = ask_one(&mut c, "edge", &[("remote_address", "10.0.0.2")]).await;
    assert!(ok(&other), "another address has its own counter");

    // Nested: the whole descriptor reaches the deeper limit, with its own counter.
    let login = one(&[("remote_address", "10.0.0.9"), ("path", "/login")]);
    assert_eq!(oks(&mut c, "edge", &login, 3).await, [true, true, false]);
    let elsewhere = ask_one(
        &mut c,
        "edge",
        &[("remote_address", "10.0.0.9"), ("path", "/x")],
    )
    .await;
    assert_eq!(
        elsewhere.statuses[0].current_limit, None,
        "a value not configured at the deeper level: no limit"
    );
    // Deeper than the configuration: no limit.
    let deep = ask_one(&mut c, "edge", &[("database", "users"), ("x", "y")]).await;
    assert!(ok(&deep) && deep.statuses[0].current_limit.is_none());
    // An unknown domain: no limit, OK.
    assert!(ok(&ask_one(&mut c, "nowhere", &[("a", "b")]).await));

    // hits_addend: the request's, and a descriptor's own.
    let r = ask(
        &mut c,
        "edge",
        vec![descriptor(&[("database", "users")])],
        3,
    )
    .await
    .expect("answer");
    assert!(ok(&r));
    assert_eq!(r.statuses[0].limit_remaining, 2);
    let mut own = descriptor(&[("database", "users")]);
    own.hits_addend = Some(UInt64Value { value: 2 });
    let r = ask(&mut c, "edge", vec![own.clone()], 9)
        .await
        .expect("answer");
    assert!(ok(&r), "the descriptor's 2, not the request's 9");
    assert_eq!(r.statuses[0].limit_remaining, 0);
    let r = edge(&mut c, vec![descriptor(&[("database", "users")])]).await;
    assert!(!ok(&r));
    // is_negative_hits gives hits back.
    own.is_negative_hits = true;
    let r = edge(&mut c, vec![own]).await;
    assert!(ok(&r));
    let r = edge(&mut c, vec![descriptor(&[("database", "users")])]).await;
    assert!(ok(&r), "two hits were given back");

    // A prefix: `/api/*` takes `/api/v1/orders`.
    let api = [("path", "/api/v1/orders")];
    assert!(ok(&edge(&mut c, vec![descriptor(&api)]).await));
    assert!(!ok(&edge(&mut c, vec![descriptor(&api)]).await));

    // Unlimited: OK, the largest remaining; 0 per unit: never.
    for _ in 0..5 {
        let r = edge(&mut c, vec![descriptor(&[("generic_key", "free")])]).await;
        assert!(ok(&r));
        assert_eq!(r.statuses[0].limit_remaining, u32::MAX);
    }
    let closed = edge(&mut c, vec![descriptor(&[("generic_key", "closed")])]).await;
    assert!(!ok(&closed));

    // Shadow mode: over the limit, still OK.
    for _ in 0..3 {
        let r = edge(&mut c, vec![descriptor(&[("generic_key", "trial")])]).await;
        assert!(ok(&r), "shadow mode never refuses: {r:?}");
    }

    // Two descriptors: OVER_LIMIT if either is; each has its status.
    let both = edge(
        &mut c,
        vec![
            descriptor(&[("generic_key", "free")]),
            descriptor(&[("generic_key", "closed")]),
        ],
    )
    .await;
    assert!(!ok(&both));
    assert_eq!(both.statuses.len(), 2);
    assert_eq!(both.statuses[0].code, Code::Ok as i32);
    assert_eq!(both.statuses[1].code, Code::OverLimit as i32);

    // `replaces`: with the tenant's limit matched too, `login` does not apply.
    let login = [("remote_address", "10.0.0.33"), ("path", "/login")];
    for _ in 0..4 {
        let r = edge(
            &mut c,
            vec![descriptor(&login), descriptor(&[("tenant", "acme")])],
        )
        .await;
        assert!(ok(&r), "login (2 a day) is replaced: {r:?}");
    }

    // A descriptor's own limit: counted at that rate.
    let mut own = descriptor(&[("custom", "x")]);
    own.limit = Some(RateLimitOverride {
        requests_per_unit: 2,
        unit: 4,
    });
    for expected in [true, true, false] {
        let r = edge(&mut c, vec![own.clone()]).await;
        assert_eq!(ok(&r), expected);
    }

    // Extensions: GCRA with a burst of 4, and a second rate of 6 a day: all must allow.
    for expected in [true, true, true, true, false] {
        let r = edge(&mut c, vec![descriptor(&[("api_key", "k1")])]).await;
        assert_eq!(ok(&r), expected, "burst of 4: {r:?}");
    }
    // Any of two rates: 1 a day, then the second's 2.
    for expected in [true, true, true, false] {
        let r = edge(&mut c, vec![descriptor(&[("either", "e")])]).await;
        assert_eq!(ok(&r), expected);
    }
    // A lockout: the breach blocks for an hour; `duration_until_reset` says so.
    for _ in 0..2 {
        assert!(ok(&edge(&mut c, vec![descriptor(&[("otp", "u")])]).await));
    }
    let breach = edge(&mut c, vec![descriptor(&[("otp", "u")])]).await;
    assert!(!ok(&breach));
    let until = breach.statuses[0]
        .duration_until_reset
        .as_ref()
        .expect("reset");
    assert!(until.seconds > 3000, "locked out for the hour: {until:?}");

    // The headers tell of the visible limit with the fewest left; a hidden one is never in
    // them, nor named in its status.
    let r = edge(
        &mut c,
        vec![
            descriptor(&[("internal", "i")]),
            descriptor(&[("remote_address", "10.0.0.77")]),
        ],
    )
    .await;
    assert!(ok(&r));
    assert_eq!(header(&r, "x-ratelimit-limit"), Some("3, 3;w=86400"));
    assert_eq!(header(&r, "x-ratelimit-remaining"), Some("2"));
    let reset: u64 = header(&r, "x-ratelimit-reset")
        .expect("reset")
        .parse()
        .expect("secs");
    assert!(reset <= 86_400);
    assert_eq!(
        r.statuses[0].current_limit.as_ref().expect("limit").name,
        ""
    );
    let hidden_only = edge(&mut c, vec![descriptor(&[("internal", "j")])]).await;
    assert!(hidden_only.response_headers_to_add.is_empty());

    // Bad requests are INVALID_ARGUMENT.
    for (domain, descriptors) in [
        ("", vec![descriptor(&[("a", "b")])]),
        ("edge", vec![]),
        ("edge", vec![descriptor(&[])]),
    ] {
        let err = ask(&mut c, domain, descriptors, 0)
            .await
            .expect_err("refused");
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
    }
}

/// 64 callers at once, 10 requests each, against 200 a day: exactly 200 pass.
async fn exact_totals(store: Client) {
    let served = serve(server(store, CONFIG, Settings::default())).await;
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let mut c = served.client.clone();
            tokio::spawn(async move {
                let mut passed = 0;
                for _ in 0..10 {
                    let r = edge(&mut c, vec![descriptor(&[("totals", "t")])]).await;
                    passed += u32::from(ok(&r));
                }
                passed
            })
        })
        .collect();
    let mut passed = 0;
    for task in tasks {
        passed += task.await.expect("task");
    }
    assert_eq!(passed, 200, "exactly the limit passed");
}

/// `Settings::deny_cache` is 0 (none) by default: every check asks the store, so a subject the
/// store forgot (here: flushed) passes at once, not answered from a cache of its denials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_every_check_asks_the_store() {
    let redis = RedisServer::start();
    let served = serve(server(
        connect(&redis.url()).await,
        CONFIG,
        Settings::default(),
    ))
    .await;
    let mut c = served.client.clone();
    let api = [("path", "/api/orders")];
    assert!(
        ok(&ask_one(&mut c, "edge", &api).await),
        "the first of the day"
    );
    assert!(!ok(&ask_one(&mut c, "edge", &api).await), "the second");
    let mut conn = redis.conn().await;
    let () = redis::cmd("FLUSHALL")
        .query_async(&mut conn)
        .await
        .expect("flush");
    assert!(
        ok(&ask_one(&mut c, "edge", &api).await),
        "answered from a local cache of denials after the store forgot them"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis() {
    let redis = RedisServer::start();
    every_feature(connect(&redis.url()).await).await;
    exact_totals(connect(&redis.url()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory() {
    every_feature(Client::in_memory()).await;
    exact_totals(Client::in_memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster() {
    every_feature(shared_cluster_client("rls-answers").await).await;
    exact_totals(shared_cluster_client("rls-totals").await).await;
}

/// A request of two descriptors on the Cluster checks both, whichever masters their counts
/// live on, and answers within the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_answers_several_descriptors_at_once() {
    let served = serve(server(
        shared_cluster_client("rls-several").await,
        CONFIG,
        Settings::default(),
    ))
    .await;
    let mut c = served.client.clone();
    let descriptors: Vec<_> = (0..20)
        .map(|i| descriptor(&[("remote_address", &format!("10.1.0.{i}"))]))
        .collect();
    let started = std::time::Instant::now();
    let r = edge(&mut c, descriptors).await;
    assert!(ok(&r));
    assert_eq!(r.statuses.len(), 20);
    assert!(r.statuses.iter().all(|s| s.limit_remaining == 2));
    assert!(started.elapsed() < Duration::from_secs(10));
}
