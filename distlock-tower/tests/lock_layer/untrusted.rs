//! What a request cannot do through the lock layer (TESTPLAN 57): name a lock the application
//! or the runtime takes for itself (an election, an idempotency claim), smuggle a control
//! character into a lock name or a log line, or keep a lock for ever by not reading its
//! response.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use distlock::idempotency::{Begin, Scope};
use distlock_tower::extract::{Header, PathSegment};
use distlock_tower::lock::{HeldLock, LockLayer};
use http::{Request, StatusCode};
use tower::ServiceExt;

use crate::app::{Fixture, Seen, app, http_client, http_get, layer, on_both_stores, serve};

on_both_stores!(
    a_request_cannot_name_an_election_or_an_idempotency_claim,
    control_characters_in_a_key_are_refused,
    a_reader_that_stalls_loses_the_lock_at_max_hold,
);

fn keyed_app(fx: &Fixture) -> Router {
    Router::new()
        .route(
            "/",
            get(|lock: HeldLock| async move { lock.name().to_owned() }),
        )
        .route_layer(LockLayer::new(
            fx.client.clone(),
            Header::from_static("x-lock"),
        ))
}

fn with_lock_header(value: &str) -> Request<Body> {
    Request::get("/")
        .header("x-lock", value)
        .body(Body::empty())
        .expect("request")
}

async fn a_request_cannot_name_an_election_or_an_idempotency_claim(fx: Fixture) {
    let app = keyed_app(&fx);
    // An election leads; a request keyed by its name takes a lock of its own, in the layer's
    // name space, and leaves the leadership alone.
    let election = fx.client.election("scheduler").build().expect("election");
    let leader = election.campaign("host-a").await.expect("leads");
    let response = app
        .clone()
        .oneshot(with_lock_header("scheduler"))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    let body = axum::body::to_bytes(response.into_body(), 1024)
        .await
        .expect("body");
    assert_eq!(&body[..], b"http/scheduler");
    assert!(!leader.is_lost(), "the request took the leader's lock");

    // An idempotency claim in flight: a request keyed by its lock name does not touch it.
    let keys = fx.client.idempotency("payments").expect("namespace");
    let Begin::Run(claim) = keys
        .begin(Scope::Global, "k-1", b"fp")
        .await
        .expect("begin")
    else {
        panic!("a new key runs");
    };
    let claim_name = claim.lease().name().to_owned();
    let response = app
        .clone()
        .oneshot(with_lock_header(&claim_name))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK, "not the claim's 423");
    drop(response);
    assert!(!claim.lease().is_lost());
    // And a layer cannot be put where the claims live.
    let built = LockLayer::builder(fx.client.clone(), Header::from_static("x-lock"))
        .namespace("idempotency")
        .build();
    assert!(built.is_err(), "{built:?}");
    drop(claim);
    leader.resign().await.expect("resign");
}

async fn control_characters_in_a_key_are_refused(fx: Fixture) {
    let by_segment = Router::new()
        .route(
            "/orders/{id}",
            get(|lock: HeldLock| async move { lock.name().to_owned() }),
        )
        .route_layer(LockLayer::new(fx.client.clone(), PathSegment(1)));
    for path in ["/orders/a%0Ab", "/orders/%1B%5B31m", "/orders/x%00"] {
        let response = by_segment
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).expect("request"))
            .await
            .expect("infallible");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{path}");
    }
    // A closure of the application's own is checked too.
    let by_closure = Router::new()
        .route("/", get(|| async { "ran" }))
        .route_layer(LockLayer::new(fx.client.clone(), |_: &Request<Body>| {
            Some("forged\nline".to_owned())
        }));
    let response = by_closure
        .oneshot(Request::get("/").body(Body::empty()).expect("request"))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}

async fn a_reader_that_stalls_loses_the_lock_at_max_hold(fx: Fixture) {
    let max_hold = Duration::from_millis(600);
    let ttl = Duration::from_millis(600);
    let seen = Arc::new(Seen::default());
    let (addr, _server) = serve(app(layer(&fx).ttl(ttl).max_hold(max_hold), &seen)).await;
    let http = http_client();
    // 100 chunks 50 ms apart; the client reads one, then stops reading (and stays).
    let mut stream = http_get(&http, format!("http://{addr}/stream/1/100/50")).await;
    assert!(stream.chunk().await.expect("chunk").is_some());
    let started = Instant::now();
    assert!(!fx.is_free("http/order:1").await);
    // The watchdog stops at max_hold, and the key runs out its last ttl: free within
    // max_hold + ttl of the grant (polled with room for a slow machine).
    assert!(
        fx.wait_free("http/order:1", Duration::from_secs(10)).await,
        "still held {:?} after the reader stalled",
        started.elapsed()
    );
    let next = http_get(&http, format!("http://{addr}/orders/1")).await;
    assert_eq!(next.status(), StatusCode::OK);
    drop(stream);
}

/// Without a setting of its own, a layer's lock is held at most 5 minutes.
#[test]
fn the_default_max_hold_is_five_minutes() {
    assert_eq!(distlock_tower::DEFAULT_MAX_HOLD, Duration::from_secs(300));
    let builder = LockLayer::builder(distlock::Client::in_memory(), PathSegment(0));
    let shown = format!("{builder:?}");
    assert!(shown.contains("max_hold: Some(300s)"), "{shown}");
    assert!(shown.contains("namespace: \"http\""), "{shown}");
}
