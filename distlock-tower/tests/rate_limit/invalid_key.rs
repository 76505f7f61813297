//! TESTPLAN 30: an invalid key is not a missing one. A duplicated, over-long, empty or
//! non-text key header is `400` under every missing-key setting, and no request passes
//! unmetered by malforming its key.

use axum::Router;
use axum::body::Body;
use distlock::ratelimit::{Policy, Rate};
use distlock_tower::extract::{Header, MAX_KEY_LEN};
use distlock_tower::rate_limit::{MissingKey, RateLimitLayer};
use http::{HeaderValue, Request, StatusCode};

use crate::app::{Fixture, call, header, on_both_stores, routes, text};

on_both_stores!(malformed_key_headers_are_400_whatever_the_missing_key_setting);

/// Requests whose `x-api-key` is present but unusable, each with what is wrong with it.
pub fn malformed_key_requests() -> Vec<(&'static str, Request<Body>)> {
    let with = |values: &[&[u8]]| {
        let mut request = Request::get("/").body(Body::empty()).expect("request");
        for value in values {
            let value = HeaderValue::from_bytes(value).expect("bytes HeaderValue accepts");
            request.headers_mut().append("x-api-key", value);
        }
        request
    };
    let long = "k".repeat(MAX_KEY_LEN + 1);
    vec![
        ("duplicated", with(&[b"alice", b"alice"])),
        ("duplicated, different", with(&[b"alice", b"bob"])),
        ("over-long", with(&[long.as_bytes()])),
        ("not text", with(&[b"\xff\xfe"])),
        ("not ASCII", with(&["caf\u{e9}".as_bytes()])),
        ("empty", with(&[b""])),
        ("whitespace only", with(&[b" \t "])),
    ]
}

async fn malformed_key_headers_are_400_whatever_the_missing_key_setting(fx: Fixture) {
    let policy = Policy::gcra(
        "api",
        Rate::per_minute(60).and_then(|r| r.burst(1)).expect("rate"),
    )
    .expect("policy");
    let limiter = fx
        .client
        .rate_limiter(policy)
        .build()
        .expect("valid limiter");
    let layer = |missing: Option<MissingKey>| {
        let builder = RateLimitLayer::builder(limiter.clone(), Header::from_static("x-api-key"));
        match missing {
            Some(missing) => builder.on_missing_key(missing),
            None => builder,
        }
        .build()
        .expect("valid settings")
    };
    let apps: [(&str, Router); 3] = [
        ("default", routes().layer(layer(None))),
        ("reject", routes().layer(layer(Some(MissingKey::Reject)))),
        ("allow", routes().layer(layer(Some(MissingKey::Allow)))),
    ];
    for (setting, app) in &apps {
        // Many times over a budget of 1: none passes, metered or not.
        for round in 0..3 {
            for (what, request) in malformed_key_requests() {
                let response = call(app, request).await;
                assert_eq!(
                    response.status(),
                    StatusCode::BAD_REQUEST,
                    "{setting}, round {round}: {what} key header"
                );
                assert!(
                    header(&response, "ratelimit").is_none(),
                    "{setting}: {what}"
                );
                assert!(text(response).await.contains("key"), "{setting}: {what}");
            }
        }
    }
    // The absent header still follows the setting.
    let absent = || Request::get("/").body(Body::empty()).expect("request");
    assert_eq!(
        call(&apps[1].1, absent()).await.status(),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(call(&apps[2].1, absent()).await.status(), StatusCode::OK);
}
