//! Per-policy visibility (issue 45 §2): a hidden policy counts and refuses, but no field, no
//! problem document and no header names it; a visible policy that refuses is named.

use distlock::ratelimit::{Policy, Rate};
use distlock_tower::client_ip::ClientIp;
use distlock_tower::rate_limit::RateLimitLayer;
use distlock_tower::refusal::{ProblemDetails, Refusal};
use http::StatusCode;
use serde_json::Value;

use crate::app::{Fixture, call, fields, request_from, routes, text};
use crate::support::fixture::on_both_stores;

on_both_stores!(
    a_hidden_policy_refuses_without_being_named,
    a_visible_policy_that_refuses_is_named,
);

const PEER: &str = "203.0.113.40:1";

fn limiter(fx: &Fixture) -> distlock::ratelimit::RateLimiter {
    fx.client
        .rate_limiter_all([
            Policy::gcra("public", Rate::per_minute(100).expect("rate")).expect("policy"),
            Policy::fixed_window("abuse-guard", Rate::per_hour(2).expect("rate")).expect("policy"),
        ])
        .build()
        .expect("limiter")
}

async fn a_hidden_policy_refuses_without_being_named(fx: Fixture) {
    let app = routes().layer(
        RateLimitLayer::builder(limiter(&fx), ClientIp::peer())
            .hide_policies(["abuse-guard"])
            .legacy_headers(true)
            .refusal(ProblemDetails::new())
            .build()
            .expect("valid settings"),
    );
    for _ in 0..2 {
        let passed = call(&app, request_from("/", PEER, &[])).await;
        assert_eq!(passed.status(), StatusCode::OK);
        let (policy, state) = fields(&passed);
        assert_eq!(policy.len(), 1, "{policy:?}");
        assert_eq!(policy[0].0, "public");
        assert!(state.iter().all(|m| m.0 == "public"), "{state:?}");
        assert_eq!(passed.headers()["x-ratelimit-limit"], "100");
    }
    let refused = call(&app, request_from("/", PEER, &[])).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let why = refused
        .extensions()
        .get::<Refusal>()
        .expect("refusal")
        .clone();
    assert_eq!(why.policy(), None, "not named to the client");
    assert_eq!(
        why.decision().map(|d| &*d.policy),
        Some("abuse-guard"),
        "named for logs"
    );
    let all_headers = format!("{:?}", refused.headers());
    assert!(!all_headers.contains("abuse-guard"), "{all_headers}");
    let body: Value = serde_json::from_str(&text(refused).await).expect("JSON");
    assert!(body.get("policy").is_none(), "{body}");
    assert!(!body.to_string().contains("abuse-guard"), "{body}");
}

async fn a_visible_policy_that_refuses_is_named(fx: Fixture) {
    let app = routes().layer(
        RateLimitLayer::builder(limiter(&fx), ClientIp::peer())
            .refusal(ProblemDetails::new())
            .build()
            .expect("valid settings"),
    );
    for _ in 0..2 {
        assert_eq!(
            call(&app, request_from("/", PEER, &[])).await.status(),
            StatusCode::OK
        );
    }
    let refused = call(&app, request_from("/", PEER, &[])).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let (policy, _) = fields(&refused);
    assert_eq!(policy.len(), 2);
    let body: Value = serde_json::from_str(&text(refused).await).expect("JSON");
    assert_eq!(body["policy"], "abuse-guard", "{body}");
}
