//! TESTPLAN 30 for the lock layer: a duplicated, over-long, empty or non-text key header is
//! `400` under every missing-key setting; a request never runs unlocked by malforming its
//! key.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use distlock_tower::extract::Header;
use distlock_tower::lock::{HeldLock, LockLayer, MissingKey};
use http::{Request, StatusCode};
use tower::ServiceExt;

use crate::app::{Fixture, on_both_stores, text};
use crate::common::{malformed_key_requests, per_missing_key_setting};

on_both_stores!(malformed_key_headers_are_400_whatever_the_missing_key_setting);

async fn malformed_key_headers_are_400_whatever_the_missing_key_setting(fx: Fixture) {
    let calls = Arc::new(AtomicUsize::new(0));
    let app = |layer: LockLayer<Header>| {
        let calls = Arc::clone(&calls);
        Router::new()
            .route(
                "/",
                get(move |lock: Option<HeldLock>| async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    lock.map_or_else(|| "unlocked".to_owned(), |l| l.name().to_owned())
                }),
            )
            .route_layer(layer)
    };
    let apps = per_missing_key_setting(MissingKey::Reject, MissingKey::Allow, |missing| {
        let builder = LockLayer::builder(fx.client.clone(), Header::from_static("x-lock"));
        let layer = missing
            .into_iter()
            .fold(builder, |b, m| b.on_missing_key(m));
        app(layer.build().expect("valid settings"))
    });
    for (setting, app) in &apps {
        for (what, request) in malformed_key_requests("x-lock", b"k", b"j") {
            let response = app.clone().oneshot(request).await.expect("infallible");
            let status = response.status();
            let body = text(response).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{setting}: {what} key header answered {body:?}"
            );
            assert!(body.contains("key"), "{setting}: {what}: {body:?}");
        }
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no handler ran");
    // The absent header still follows the setting.
    let absent = || Request::get("/").body(Body::empty()).expect("request");
    let response = apps[2]
        .1
        .clone()
        .oneshot(absent())
        .await
        .expect("infallible");
    assert_eq!(text(response).await, "unlocked");
    let response = apps[1]
        .1
        .clone()
        .oneshot(absent())
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}
