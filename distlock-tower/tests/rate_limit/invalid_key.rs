//! TESTPLAN 30: an invalid key is not a missing one. A duplicated, over-long, empty or
//! non-text key header is `400` under every missing-key setting, and no request passes
//! unmetered by malforming its key.

use axum::body::Body;
use distlock_tower::extract::Header;
use distlock_tower::rate_limit::{MissingKey, RateLimitLayer};
use http::{Request, StatusCode};

use crate::app::{Fixture, call, gcra_limiter, header, on_both_stores, routes, text};
use crate::common::{malformed_key_requests, per_missing_key_setting};

on_both_stores!(malformed_key_headers_are_400_whatever_the_missing_key_setting);

async fn malformed_key_headers_are_400_whatever_the_missing_key_setting(fx: Fixture) {
    let limiter = gcra_limiter(&fx, "api", 60, 1);
    let apps = per_missing_key_setting(MissingKey::Reject, MissingKey::Allow, |missing| {
        let builder = RateLimitLayer::builder(limiter.clone(), Header::from_static("x-api-key"));
        let layer = missing
            .into_iter()
            .fold(builder, |b, m| b.on_missing_key(m));
        routes().layer(layer.build().expect("valid settings"))
    });
    for (setting, app) in &apps {
        // Many times over a budget of 1: none passes, metered or not.
        for round in 0..3 {
            for (what, request) in malformed_key_requests("x-api-key", b"alice", b"bob") {
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
