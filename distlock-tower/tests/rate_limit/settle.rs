//! Costs settled after the response (`settle`, `refund_on`), on both stores: a failed
//! response's cost comes back, a large one is charged by its size, and a body the client
//! drops settles as not completed.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use bytes::Bytes;
use distlock::ratelimit::RateLimiter;
use distlock_tower::extract::Header;
use distlock_tower::rate_limit::{RateLimitLayer, Settlement};
use futures_util::StreamExt;
use http::StatusCode;
use http_body_util::BodyExt;

use crate::app::{
    Fixture, PEER, call, gcra, gcra_limiter, http_client, on_both_stores, request_from, serve,
};

on_both_stores!(
    refund_on_gives_back_what_failed_responses_cost,
    settle_charges_a_response_by_its_size,
    a_dropped_body_settles_as_not_completed,
    empty_and_head_responses_settle_as_completed,
    what_the_store_did_not_count_is_not_settled
);

/// On a Cluster, where a subject's budget lives in its own slot: the refunds and the
/// size-based charge land there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster() {
    refund_on_gives_back_what_failed_responses_cost(Fixture::on_shared_cluster("settle").await)
        .await;
    settle_charges_a_response_by_its_size(Fixture::on_shared_cluster("settle").await).await;
}

/// A burst of 3 an hour: nothing refills during a test.
fn hourly(fx: &Fixture, name: &str, burst: u32) -> RateLimiter {
    gcra_limiter(fx, name, burst, burst)
}

fn routes() -> Router {
    Router::new()
        .route("/ok", get(|| async { "ok" }))
        .route(
            "/fail",
            get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "failed") }),
        )
        .route("/big", get(|| async { "x".repeat(4000) }))
        .route("/empty", get(|| async { StatusCode::NO_CONTENT }))
        .route(
            "/stream",
            get(|| async {
                let first = futures_util::stream::iter([Ok::<_, Infallible>(Bytes::from("head"))]);
                Body::from_stream(first.chain(futures_util::stream::pending()))
            }),
        )
}

/// Waits (at most 10 s, the settlement being a background round trip) until `subject` has
/// `remaining` units left in `limiter`.
async fn until_remaining(limiter: &RateLimiter, subject: &str, remaining: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = limiter.peek(subject).await.expect("peek").remaining;
        if now == remaining {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{subject}: {now} left, expected {remaining}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// With `refund_on(5xx)`, six failed requests in a row pass a burst of three (each is given
/// back once its response has been sent), and then successful requests are charged as usual:
/// three pass, the fourth is `429`.
async fn refund_on_gives_back_what_failed_responses_cost(fx: Fixture) {
    let limiter = hourly(&fx, "settle-refund", 3);
    let full = limiter.peek("alice").await.expect("peek").remaining;
    let layer = RateLimitLayer::builder(limiter.clone(), Header::from_static("x-api-key"))
        .refund_on(|status| status.is_server_error())
        .build()
        .expect("layer");
    let (addr, _server) = serve(routes().layer(layer)).await;
    let http = http_client();
    let get = |path: &'static str| {
        let request = http
            .get(format!("http://{addr}{path}"))
            .header("x-api-key", "alice");
        async move {
            let response = request.send().await.expect("request");
            let status = response.status();
            response.bytes().await.expect("the whole body");
            status
        }
    };
    for round in 0..6 {
        assert_eq!(
            get("/fail").await,
            StatusCode::INTERNAL_SERVER_ERROR,
            "round {round}"
        );
        until_remaining(&limiter, "alice", full).await;
    }
    for round in 0..3 {
        assert_eq!(get("/ok").await, StatusCode::OK, "round {round}");
    }
    assert_eq!(get("/ok").await, StatusCode::TOO_MANY_REQUESTS);
}

/// Charged 1 up front and one unit per started 1,000 bytes at the end: a 4,000-byte response
/// costs 4 in all, and the settle function saw what was sent.
async fn settle_charges_a_response_by_its_size(fx: Fixture) {
    let limiter = hourly(&fx, "settle-size", 10);
    let full = limiter.peek("bob").await.expect("peek").remaining;
    let seen: Arc<Mutex<Vec<Settlement>>> = Arc::default();
    let record = Arc::clone(&seen);
    let layer = RateLimitLayer::builder(limiter.clone(), Header::from_static("x-api-key"))
        .settle(move |done| {
            record.lock().unwrap().push(done.clone());
            u32::try_from(done.body_bytes.div_ceil(1000)).unwrap()
        })
        .build()
        .expect("layer");
    let (addr, _server) = serve(routes().layer(layer)).await;
    let response = http_client()
        .get(format!("http://{addr}/big"))
        .header("x-api-key", "bob")
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.bytes().await.expect("body").len(), 4000);
    until_remaining(&limiter, "bob", full - 4).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let done = &seen[0];
    assert_eq!(
        (done.status, done.body_bytes, done.charged, done.completed),
        (StatusCode::OK, 4000, 1, true),
        "{done:?}"
    );
}

/// A response whose body the client drops after its first chunk settles once, as not
/// completed, with the bytes sent so far; this settle function refunds such a request.
async fn a_dropped_body_settles_as_not_completed(fx: Fixture) {
    let limiter = hourly(&fx, "settle-drop", 3);
    let full = limiter.peek("carol").await.expect("peek").remaining;
    let seen: Arc<Mutex<Vec<Settlement>>> = Arc::default();
    let record = Arc::clone(&seen);
    let layer = RateLimitLayer::builder(limiter.clone(), Header::from_static("x-api-key"))
        .settle(move |done| {
            record.lock().unwrap().push(done.clone());
            if done.completed { done.charged } else { 0 }
        })
        .build()
        .expect("layer");
    let app = routes().layer(layer);
    let response = call(
        &app,
        request_from("/stream", PEER, &[("x-api-key", "carol")]),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let first = body.frame().await.expect("a frame").expect("no error");
    assert_eq!(first.into_data().expect("data"), "head");
    assert_eq!(
        limiter.peek("carol").await.expect("peek").remaining,
        full - 1,
        "charged while the body is being sent"
    );
    assert!(
        seen.lock().unwrap().is_empty(),
        "not settled before the body ends"
    );
    drop(body);
    until_remaining(&limiter, "carol", full).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "settled once: {seen:?}");
    assert_eq!(
        (seen[0].body_bytes, seen[0].charged, seen[0].completed),
        (4, 1, false),
        "{:?}",
        seen[0]
    );
}

/// A settle function that records what it saw and keeps the charge.
fn recording() -> (
    Arc<Mutex<Vec<Settlement>>>,
    impl Fn(&Settlement) -> u32 + Send + Sync + 'static,
) {
    let seen: Arc<Mutex<Vec<Settlement>>> = Arc::default();
    let record = Arc::clone(&seen);
    (seen, move |done: &Settlement| {
        record.lock().unwrap().push(done.clone());
        done.charged
    })
}

/// A server sends a body that is already at its end, and a `HEAD` response's, with the head
/// and never polls them: both settle at once, as completed with no bytes.
async fn empty_and_head_responses_settle_as_completed(fx: Fixture) {
    let limiter = hourly(&fx, "settle-empty", 10);
    let (seen, settle) = recording();
    let layer = RateLimitLayer::builder(limiter, Header::from_static("x-api-key"))
        .settle(settle)
        .build()
        .expect("layer");
    let (addr, _server) = serve(routes().layer(layer)).await;
    let http = http_client();
    let empty = http
        .get(format!("http://{addr}/empty"))
        .header("x-api-key", "dave")
        .send()
        .await
        .expect("request");
    assert_eq!(empty.status(), StatusCode::NO_CONTENT);
    let head = http
        .head(format!("http://{addr}/big"))
        .header("x-api-key", "dave")
        .send()
        .await
        .expect("request");
    assert_eq!(head.status(), StatusCode::OK);
    let seen = seen.lock().unwrap().clone();
    let settled: Vec<_> = seen
        .iter()
        .map(|s| (s.status, s.body_bytes, s.completed))
        .collect();
    assert_eq!(
        settled,
        [(StatusCode::NO_CONTENT, 0, true), (StatusCode::OK, 0, true)],
        "{seen:?}"
    );
}

/// Shadow mode lets a denied request through without the store counting it: its response
/// is not settled (a refund would hand out a unit nobody took).
async fn what_the_store_did_not_count_is_not_settled(fx: Fixture) {
    let limiter = fx
        .client
        .rate_limiter(gcra("settle-shadow", 1, 1))
        .shadow(true)
        .deny_cache(0)
        .build()
        .expect("limiter");
    let (seen, settle) = recording();
    let layer = RateLimitLayer::builder(limiter.clone(), Header::from_static("x-api-key"))
        .settle(settle)
        .build()
        .expect("layer");
    let app = routes().layer(layer);
    for path in ["/ok", "/fail"] {
        let response = call(&app, request_from(path, PEER, &[("x-api-key", "erin")])).await;
        response
            .into_body()
            .collect()
            .await
            .expect("the whole body");
    }
    let seen = seen.lock().unwrap().clone();
    let statuses: Vec<_> = seen.iter().map(|s| s.status).collect();
    assert_eq!(
        statuses,
        [StatusCode::OK],
        "only the counted request settles: {seen:?}"
    );
}
