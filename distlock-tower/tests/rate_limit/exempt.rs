//! Exemptions (issue 28 §5): a skip predicate, an allow-list of keys and trusted networks let
//! requests through without a check, spending nothing of the budget; the response says why,
//! and every other request is limited as before. Over real TCP on both stores, and through
//! `oneshot` for the extension.

use distlock::ratelimit::{Policy, Rate, RateLimiter};
use distlock_tower::client_ip::ClientIp;
use distlock_tower::extract::Header;
use distlock_tower::rate_limit::{Checks, Exemption, RateLimitLayer};
use http::StatusCode;

use crate::app::{Fixture, call, http_client, on_both_stores, request_from, routes, serve};

on_both_stores!(
    skipped_and_trusted_requests_spend_nothing_over_tcp,
    allowed_keys_pass_and_others_are_limited,
    the_response_says_why_it_was_not_checked
);

/// One request per hour: the second counted request is refused.
fn one_per_hour(fx: &Fixture, name: &str) -> RateLimiter {
    fx.client
        .rate_limiter(Policy::gcra(name, Rate::per_hour(1).expect("rate")).expect("policy"))
        .build()
        .expect("limiter")
}

async fn skipped_and_trusted_requests_spend_nothing_over_tcp(fx: Fixture) {
    let layer = RateLimitLayer::builder(one_per_hour(&fx, "skip"), ClientIp::peer())
        .skip(|head| head.uri.path() == "/a")
        .build()
        .expect("layer");
    let (addr, _server) = serve(routes().layer(layer)).await;
    let http = http_client();
    let get = |path: &str| {
        let request = http.get(format!("http://{addr}{path}"));
        async move { request.send().await.expect("request") }
    };
    for _ in 0..5 {
        let response = get("/a").await;
        assert_eq!(response.status(), StatusCode::OK);
        assert!(
            response.headers().get("ratelimit").is_none(),
            "a skipped request is not described as checked"
        );
    }
    // The skipped requests spent nothing: the one request of the hour is still there.
    assert_eq!(get("/b").await.status(), StatusCode::OK);
    assert_eq!(get("/b").await.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(get("/a").await.status(), StatusCode::OK, "still skipped");

    // Loopback trusted: every request passes; a network the peer is not in changes nothing.
    let trusted = RateLimitLayer::builder(one_per_hour(&fx, "trusted"), ClientIp::peer())
        .allow_networks(["127.0.0.0/8".parse().expect("cidr")])
        .build()
        .expect("layer");
    let other = RateLimitLayer::builder(one_per_hour(&fx, "other"), ClientIp::peer())
        .allow_networks(["10.0.0.0/8".parse().expect("cidr")])
        .build()
        .expect("layer");
    let (trusted_addr, _t) = serve(routes().layer(trusted)).await;
    let (other_addr, _o) = serve(routes().layer(other)).await;
    for _ in 0..3 {
        let response = http
            .get(format!("http://{trusted_addr}/"))
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), StatusCode::OK);
    }
    let statuses: Vec<StatusCode> = {
        let mut statuses = Vec::new();
        for _ in 0..2 {
            let response = http
                .get(format!("http://{other_addr}/"))
                .send()
                .await
                .expect("request");
            statuses.push(response.status());
        }
        statuses
    };
    assert_eq!(statuses, [StatusCode::OK, StatusCode::TOO_MANY_REQUESTS]);
}

async fn allowed_keys_pass_and_others_are_limited(fx: Fixture) {
    let layer =
        RateLimitLayer::builder(one_per_hour(&fx, "keys"), Header::from_static("x-api-key"))
            .allow_keys(["internal"])
            .build()
            .expect("layer");
    let (addr, _server) = serve(routes().layer(layer)).await;
    let http = http_client();
    let status = |key: &'static str| {
        let request = http.get(format!("http://{addr}/")).header("x-api-key", key);
        async move { request.send().await.expect("request").status() }
    };
    for _ in 0..5 {
        assert_eq!(status("internal").await, StatusCode::OK);
    }
    assert_eq!(status("k1").await, StatusCode::OK);
    assert_eq!(status("k1").await, StatusCode::TOO_MANY_REQUESTS);
    // Exact match only: a key that merely starts like an allowed one is limited.
    assert_eq!(status("internal2").await, StatusCode::OK);
    assert_eq!(status("internal2").await, StatusCode::TOO_MANY_REQUESTS);
}

async fn the_response_says_why_it_was_not_checked(fx: Fixture) {
    let layer = RateLimitLayer::builder(one_per_hour(&fx, "why"), Header::from_static("x-api-key"))
        .skip(|head| head.headers.contains_key("x-monitor"))
        .allow_keys(["internal"])
        .allow_networks(["192.168.0.0/16".parse().expect("cidr")])
        .build()
        .expect("layer");
    let app = routes().layer(layer);
    let exemption = |response: &http::Response<axum::body::Body>| {
        response.extensions().get::<Exemption>().copied()
    };
    // Skipped before the key is read: no key needed.
    let response = call(&app, request_from("/", "10.0.0.1:1", &[("x-monitor", "1")])).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(exemption(&response), Some(Exemption::Skipped));
    let response = call(&app, request_from("/", "192.168.4.2:1", &[])).await;
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "no key, but a trusted peer"
    );
    assert_eq!(exemption(&response), Some(Exemption::TrustedNetwork));
    let response = call(
        &app,
        request_from("/", "10.0.0.1:1", &[("x-api-key", "internal")]),
    )
    .await;
    assert_eq!(exemption(&response), Some(Exemption::AllowedKey));
    assert!(response.extensions().get::<Checks>().is_none());
    // A checked request has its Check and no exemption.
    let response = call(
        &app,
        request_from("/", "10.0.0.1:1", &[("x-api-key", "k1")]),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(exemption(&response), None);
    assert!(response.extensions().get::<Checks>().is_some());
    // A request with neither key nor exemption is still refused as the layer says.
    let response = call(&app, request_from("/", "10.0.0.1:1", &[])).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}
