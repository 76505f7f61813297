//! The test fixture (a client on one of the two stores) and an axum app whose handlers record
//! what they saw: fences, hold intervals, overlaps.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::routing::get;
use bytes::Bytes;
use distlock_tower::extract::{PathSegment, Prefixed};
use distlock_tower::lock::{HeldLock, LockLayer, LockLayerBuilder};
use distlock_tower::refusal::MakeRefusal;
use http::{Request, Response, StatusCode};
use tower::ServiceExt;

pub const TTL: Duration = Duration::from_secs(5);

pub(crate) use crate::common::{http_client, retry_after, serve, text};
pub(crate) use crate::support::fixture::{Fixture, on_both_stores};

/// What the handlers saw.
#[derive(Default)]
pub struct Seen {
    /// Handlers currently inside their critical section.
    pub inside: AtomicUsize,
    /// Times a handler found another one inside.
    pub overlaps: AtomicUsize,
    /// A counter incremented non-atomically (read, yield, write) under the lock.
    pub counter: AtomicU64,
    /// Handler calls.
    pub calls: AtomicUsize,
    /// Set when a handler future was dropped before it finished.
    pub cancelled: AtomicBool,
}

impl Seen {
    /// The check after `requests` ran at once on `/count/1`, each answering its status and
    /// body: every one `200` with a fence of its own, no two handlers inside together, and
    /// no lost update.
    pub async fn assert_ran_one_at_a_time(
        &self,
        requests: Vec<tokio::task::JoinHandle<(StatusCode, String)>>,
    ) {
        let count = requests.len();
        let mut fences = Vec::new();
        for request in requests {
            let (status, body) = request.await.expect("request task");
            assert_eq!(status, StatusCode::OK, "{body}");
            fences.push(body.parse::<u64>().expect("fence"));
        }
        fences.sort_unstable();
        fences.dedup();
        assert_eq!(fences.len(), count, "each request had a lease of its own");
        assert_eq!(
            self.overlaps.load(Ordering::SeqCst),
            0,
            "two handlers overlapped"
        );
        assert_eq!(
            self.counter.load(Ordering::SeqCst),
            count as u64,
            "lost updates"
        );
    }
}

pub type Shared = Arc<Seen>;

/// The routes, all keyed `order:<segment 1>`:
/// * `GET /orders/{id}`: answers the fence.
/// * `GET /slow/{id}/{ms}`: sleeps `ms`, then answers the fence (counts overlaps).
/// * `GET /count/{id}`: the non-atomic counter section.
/// * `GET /stream/{id}/{chunks}/{ms}`: streams `chunks` chunks, one every `ms`.
/// * `GET /empty/{id}`: `204 No Content`.
pub fn routes() -> Router<Shared> {
    Router::new()
        .route("/orders/{id}", get(fence))
        .route("/slow/{id}/{ms}", get(slow))
        .route("/count/{id}", get(count))
        .route("/stream/{id}/{chunks}/{ms}", get(stream))
        .route("/empty/{id}", get(empty))
}

pub fn order_key() -> Prefixed<PathSegment> {
    Prefixed::new("order:", PathSegment(1))
}

/// The app with `layer` applied to every route.
pub fn app<R: MakeRefusal>(
    layer: LockLayerBuilder<Prefixed<PathSegment>, R>,
    seen: &Shared,
) -> Router {
    let layer = layer.build().expect("valid settings");
    routes().route_layer(layer).with_state(Arc::clone(seen))
}

pub fn layer(fx: &Fixture) -> LockLayerBuilder<Prefixed<PathSegment>> {
    LockLayer::builder(fx.client.clone(), order_key()).ttl(TTL)
}

async fn fence(State(seen): State<Shared>, lock: HeldLock) -> String {
    seen.calls.fetch_add(1, Ordering::SeqCst);
    lock.fence().await.expect("fence").to_string()
}

/// Inside `slow`'s critical section; notes a handler dropped before it finished.
struct Inside(Shared, bool);

impl Drop for Inside {
    fn drop(&mut self) {
        self.0.inside.fetch_sub(1, Ordering::SeqCst);
        if !self.1 {
            self.0.cancelled.store(true, Ordering::SeqCst);
        }
    }
}

async fn slow(
    State(seen): State<Shared>,
    Path((_, ms)): Path<(String, u64)>,
    lock: HeldLock,
) -> String {
    seen.calls.fetch_add(1, Ordering::SeqCst);
    if seen.inside.fetch_add(1, Ordering::SeqCst) != 0 {
        seen.overlaps.fetch_add(1, Ordering::SeqCst);
    }
    let mut inside = Inside(Arc::clone(&seen), false);
    tokio::time::sleep(Duration::from_millis(ms)).await;
    inside.1 = true;
    lock.fence().await.expect("fence").to_string()
}

async fn count(State(seen): State<Shared>, lock: HeldLock) -> String {
    seen.calls.fetch_add(1, Ordering::SeqCst);
    if seen.inside.fetch_add(1, Ordering::SeqCst) != 0 {
        seen.overlaps.fetch_add(1, Ordering::SeqCst);
    }
    let value = seen.counter.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1)).await;
    seen.counter.store(value + 1, Ordering::SeqCst);
    seen.inside.fetch_sub(1, Ordering::SeqCst);
    lock.fence().await.expect("fence").to_string()
}

async fn stream(
    State(seen): State<Shared>,
    Path((_, chunks, ms)): Path<(String, u32, u64)>,
) -> Body {
    seen.calls.fetch_add(1, Ordering::SeqCst);
    let chunks = futures_util::stream::unfold(0u32, move |i| async move {
        if i == chunks {
            return None;
        }
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        Some((
            Ok::<_, std::io::Error>(Bytes::from(format!("chunk {i}\n"))),
            i + 1,
        ))
    });
    Body::from_stream(chunks)
}

async fn empty(State(seen): State<Shared>) -> StatusCode {
    seen.calls.fetch_add(1, Ordering::SeqCst);
    StatusCode::NO_CONTENT
}

/// One request through the router, without reading the body.
pub async fn call(app: &Router, uri: &str) -> Response<Body> {
    app.clone()
        .oneshot(
            Request::get(uri)
                .body(Body::empty())
                .expect("valid request"),
        )
        .await
        .expect("axum services are infallible")
}

/// `GET url` with `http`, expecting an answer (of any status).
pub async fn http_get(http: &reqwest::Client, url: String) -> reqwest::Response {
    http.get(url).send().await.expect("request")
}
