//! The layer through `ServiceExt::oneshot`, on both stores.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use distlock_tower::extract::{Header, MatchedPath};
use distlock_tower::lock::{BusyStatus, HeldLock, LockLayer, MissingKey};
use http::{Request, StatusCode};
use tower::{ServiceBuilder, ServiceExt};

use crate::app::{Fixture, Seen, TTL, app, call, layer, on_both_stores, retry_after, text};

on_both_stores!(
    busy_is_423_with_retry_after,
    busy_status_conflict_is_409,
    wait_serves_the_second_request_after_the_first,
    timed_out_wait_is_423_with_retry_after,
    handler_sees_increasing_fences,
    different_keys_do_not_block_each_other,
    missing_key_is_400_by_default,
    missing_key_can_pass_through_unlocked,
    key_too_long_for_a_lock_name_is_400,
    lease_lost_while_the_handler_runs_is_503,
    inner_error_passes_through_and_releases,
    empty_body_is_released_before_the_response,
    matched_path_locks_a_whole_route,
    hundred_concurrent_requests_run_one_at_a_time,
);

async fn busy_is_423_with_retry_after(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let app = app(layer(&fx), &seen);

    // The first response's body is not read: its request still holds the lock.
    let first = call(&app, "/orders/1").await;
    assert_eq!(first.status(), StatusCode::OK);
    assert!(!fx.is_free("http/order:1").await);

    let second = call(&app, "/orders/1").await;
    assert_eq!(second.status(), StatusCode::LOCKED);
    let secs = retry_after(&second);
    assert!((1..=TTL.as_secs()).contains(&secs), "Retry-After {secs}");
    assert_eq!(
        second.headers()[http::header::CONTENT_TYPE],
        "text/plain; charset=utf-8"
    );
    assert!(text(second).await.contains("locked"));
    assert_eq!(
        seen.calls.load(Ordering::SeqCst),
        1,
        "the refused request never reached the handler"
    );

    // Dropping the unread body (the client went away) releases in the background.
    drop(first);
    assert!(fx.wait_free("http/order:1", Duration::from_secs(2)).await);
    assert_eq!(call(&app, "/orders/1").await.status(), StatusCode::OK);
}

async fn busy_status_conflict_is_409(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let app = app(layer(&fx).busy_status(BusyStatus::Conflict), &seen);
    let _first = call(&app, "/orders/1").await;
    let second = call(&app, "/orders/1").await;
    assert_eq!(second.status(), StatusCode::CONFLICT);
    let secs = retry_after(&second);
    assert!((1..=TTL.as_secs()).contains(&secs), "Retry-After {secs}");
}

async fn wait_serves_the_second_request_after_the_first(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let app = app(layer(&fx).wait(Duration::from_secs(5)), &seen);

    // The first request holds the lock while its body is unread.
    let first = call(&app, "/orders/1").await;
    let second = tokio::spawn({
        let app = app.clone();
        async move {
            let response = call(&app, "/orders/1").await;
            (response.status(), text(response).await)
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "the second request did not wait");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);

    let released = Instant::now();
    let first_fence: u64 = text(first).await.parse().expect("fence");
    let (status, body) = second.await.expect("second request");
    let woken_after = released.elapsed();
    assert_eq!(status, StatusCode::OK, "{body}");
    let second_fence: u64 = body.parse().expect("fence");
    assert!(
        second_fence > first_fence,
        "fences {first_fence} then {second_fence}"
    );
    // Woken by the release, not by the 5 s ttl running out.
    assert!(
        woken_after < Duration::from_secs(2),
        "woken {woken_after:?} after the release"
    );
}

async fn timed_out_wait_is_423_with_retry_after(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let app = app(layer(&fx).wait(Duration::from_millis(200)), &seen);
    let _first = call(&app, "/orders/1").await;
    let started = Instant::now();
    let second = call(&app, "/orders/1").await;
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "did not wait"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "waited too long: {:?}",
        started.elapsed()
    );
    assert_eq!(second.status(), StatusCode::LOCKED);
    let secs = retry_after(&second);
    assert!((1..=TTL.as_secs()).contains(&secs), "Retry-After {secs}");
}

async fn handler_sees_increasing_fences(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let app = app(layer(&fx), &seen);
    let mut last = 0;
    // Back to back, no wait configured: reading a body to its end releases the lock before
    // the end reaches the client, so none of these is refused.
    for _ in 0..10 {
        let response = call(&app, "/orders/7").await;
        assert_eq!(response.status(), StatusCode::OK);
        let fence: u64 = text(response).await.parse().expect("fence");
        assert!(fence > last, "fence {fence} after {last}");
        last = fence;
        assert!(
            fx.is_free("http/order:7").await,
            "released once the body was read"
        );
    }
}

async fn different_keys_do_not_block_each_other(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let app = app(layer(&fx), &seen);
    let _one = call(&app, "/orders/1").await;
    let two = call(&app, "/orders/2").await;
    assert_eq!(two.status(), StatusCode::OK);
    assert_eq!(call(&app, "/orders/1").await.status(), StatusCode::LOCKED);
}

fn header_app(layer: LockLayer<Header>) -> Router {
    Router::new()
        .route(
            "/",
            get(|lock: Option<HeldLock>| async move {
                lock.map_or_else(|| "unlocked".to_owned(), |l| l.name().to_owned())
            }),
        )
        .route_layer(layer)
}

fn with_key(key: Option<&str>) -> Request<Body> {
    let mut request = Request::get("/");
    if let Some(key) = key {
        request = request.header("x-lock", key);
    }
    request.body(Body::empty()).expect("valid request")
}

async fn missing_key_is_400_by_default(fx: Fixture) {
    let app = header_app(LockLayer::new(
        fx.client.clone(),
        Header::from_static("x-lock"),
    ));
    let response = app
        .clone()
        .oneshot(with_key(None))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let response = app.oneshot(with_key(Some("k"))).await.expect("infallible");
    assert_eq!(text(response).await, "http/k");
}

async fn missing_key_can_pass_through_unlocked(fx: Fixture) {
    let app = header_app(
        LockLayer::builder(fx.client.clone(), Header::from_static("x-lock"))
            .on_missing_key(MissingKey::Allow)
            .build()
            .expect("valid settings"),
    );
    let response = app
        .clone()
        .oneshot(with_key(None))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(text(response).await, "unlocked");
    // A key still takes the lock.
    let held = app
        .clone()
        .oneshot(with_key(Some("k")))
        .await
        .expect("infallible");
    let busy = app.oneshot(with_key(Some("k"))).await.expect("infallible");
    assert_eq!(busy.status(), StatusCode::LOCKED);
    drop(held);
}

async fn key_too_long_for_a_lock_name_is_400(fx: Fixture) {
    let long = |_: &Request<Body>| Some("k".repeat(distlock::MAX_NAME_LEN + 1));
    let app = Router::new()
        .route("/", get(|| async { "ran" }))
        .route_layer(
            LockLayer::builder(fx.client.clone(), long)
                .on_missing_key(MissingKey::Allow)
                .build()
                .expect("valid settings"),
        );
    let response = app.oneshot(with_key(None)).await.expect("infallible");
    // Never unlocked: an unusable key is not a missing one.
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}

async fn lease_lost_while_the_handler_runs_is_503(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    // No watchdog: the lease is lost at its safety deadline, just under 300 ms.
    let app = app(
        layer(&fx).ttl(Duration::from_millis(300)).watchdog(false),
        &seen,
    );
    let started = Instant::now();
    let response = call(&app, "/slow/1/3000").await;
    let elapsed = started.elapsed();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(text(response).await.contains("lost"));
    assert!(
        elapsed < Duration::from_millis(1500),
        "answered after {elapsed:?}"
    );
    assert!(
        seen.cancelled.load(Ordering::SeqCst),
        "the handler was dropped"
    );
}

async fn inner_error_passes_through_and_releases(fx: Fixture) {
    let service = ServiceBuilder::new()
        .layer(LockLayer::new(fx.client.clone(), |_: &Request<Body>| {
            Some("job".to_owned())
        }))
        .service_fn(|request: Request<Body>| async move {
            assert!(request.extensions().get::<HeldLock>().is_some());
            Err::<http::Response<Body>, _>("inner failure")
        });
    let result = service.oneshot(with_key(None)).await;
    assert_eq!(result.err(), Some("inner failure"));
    assert!(
        fx.wait_free("http/job", Duration::from_secs(2)).await,
        "released after the error"
    );
}

async fn empty_body_is_released_before_the_response(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let app = app(layer(&fx), &seen);
    let first = call(&app, "/empty/1").await;
    assert_eq!(first.status(), StatusCode::NO_CONTENT);
    // Nothing to stream, so the lock was released before the response was returned, even
    // though its (empty) body has not been polled.
    assert!(fx.is_free("http/order:1").await);
    assert_eq!(
        call(&app, "/empty/1").await.status(),
        StatusCode::NO_CONTENT
    );
    drop(first);
}

async fn matched_path_locks_a_whole_route(fx: Fixture) {
    let app = Router::new()
        .route(
            "/a/{x}",
            get(|lock: HeldLock| async move { lock.name().to_owned() }),
        )
        .route("/b/{x}", get(|| async { "b" }))
        .layer(LockLayer::new(fx.client.clone(), MatchedPath));
    let held = app
        .clone()
        .oneshot(get_request("/a/1"))
        .await
        .expect("infallible");
    assert_eq!(held.status(), StatusCode::OK);
    let same_route = app
        .clone()
        .oneshot(get_request("/a/2"))
        .await
        .expect("infallible");
    assert_eq!(same_route.status(), StatusCode::LOCKED);
    let other_route = app
        .clone()
        .oneshot(get_request("/b/1"))
        .await
        .expect("infallible");
    assert_eq!(other_route.status(), StatusCode::OK);
    assert_eq!(text(held).await, "http//a/{x}");
}

fn get_request(uri: &str) -> Request<Body> {
    Request::get(uri)
        .body(Body::empty())
        .expect("valid request")
}

async fn hundred_concurrent_requests_run_one_at_a_time(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let app = app(layer(&fx).wait(Duration::from_secs(60)), &seen);
    let started = Instant::now();
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move {
                let response = call(&app, "/count/1").await;
                (response.status(), text(response).await)
            })
        })
        .collect();
    seen.assert_ran_one_at_a_time(tasks).await;
    eprintln!("100 serialized requests in {:?}", started.elapsed());
}

#[tokio::test]
async fn held_lock_without_the_layer_is_a_500() {
    let app: Router = Router::new().route(
        "/",
        get(|lock: HeldLock| async move { lock.fence().await.expect("fence").to_string() }),
    );
    let response = app.oneshot(get_request("/")).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(text(response).await.contains("LockLayer"));
}
