//! Layers built from their configuration (`distlock_tower::config`, feature `serde`), over
//! real TCP, on both stores: what the TOML says is what a client gets.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use distlock_tower::config::{LockLayerConfig, RateLimitLayerConfig};
use http::StatusCode;

use crate::app::{Fixture, gcra_limiter, http_client, on_both_stores, routes, serve};

on_both_stores!(
    a_rate_limit_layer_from_toml_meters_its_header_key_at_its_cost,
    a_lock_layer_from_toml_locks_its_path_key_and_answers_its_status
);

/// Key from a header under a prefix, a cost of 2 against a burst of 4, and requests without
/// the header let through unmetered: two requests per key pass, the third is `429`; another
/// key has its own budget; the budget is kept under the prefixed key.
async fn a_rate_limit_layer_from_toml_meters_its_header_key_at_its_cost(fx: Fixture) {
    let config: RateLimitLayerConfig = toml::from_str(
        r#"
        key = { from = "header", name = "x-api-key" }
        key_prefix = "tenant:"
        cost = 2
        on_missing_key = "allow"
        legacy_headers = true
        "#,
    )
    .expect("the layer's configuration parses");
    let limiter = gcra_limiter(&fx, "from-config", 4, 4);
    let layer = config.layer(limiter.clone()).expect("the layer builds");
    let (addr, _server) = serve(routes().layer(layer)).await;
    let http = http_client();
    let get = |key: Option<&'static str>| {
        let mut request = http.get(format!("http://{addr}/"));
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        async move { request.send().await.expect("request") }
    };

    for round in 0..2 {
        let response = get(Some("alice")).await;
        assert_eq!(response.status(), StatusCode::OK, "alice, round {round}");
        assert!(
            response.headers().contains_key("x-ratelimit-remaining"),
            "legacy headers are on"
        );
    }
    assert_eq!(
        get(Some("alice")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(get(Some("bob")).await.status(), StatusCode::OK);
    for _ in 0..5 {
        assert_eq!(
            get(None).await.status(),
            StatusCode::OK,
            "no key: unmetered"
        );
    }
    let spent = limiter.peek("tenant:alice").await.expect("peek");
    assert!(!spent.allowed, "the budget is spent under the prefixed key");
    let untouched = limiter.peek("alice").await.expect("peek");
    assert!(untouched.allowed, "nothing was spent under the bare key");
}

/// Key from the second path segment under a prefix, `409` for a busy key: a request for an
/// order whose lock another holder has is `409`, another order passes, and once the holder
/// releases it the first passes too.
async fn a_lock_layer_from_toml_locks_its_path_key_and_answers_its_status(fx: Fixture) {
    let config: LockLayerConfig = toml::from_str(
        r#"
        key = { from = "path-segment", index = 1 }
        key_prefix = "order:"
        ttl = "10s"
        wait = "0s"
        busy_status = "conflict"
        "#,
    )
    .expect("the layer's configuration parses");
    let layer = config.layer(fx.client.clone()).expect("the layer builds");
    let app = Router::new()
        .route("/orders/{id}", get(|| async { "settled" }))
        .layer(layer);
    let (addr, _server) = serve(app).await;
    let http = http_client();
    let status = |id: u32| {
        let request = http.get(format!("http://{addr}/orders/{id}"));
        async move { request.send().await.expect("request").status() }
    };

    let held = fx
        .client
        .lock("http/order:42")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("the test holds order 42");
    assert_eq!(status(42).await, StatusCode::CONFLICT);
    assert_eq!(status(7).await, StatusCode::OK);
    held.release().await.expect("release");
    assert_eq!(status(42).await, StatusCode::OK);
}

/// A rate-limit layer holds a built limiter, so its doors take a limiter's options where the
/// limiter is made, and refuse a bad one there, under the option's name: in code, through
/// `RateLimiterBuilder` (`LimiterOptions::check`); in a service's file, where its limiter
/// table is read beside the layer's.
#[test]
fn a_limiter_option_is_refused_by_name_at_either_door_of_a_layer() {
    use distlock::ratelimit::{LimiterOptions, Policy, Rate};
    use distlock::{InvalidPolicy, RateLimitError};

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct ServiceFile {
        distlock: distlock::config::Config,
        layers: std::collections::HashMap<String, RateLimitLayerConfig>,
    }

    let client = distlock::Client::in_memory();
    let policy = Policy::gcra("api", Rate::per_second(10).expect("rate")).expect("policy");
    for (line, field, options) in [
        (
            "deadline = \"0s\"",
            "deadline",
            LimiterOptions::new().deadline(Duration::ZERO),
        ),
        (
            "max_in_flight = 0",
            "max_in_flight",
            LimiterOptions::new().max_in_flight(0),
        ),
    ] {
        match client.rate_limiter(policy.clone()).options(options).build() {
            Err(RateLimitError::InvalidPolicy(InvalidPolicy::LimiterOption(invalid))) => {
                assert_eq!(invalid.field(), field);
            }
            other => panic!("{field}: {other:?}"),
        }
        let text = format!(
            "[distlock.client]\nmemory = true\n[distlock.limiters.api]\npolicies = \"10/s\"\n\
             {line}\n[layers.api]\nkey = {{ from = \"header\", name = \"x-api-key\" }}\n"
        );
        let err = toml::from_str::<ServiceFile>(&text)
            .err()
            .expect("refused")
            .message()
            .to_owned();
        assert!(err.contains(&format!("limiters.api.{field}`")), "{err}");
    }
}
