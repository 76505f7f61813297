//! The layer through `ServiceExt::oneshot`, on both stores.

use std::time::Duration;

use distlock::ratelimit::{Policy, Rate};
use distlock_tower::client_ip::{Cidr, ClientIp};
use distlock_tower::extract::Header;
use distlock_tower::rate_limit::{MissingKey, RateLimitLayer};
use http::StatusCode;
use rand::Rng;

use crate::app::{
    Fixture, PEER, call, fields, gcra, gcra_limiter, header, on_both_stores, request_from,
    retry_after, routes, text,
};

on_both_stores!(
    allowed_and_refused_responses_carry_the_fields,
    retry_after_is_whole_seconds_rounded_up_never_zero,
    several_policies_are_listed_in_both_fields,
    legacy_fields_when_asked,
    wait_mode_delays_instead_of_refusing,
    a_dropped_waiting_request_consumes_nothing,
    missing_key_is_refused_or_unmetered,
    per_route_policies_from_one_layer,
    shadow_mode_never_refuses,
    random_forwarded_headers_from_one_peer_share_one_bucket,
    an_any_of_limiter_passes_on_either_policy,
);

async fn allowed_and_refused_responses_carry_the_fields(fx: Fixture) {
    let limiter = gcra_limiter(&fx, "api", 60, 3);
    let app = routes().layer(RateLimitLayer::new(limiter, ClientIp::peer()));
    for left in (0..3).rev() {
        let response = call(&app, request_from("/", PEER, &[])).await;
        assert_eq!(response.status(), StatusCode::OK);
        let (policy, state) = fields(&response);
        assert_eq!(policy.len(), 1);
        assert_eq!(policy[0].0, "api");
        assert_eq!(policy[0].1["q"], 60, "the rate: 60 ...");
        assert_eq!(policy[0].1["w"], 60, "... per 60 s");
        assert_eq!(policy[0].1["distlock-burst"], 3, "3 at once");
        assert_eq!(state[0].0, "api");
        assert_eq!(state[0].1["r"], left);
        assert!((1..=3).contains(&state[0].1["t"]));
        assert!(header(&response, "retry-after").is_none());
        assert_eq!(text(response).await, "root");
    }
    let refused = call(&app, request_from("/", PEER, &[])).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&refused), 1);
    let (policy, state) = fields(&refused);
    assert_eq!((policy[0].1["q"], policy[0].1["distlock-burst"]), (60, 3));
    assert_eq!(state[0].1["r"], 0);
    assert_eq!(
        header(&refused, "content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert!(text(refused).await.contains("too many requests"));
    // Another client has its own bucket.
    let other = call(&app, request_from("/", "198.51.100.1:1", &[])).await;
    assert_eq!(other.status(), StatusCode::OK);
}

async fn retry_after_is_whole_seconds_rounded_up_never_zero(fx: Fixture) {
    // 100 per second, burst 1: the wait is ~10 ms, which must be sent as 1, not 0.
    let rate = Rate::per_second(100)
        .and_then(|r| r.burst(1))
        .expect("valid");
    let fast = fx
        .client
        .rate_limiter(Policy::gcra("fast", rate).expect("valid"))
        .build()
        .expect("valid limiter");
    let app = routes().layer(RateLimitLayer::new(fast, ClientIp::peer()));
    // Back to back, the second request is refused unless 10 ms passed between the two (a
    // busy machine): ask until one is refused, which a burst of 1 makes quick.
    let mut refused = call(&app, request_from("/", PEER, &[])).await;
    for _ in 0..1000 {
        if refused.status() != StatusCode::OK {
            break;
        }
        refused = call(&app, request_from("/", PEER, &[])).await;
    }
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&refused), 1);

    // 2 per minute, burst 1: the wait is ~30 s, rounded up (29.99... → 30).
    let slow = gcra_limiter(&fx, "slow", 2, 1);
    let app = routes().layer(RateLimitLayer::new(slow, ClientIp::peer()));
    call(&app, request_from("/", PEER, &[])).await;
    let refused = call(&app, request_from("/", PEER, &[])).await;
    assert_eq!(retry_after(&refused), 30);
}

async fn several_policies_are_listed_in_both_fields(fx: Fixture) {
    let limiter = fx
        .client
        .rate_limiter_all([
            gcra("burst", 60, 2),
            Policy::fixed_window("daily", Rate::per_day(1000).expect("valid")).expect("valid"),
        ])
        .build()
        .expect("valid");
    let app = routes().layer(RateLimitLayer::new(limiter, ClientIp::peer()));
    let response = call(&app, request_from("/", PEER, &[])).await;
    let (policy, state) = fields(&response);
    let names: Vec<&str> = policy.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["burst", "daily"]);
    assert_eq!((policy[1].1["q"], policy[1].1["w"]), (1000, 86_400));
    assert_eq!((state[0].1["r"], state[1].1["r"]), (1, 999));
}

async fn legacy_fields_when_asked(fx: Fixture) {
    let limiter = gcra_limiter(&fx, "api", 60, 2);
    let app = routes().layer(
        RateLimitLayer::builder(limiter, ClientIp::peer())
            .legacy_headers(true)
            .ietf_headers(false)
            .build()
            .expect("valid settings"),
    );
    let response = call(&app, request_from("/", PEER, &[])).await;
    assert_eq!(header(&response, "x-ratelimit-limit"), Some("2"));
    assert_eq!(header(&response, "x-ratelimit-remaining"), Some("1"));
    assert_eq!(header(&response, "x-ratelimit-reset"), Some("1"));
    assert!(header(&response, "ratelimit").is_none());
    assert!(header(&response, "ratelimit-policy").is_none());
}

async fn wait_mode_delays_instead_of_refusing(fx: Fixture) {
    // 10 per second, burst 1: the second request is allowed ~100 ms after the first.
    let rate = Rate::per_second(10)
        .and_then(|r| r.burst(1))
        .expect("valid");
    let limiter = fx
        .client
        .rate_limiter(Policy::gcra("queue", rate).expect("valid"))
        .build()
        .expect("valid limiter");
    let waiting = routes().layer(
        RateLimitLayer::builder(limiter.clone(), ClientIp::peer())
            .wait(Duration::from_millis(500))
            .build()
            .expect("valid settings"),
    );
    assert_eq!(
        call(&waiting, request_from("/", PEER, &[])).await.status(),
        StatusCode::OK
    );
    let start = tokio::time::Instant::now();
    let response = call(&waiting, request_from("/", PEER, &[])).await;
    let waited = start.elapsed();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "waited instead of refusing"
    );
    assert!(
        waited >= Duration::from_millis(60),
        "passed after {waited:?}: it did not wait"
    );
    // A wait longer than allowed is refused at once.
    let impatient = routes().layer(
        RateLimitLayer::builder(limiter, ClientIp::peer())
            .wait(Duration::from_millis(5))
            .build()
            .expect("valid settings"),
    );
    let response = call(&impatient, request_from("/", PEER, &[])).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
}

/// Cancel safety: a request waiting in wait mode that is dropped gives its turn back (the
/// refund goes out in the background), so in the end it has consumed nothing.
async fn a_dropped_waiting_request_consumes_nothing(fx: Fixture) {
    let rate = Rate::per(1, Duration::from_secs(2)).expect("valid");
    let limiter = fx
        .client
        .rate_limiter(Policy::gcra("drop", rate).expect("valid"))
        .build()
        .expect("valid limiter");
    let app = routes().layer(
        RateLimitLayer::builder(limiter.clone(), ClientIp::peer())
            .wait(Duration::from_secs(5))
            .build()
            .expect("valid settings"),
    );
    assert_eq!(
        call(&app, request_from("/", PEER, &[])).await.status(),
        StatusCode::OK
    );
    for _ in 0..3 {
        let dropped = tokio::time::timeout(
            Duration::from_millis(100),
            call(&app, request_from("/", PEER, &[])),
        )
        .await;
        assert!(dropped.is_err(), "the request was waiting, not answered");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let peek = limiter.peek("203.0.113.9").await.expect("peek");
    assert!(
        peek.reset_after <= Duration::from_secs(2),
        "the dropped requests consumed: {:?} until full",
        peek.reset_after
    );
}

async fn missing_key_is_refused_or_unmetered(fx: Fixture) {
    let limiter = gcra_limiter(&fx, "api", 60, 1);
    let strict = routes().layer(RateLimitLayer::new(
        limiter.clone(),
        Header::from_static("x-api-key"),
    ));
    let response = call(&strict, request_from("/", PEER, &[])).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let lenient = routes().layer(
        RateLimitLayer::builder(limiter, Header::from_static("x-api-key"))
            .on_missing_key(MissingKey::Allow)
            .build()
            .expect("valid settings"),
    );
    for _ in 0..3 {
        let response = call(&lenient, request_from("/", PEER, &[])).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert!(header(&response, "ratelimit").is_none(), "unmetered");
    }
}

async fn per_route_policies_from_one_layer(fx: Fixture) {
    let default = gcra_limiter(&fx, "default", 60, 3);
    let strict = gcra_limiter(&fx, "route-a", 60, 1);
    let items = gcra_limiter(&fx, "route-items", 60, 2);
    let app = routes().layer(
        RateLimitLayer::builder(default, ClientIp::peer())
            .route("/a", strict)
            .route("/items/{id}", items)
            .build()
            .expect("valid settings"),
    );
    let status = |uri: &'static str| {
        let app = app.clone();
        async move { call(&app, request_from(uri, PEER, &[])).await.status() }
    };
    assert_eq!(status("/a").await, StatusCode::OK);
    assert_eq!(status("/a").await, StatusCode::TOO_MANY_REQUESTS);
    // Any item counts against the same route budget.
    assert_eq!(status("/items/1").await, StatusCode::OK);
    assert_eq!(status("/items/2").await, StatusCode::OK);
    assert_eq!(status("/items/3").await, StatusCode::TOO_MANY_REQUESTS);
    // Everything else shares the default.
    for _ in 0..3 {
        assert_eq!(status("/b").await, StatusCode::OK);
    }
    assert_eq!(status("/").await, StatusCode::TOO_MANY_REQUESTS);
    let response = call(&app, request_from("/a", PEER, &[])).await;
    assert_eq!(fields(&response).0[0].0, "route-a");
}

async fn shadow_mode_never_refuses(fx: Fixture) {
    let limiter = fx
        .client
        .rate_limiter(gcra("api", 60, 1))
        .shadow(true)
        .build()
        .expect("valid limiter");
    let app = routes().layer(RateLimitLayer::new(limiter, ClientIp::peer()));
    for i in 0..4 {
        let response = call(&app, request_from("/", PEER, &[])).await;
        assert_eq!(response.status(), StatusCode::OK, "request {i}");
        assert_eq!(fields(&response).1[0].1["r"], 0);
    }
}

/// TESTPLAN 21: 1000 requests from one untrusted peer with random `X-Forwarded-For`
/// values (the layer trusts 10.0.0.0/8 only) all count against the peer: exactly the limit
/// passes.
async fn random_forwarded_headers_from_one_peer_share_one_bucket(fx: Fixture) {
    let limiter = gcra_limiter(&fx, "per-ip", 10, 10);
    let trusted: Cidr = "10.0.0.0/8".parse().expect("valid CIDR");
    let app = routes().layer(RateLimitLayer::new(limiter, ClientIp::trusting([trusted])));
    let mut passed = 0;
    for _ in 0..1000 {
        let spoofed = {
            let mut rng = rand::rng();
            let hops: Vec<String> = (0..rng.random_range(1..4))
                .map(|_| {
                    format!(
                        "{}.{}.{}.{}",
                        rng.random::<u8>(),
                        rng.random::<u8>(),
                        rng.random::<u8>(),
                        rng.random::<u8>()
                    )
                })
                .collect();
            hops.join(", ")
        };
        let response = call(
            &app,
            request_from("/", PEER, &[("x-forwarded-for", &spoofed)]),
        )
        .await;
        passed += usize::from(response.status() == StatusCode::OK);
    }
    assert_eq!(passed, 10);
}

/// The layer takes an any-of limiter (issue 28 §4) like any other: the steady rate passes
/// one, the burst budget two more, then a 429 whose `Retry-After` is the sooner of the two
/// waits (the budget's 30 minutes, not the steady rate's hour).
async fn an_any_of_limiter_passes_on_either_policy(fx: Fixture) {
    let limiter = fx
        .client
        .rate_limiter_any([
            Policy::gcra("steady", Rate::per_hour(1).expect("rate")).expect("policy"),
            Policy::gcra("burst", Rate::per_hour(2).expect("rate")).expect("policy"),
        ])
        .build()
        .expect("valid limiter");
    let app = routes().layer(RateLimitLayer::new(limiter, ClientIp::peer()));
    for _ in 0..3 {
        let response = call(&app, request_from("/", PEER, &[])).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(fields(&response).0.len(), 2, "both policies are listed");
    }
    let refused = call(&app, request_from("/", PEER, &[])).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        (1790..=1800).contains(&retry_after(&refused)),
        "{}",
        retry_after(&refused)
    );
}
