//! The layer's answers through `oneshot`, the same bodies on every store: replay, mismatch,
//! missing and malformed keys, keys of other callers, methods without a key, server errors not
//! stored, over-cap bodies not kept (and not run again), a lost claim that stops its handler,
//! the quorum refused at build.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use distlock::Client;
use distlock_tower::extract::Header;
use distlock_tower::idempotency::HeldClaim;
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
                .scope(Header::from_static("x-account"))
                .max_response_body(1024)
                .build()
                .expect("valid settings"),
        )
}

/// A request of account `acct-1`.
fn post_with(path: &str, key: Option<&str>, body: &'static str) -> Request<Body> {
    post_as("acct-1", path, key, body)
}

fn post_as(account: &str, path: &str, key: Option<&str>, body: &'static str) -> Request<Body> {
    let mut request = Request::post(path);
    if !account.is_empty() {
        request = request.header("x-account", account);
    }
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

/// Sends a `pay-1` charge to `app` in a task of its own and returns that task once the
/// handler has started (`started` counts the handler's starts).
async fn charge_until_started(
    app: &Router,
    started: &AtomicU64,
) -> tokio::task::JoinHandle<(Response<()>, Vec<u8>)> {
    let first = tokio::spawn({
        let app = app.clone();
        async move { send(&app, post_with("/charge", Some("pay-1"), "10")).await }
    });
    while started.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    first
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

    // A body over the cap is answered whole but not kept: the repeat is refused, not run.
    let (big, body) = send(&app, post_with("/big", Some("k3"), "")).await;
    assert_eq!(big.status(), StatusCode::OK);
    assert!(big.headers().get("idempotent-replayed").is_none());
    assert_eq!(body.len(), 4096);
    assert_eq!(runs.load(Ordering::SeqCst), 4);
    let (repeat, body) = send(&app, post_with("/big", Some("k3"), "")).await;
    assert_eq!(repeat.status(), StatusCode::CONFLICT);
    assert!(
        String::from_utf8_lossy(&body).contains("too large"),
        "{body:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 4);

    // Another caller's k1 is another key: it runs, and neither sees the other's answer; a
    // request that names no caller is refused without running.
    let (theirs, their_body) =
        send(&app, post_as("acct-2", "/orders", Some("k1"), "2 seats")).await;
    assert_eq!(theirs.status(), StatusCode::CREATED);
    assert!(theirs.headers().get("idempotent-replayed").is_none());
    assert_eq!(their_body, b"run 5 for 2 seats");
    let (mine, my_body) = send(&app, post_with("/orders", Some("k1"), "2 seats")).await;
    assert_eq!(mine.headers()["idempotent-replayed"], "true");
    assert_eq!(my_body, b"run 1 for 2 seats");
    let (nobody, _) = send(&app, post_as("", "/orders", Some("k9"), "x")).await;
    assert_eq!(nobody.status(), StatusCode::BAD_REQUEST);
    assert_eq!(runs.load(Ordering::SeqCst), 5);
}

/// A request whose future is dropped once its handler began (a client that left, an outer
/// timeout) still runs to its end and is stored: the retry gets its answer, and the handler
/// ran once. A retry that comes while it still runs waits for it (the layer's `wait`).
async fn a_dropped_request_still_finishes_and_is_stored(client: Client) {
    let (started, finished) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let handler = {
        let (started, finished) = (started.clone(), finished.clone());
        move || {
            let (started, finished) = (started.clone(), finished.clone());
            async move {
                let n = started.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                finished.fetch_add(1, Ordering::SeqCst);
                (StatusCode::CREATED, format!("charge {n}"))
            }
        }
    };
    let app = Router::new().route("/charge", post(handler)).layer(
        IdempotencyLayer::builder(client, "dropped")
            .scope(Header::from_static("x-account"))
            .wait(std::time::Duration::from_secs(10))
            .build()
            .expect("valid settings"),
    );
    let first = charge_until_started(&app, &started).await;
    // The client goes away: its request's future is dropped mid-handler.
    first.abort();
    let (retry, body) = send(&app, post_with("/charge", Some("pay-1"), "10")).await;
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(body, b"charge 1");
    assert_eq!(
        (
            started.load(Ordering::SeqCst),
            finished.load(Ordering::SeqCst)
        ),
        (1, 1),
        "the handler ran once, to its end"
    );
}

/// A claim lost while its handler runs stops the handler (as the lock layer does), and the
/// key's outcome is then unknown: the request and its retry get `409 outcome-unknown`, and
/// the handler never finishes. The handler reads the claim's fence.
async fn a_lost_claim_stops_its_handler(client: Client) {
    let (started, finished) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (names, fences) = (
        Arc::new(std::sync::Mutex::new(Vec::new())),
        Arc::new(std::sync::Mutex::new(Vec::new())),
    );
    let handler = {
        let (started, finished, names, fences) = (
            started.clone(),
            finished.clone(),
            names.clone(),
            fences.clone(),
        );
        move |claim: HeldClaim| {
            let (started, finished, names, fences) = (
                started.clone(),
                finished.clone(),
                names.clone(),
                fences.clone(),
            );
            async move {
                names.lock().expect("names").push(claim.name().to_owned());
                let fence = claim.fence().await.expect("a held claim mints its fence");
                fences.lock().expect("fences").push(fence);
                started.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_secs(5)).await;
                finished.fetch_add(1, Ordering::SeqCst);
                "charged"
            }
        }
    };
    let app = Router::new().route("/charge", post(handler)).layer(
        IdempotencyLayer::builder(client.clone(), "lost")
            .scope(Header::from_static("x-account"))
            .build()
            .expect("valid settings"),
    );
    let first = charge_until_started(&app, &started).await;
    let name = names.lock().expect("names")[0].clone();
    assert!(name.starts_with("idempotency/lost/"), "{name}");
    assert!(fences.lock().expect("fences")[0] > 0);
    // An operator (or an expiry and another claimant) takes the claim away.
    assert!(client.force_unlock(&name).await.expect("force"));
    let (answer, body) = tokio::time::timeout(std::time::Duration::from_secs(4), first)
        .await
        .expect("answered before the handler would have finished")
        .expect("task");
    assert_eq!(answer.status(), StatusCode::CONFLICT, "{body:?}");
    let (retry, _) = send(&app, post_with("/charge", Some("pay-1"), "10")).await;
    assert_eq!(retry.status(), StatusCode::CONFLICT);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        started.load(Ordering::SeqCst),
        1,
        "the retry ran the handler again"
    );
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "the handler went on after its claim was lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_memory() {
    behaves(Client::in_memory()).await;
    a_dropped_request_still_finishes_and_is_stored(Client::in_memory()).await;
    a_lost_claim_stops_its_handler(Client::in_memory()).await;
    a_closed_client_takes_no_new_key(Client::in_memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis() {
    let server = RedisServer::start();
    behaves(connect(&server.url()).await).await;
    a_dropped_request_still_finishes_and_is_stored(connect(&server.url()).await).await;
    a_lost_claim_stops_its_handler(connect(&server.url()).await).await;
    a_closed_client_takes_no_new_key(connect(&server.url()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster() {
    behaves(shared_cluster_client("idempotency").await).await;
    a_lost_claim_stops_its_handler(shared_cluster_client("idempotency-lost").await).await;
}

/// Issue 44: once the client is closed for shutdown, a request with a new key (whose claim
/// would be a new lease) is refused with `503` and `Retry-After`, not run; a finished key is
/// still replayed (no lease needed).
async fn a_closed_client_takes_no_new_key(client: Client) {
    let runs = Arc::new(AtomicU64::new(0));
    let app = app(client.clone(), "closing", runs.clone());
    let (first, first_body) = send(&app, post_with("/orders", Some("k1"), "1 seat")).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    client.close();
    let (refused, body) = send(&app, post_with("/orders", Some("k2"), "1 seat")).await;
    assert_eq!(
        refused.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(refused.headers()["retry-after"], "1");
    assert_eq!(body, b"this server is shutting down; try again\n");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "not run");
    let (again, again_body) = send(&app, post_with("/orders", Some("k1"), "1 seat")).await;
    assert_eq!(again.status(), StatusCode::CREATED);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again_body, first_body);
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
    let built = IdempotencyLayer::builder(client, "api")
        .scope_global()
        .build();
    assert!(
        matches!(built, Err(ConfigError::UnsupportedStore(_))),
        "{built:?}"
    );
}
