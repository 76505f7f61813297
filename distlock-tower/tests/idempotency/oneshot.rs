//! The layer's answers through `oneshot`, the same bodies on every store: replay, mismatch,
//! missing and malformed keys, methods without a key, server errors and over-cap bodies not
//! stored, the quorum refused at build.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use distlock::Client;
use distlock_tower::{ConfigError, IdempotencyLayer};
use http::{Request, Response, StatusCode};
use tower::ServiceExt;

use crate::support::RedisServer;
use crate::support::fixture::{connect, shared_cluster_client};

/// An app whose `/orders` handler counts its runs and answers the count; `/fail` answers
/// `500` on its first run; `/big` answers 4 KiB.
fn app(client: Client, namespace: &str, runs: Arc<AtomicU64>) -> Router {
    let (orders, fail, big) = (runs.clone(), runs.clone(), runs);
    let failed_once = Arc::new(AtomicU64::new(0));
    Router::new()
        .route(
            "/orders",
            post(move |body: String| {
                let n = orders.fetch_add(1, Ordering::SeqCst) + 1;
                async move {
                    (
                        StatusCode::CREATED,
                        [("content-type", "text/plain"), ("x-not-stored", "1")],
                        format!("run {n} for {body}"),
                    )
                }
            })
            .patch(|| async { "patched" })
            .put(|| async { "put" }),
        )
        .route(
            "/fail",
            post(move || {
                let n = fail.fetch_add(1, Ordering::SeqCst) + 1;
                let first = failed_once.fetch_add(1, Ordering::SeqCst) == 0;
                async move {
                    if first {
                        (StatusCode::INTERNAL_SERVER_ERROR, "failed".to_owned())
                    } else {
                        (StatusCode::OK, format!("run {n}"))
                    }
                }
            }),
        )
        .route(
            "/big",
            post(move || {
                big.fetch_add(1, Ordering::SeqCst);
                async { vec![b'x'; 4096] }
            }),
        )
        .layer(
            IdempotencyLayer::builder(client, namespace)
                .max_response_body(1024)
                .build()
                .expect("valid settings"),
        )
}

fn post_with(path: &str, key: Option<&str>, body: &'static str) -> Request<Body> {
    let mut request = Request::post(path);
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request.body(Body::from(body)).expect("request")
}

async fn send(app: &Router, request: Request<Body>) -> (Response<()>, Vec<u8>) {
    let response = app.clone().oneshot(request).await.expect("infallible");
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20).await.expect("body");
    (Response::from_parts(parts, ()), body.to_vec())
}

async fn behaves(client: Client) {
    let runs = Arc::new(AtomicU64::new(0));
    let app = app(client, "oneshot", runs.clone());

    // First run, then a replay: same status, stored headers and body, marked; not run again.
    let (first, first_body) = send(&app, post_with("/orders", Some("k1"), "2 seats")).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let (again, again_body) = send(&app, post_with("/orders", Some("\"k1\""), "2 seats")).await;
    assert_eq!(again.status(), StatusCode::CREATED);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.headers()["content-type"], "text/plain");
    assert!(again.headers().get("x-not-stored").is_none());
    assert_eq!(again_body, first_body);
    assert_eq!(first_body, b"run 1 for 2 seats");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Another body, or another path, with the same key: 422, nothing run.
    let (other, _) = send(&app, post_with("/orders", Some("k1"), "3 seats")).await;
    assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let (other_path, _) = send(&app, post_with("/fail", Some("k1"), "2 seats")).await;
    assert_eq!(other_path.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // No key on POST: 400; malformed keys: 400; a method outside the set runs without one.
    let (missing, _) = send(&app, post_with("/orders", None, "x")).await;
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
    for bad in ["\"\"", "\"unterminated", "\"a\\\"b\""] {
        let (invalid, _) = send(&app, post_with("/orders", Some(bad), "x")).await;
        assert_eq!(invalid.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    let twice = Request::post("/orders")
        .header("idempotency-key", "a")
        .header("idempotency-key", "a")
        .body(Body::from("x"))
        .expect("request");
    assert_eq!(send(&app, twice).await.0.status(), StatusCode::BAD_REQUEST);
    let (patch, _) = send(
        &app,
        Request::patch("/orders")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(patch.status(), StatusCode::BAD_REQUEST, "PATCH needs a key");
    let (put, _) = send(
        &app,
        Request::put("/orders")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(put.status(), StatusCode::OK, "PUT passes without a key");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // A server error is not stored: the retry runs again.
    let (failed, _) = send(&app, post_with("/fail", Some("k2"), "")).await;
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let (retried, retried_body) = send(&app, post_with("/fail", Some("k2"), "")).await;
    assert_eq!(retried.status(), StatusCode::OK);
    assert!(retried.headers().get("idempotent-replayed").is_none());
    assert_eq!(retried_body, b"run 3");

    // A body over the cap is answered whole but not stored: the repeat runs again.
    for expected_runs in [4, 5] {
        let (big, body) = send(&app, post_with("/big", Some("k3"), "")).await;
        assert_eq!(big.status(), StatusCode::OK);
        assert!(big.headers().get("idempotent-replayed").is_none());
        assert_eq!(body.len(), 4096);
        assert_eq!(runs.load(Ordering::SeqCst), expected_runs);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_memory() {
    behaves(Client::in_memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis() {
    let server = RedisServer::start();
    behaves(connect(&server.url()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster() {
    behaves(shared_cluster_client("idempotency").await).await;
}

/// Two namespaces on one store keep their records apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_are_apart() {
    let client = Client::in_memory();
    let (a_runs, b_runs) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let a = app(client.clone(), "a", a_runs.clone());
    let b = app(client, "b", b_runs.clone());
    send(&a, post_with("/orders", Some("k"), "x")).await;
    let (from_b, _) = send(&b, post_with("/orders", Some("k"), "x")).await;
    assert!(from_b.headers().get("idempotent-replayed").is_none());
    assert_eq!(
        (a_runs.load(Ordering::SeqCst), b_runs.load(Ordering::SeqCst)),
        (1, 1)
    );
}

/// A client whose locks go to a Redlock quorum is refused where the layer is built.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_is_refused_at_build() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let client = Client::builder()
        .connect_quorum(servers.iter().map(RedisServer::url))
        .await
        .expect("quorum connects");
    let built = IdempotencyLayer::builder(client, "api").build();
    assert!(
        matches!(built, Err(ConfigError::UnsupportedStore(_))),
        "{built:?}"
    );
}
