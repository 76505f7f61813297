//! The layer's answers, on both stores.

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use bytes::Bytes;
use distlock_tower::concurrency::{
    ConcurrencyLimitLayer, ConcurrencyLimitLayerBuilder, FullStatus, HeldPermit,
};
use distlock_tower::extract::{Constant, Header, MissingKey};
use distlock_tower::refusal::{ProblemDetails, Reason, Refusal, RefusedBy};
use http::{Request, Response, StatusCode};
use tower::ServiceExt;

use crate::common::assert_refused_for_shutdown;
use crate::support::fixture::{Fixture, on_both_stores};

on_both_stores!(
    a_full_limit_answers_503_with_retry_after,
    a_waiting_request_gets_the_next_permit,
    keys_missing_invalid_and_per_client,
    a_streaming_body_keeps_its_permit_until_it_ends,
    refusals_can_be_problem_documents,
    a_closed_client_refuses_new_requests_while_in_flight_ones_finish,
);

async fn fence(permit: HeldPermit) -> String {
    permit.fence().await.expect("fence").to_string()
}

fn app(layer: ConcurrencyLimitLayerBuilder<Constant>) -> Router {
    let layer = layer.build().expect("valid settings");
    Router::new()
        .route("/", get(fence))
        .route(
            "/stream",
            get(|| async {
                let chunks = futures_util::stream::unfold(0u32, |i| async move {
                    if i == 3 {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Some((Ok::<_, std::io::Error>(Bytes::from("chunk\n")), i + 1))
                });
                Body::from_stream(chunks)
            }),
        )
        .route_layer(layer)
}

fn layer(fx: &Fixture, limit: u32) -> ConcurrencyLimitLayerBuilder<Constant> {
    ConcurrencyLimitLayer::builder(fx.client.clone(), Constant::from_static("exports"), limit)
        .ttl(Duration::from_secs(5))
}

async fn call(app: &Router, uri: &str) -> Response<Body> {
    app.clone()
        .oneshot(Request::get(uri).body(Body::empty()).expect("request"))
        .await
        .expect("infallible")
}

async fn text(response: Response<Body>) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
        .await
        .expect("body");
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

async fn a_full_limit_answers_503_with_retry_after(fx: Fixture) {
    let app = app(layer(&fx, 2));
    // Unread bodies keep their permits.
    let first = call(&app, "/").await;
    let second = call(&app, "/").await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(second.status(), StatusCode::OK);
    let full = call(&app, "/").await;
    assert_eq!(full.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(full.headers()["retry-after"], "1");
    let refusal = full.extensions().get::<Refusal>().expect("refusal").clone();
    assert_eq!(refusal.reason(), &Reason::AtCapacity);
    assert_eq!(refusal.refused_by(), RefusedBy::ConcurrencyLimit);
    assert_eq!(refusal.key(), Some("http/exports"));
    assert_eq!(
        text(full).await,
        "too many requests in flight; try again shortly\n"
    );
    // A response made under a permit carries it.
    assert!(first.extensions().get::<HeldPermit>().is_some());
    let fence: u64 = text(first).await.parse().expect("fence");
    assert!(fence > 0);
    assert_eq!(call(&app, "/").await.status(), StatusCode::OK);
    drop(second);

    // 429 and a Retry-After of our own.
    let app = crate::oneshot::app(
        layer(&fx, 1)
            .full_status(FullStatus::TooManyRequests)
            .retry_after(Duration::from_millis(2500)),
    );
    // The permits of the responses above are given back in the background: wait for them.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let held = loop {
        let held = call(&app, "/").await;
        if held.status() == StatusCode::OK || std::time::Instant::now() >= deadline {
            break held;
        }
        drop(held);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        held.status(),
        StatusCode::OK,
        "the earlier permits came back"
    );
    let full = call(&app, "/").await;
    assert_eq!(full.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(full.headers()["retry-after"], "3");
    drop(held);
}

async fn a_waiting_request_gets_the_next_permit(fx: Fixture) {
    // A waiter that missed the give-back sleeps until the held permit would expire: with a
    // 60 s ttl renewed every 20 s, tens of seconds. Woken by the give-back it takes a round
    // trip or two; 5 s tells the two apart with room for a busy machine (as in
    // lock::wakeups).
    const HELD_TTL: Duration = Duration::from_secs(60);
    const WOKEN_WITHIN: Duration = Duration::from_secs(5);
    let app = app(layer(&fx, 1).ttl(HELD_TTL).wait(HELD_TTL));
    let held = call(&app, "/").await;
    let waiter = {
        let app = app.clone();
        tokio::spawn(async move {
            let response = call(&app, "/").await;
            (Instant::now(), response.status())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    text(held).await;
    let (at, status) = waiter.await.expect("waiter");
    assert_eq!(status, StatusCode::OK);
    let took = at.saturating_duration_since(released);
    assert!(
        took < WOKEN_WITHIN,
        "woken {took:?} after the permit was given back"
    );
}

async fn keys_missing_invalid_and_per_client(fx: Fixture) {
    let per_client = |missing: MissingKey| {
        Router::new().route("/", get(|| async { "ok" })).layer(
            ConcurrencyLimitLayer::builder(fx.client.clone(), Header::from_static("x-client"), 1)
                .on_missing_key(missing)
                .build()
                .expect("valid settings"),
        )
    };
    let request = |client: Option<&str>| {
        let mut builder = Request::get("/");
        if let Some(client) = client {
            builder = builder.header("x-client", client);
        }
        builder.body(Body::empty()).expect("request")
    };
    let app = per_client(MissingKey::Reject);
    let missing = app
        .clone()
        .oneshot(request(None))
        .await
        .expect("infallible");
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        text(missing).await,
        "this request has no concurrency-limit key\n"
    );
    let twice = Request::get("/")
        .header("x-client", "a")
        .header("x-client", "b")
        .body(Body::empty())
        .expect("request");
    let allow = per_client(MissingKey::Allow);
    assert_eq!(
        allow
            .clone()
            .oneshot(twice)
            .await
            .expect("infallible")
            .status(),
        StatusCode::BAD_REQUEST,
        "an invalid key is never let through"
    );
    assert_eq!(
        allow
            .oneshot(request(None))
            .await
            .expect("infallible")
            .status(),
        StatusCode::OK
    );
    // One permit per client: a's does not count against b's.
    let a = app
        .clone()
        .oneshot(request(Some("a")))
        .await
        .expect("infallible");
    let a2 = app
        .clone()
        .oneshot(request(Some("a")))
        .await
        .expect("infallible");
    let b = app
        .clone()
        .oneshot(request(Some("b")))
        .await
        .expect("infallible");
    assert_eq!(a.status(), StatusCode::OK);
    assert_eq!(a2.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(b.status(), StatusCode::OK);
}

async fn a_streaming_body_keeps_its_permit_until_it_ends(fx: Fixture) {
    let app = app(layer(&fx, 1));
    let streaming = call(&app, "/stream").await;
    assert_eq!(streaming.status(), StatusCode::OK);
    assert_eq!(
        call(&app, "/").await.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "the stream holds the permit"
    );
    assert_eq!(text(streaming).await, "chunk\n".repeat(3));
    assert_eq!(call(&app, "/").await.status(), StatusCode::OK);
    // A body dropped early (the client went away) gives the permit back.
    let dropped = call(&app, "/stream").await;
    drop(dropped);
    let key = fx
        .client
        .__inspect()
        .semaphore_key("http/exports")
        .expect("key");
    for _ in 0..100 {
        if fx
            .client
            .__inspect()
            .live_entries(&key)
            .await
            .expect("count")
            == 0
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the dropped body kept its permit");
}

async fn refusals_can_be_problem_documents(fx: Fixture) {
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route_layer(
            ConcurrencyLimitLayer::builder(fx.client.clone(), Constant::from_static("p"), 1)
                .refusal(ProblemDetails::new().type_base("https://example.com/problems/"))
                .build()
                .expect("valid settings"),
        );
    let held = call(&app, "/").await;
    let full = call(&app, "/").await;
    assert_eq!(full.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(full.headers()["content-type"], "application/problem+json");
    let json: serde_json::Value =
        serde_json::from_str(&text(full).await).expect("problem document");
    assert_eq!(json["type"], "https://example.com/problems/at-capacity");
    assert_eq!(json["retry_after"], 1);
    drop(held);
}

/// A concurrency limit on a Redlock quorum, whose majorities of independent primaries do not
/// bound how many hold at once, is refused where it is built, with a typed error that says
/// what to use instead, rather than answering `500` to every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_client_is_refused_at_build() {
    use distlock_tower::ConfigError;

    use crate::support::RedisServer;

    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let quorum = distlock::Client::connect_quorum(&urls)
        .await
        .expect("connect_quorum");
    let built = ConcurrencyLimitLayer::new(quorum.clone(), Constant::from_static("exports"), 2);
    let Err(ConfigError::UnsupportedStore(refused)) = built else {
        panic!("a quorum must be refused: {built:?}");
    };
    assert_eq!(refused.capability, distlock::Capability::HolderSets);
    assert!(refused.reason.contains("Client::connect"), "{refused}");
    assert!(
        ConcurrencyLimitLayer::builder(quorum, Constant::from_static("exports"), 2)
            .build()
            .is_err()
    );
    // A single primary (and the in-memory store) serves it.
    let single = distlock::Client::connect(&nodes[0].url())
        .await
        .expect("connect");
    assert!(ConcurrencyLimitLayer::new(single, Constant::from_static("exports"), 2).is_ok());
}

/// Issue 44: once the client is closed for shutdown, a new request is `503` with
/// `Retry-After`, while one in flight (its body still being read) keeps its permit and
/// finishes.
async fn a_closed_client_refuses_new_requests_while_in_flight_ones_finish(fx: Fixture) {
    let app = app(layer(&fx, 2));
    let in_flight = call(&app, "/").await;
    assert_eq!(in_flight.status(), StatusCode::OK);
    fx.client.close();
    let refused = call(&app, "/").await;
    assert_refused_for_shutdown(&refused);
    assert_eq!(
        text(refused).await,
        "this server is shutting down; try again\n"
    );
    let permit = in_flight
        .extensions()
        .get::<HeldPermit>()
        .expect("held permit")
        .clone();
    assert!(!permit.is_lost(), "the permit in flight is kept");
    let fence: u64 = text(in_flight).await.parse().expect("fence");
    assert!(fence > 0);
}
