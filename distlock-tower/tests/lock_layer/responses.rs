//! Responses users own: a refusal hook answers every kind of refusal, RFC 9457 problem
//! documents, the held lock and the refusal in the response's extensions for outer layers,
//! a handler that calls the runtime API answering like the layer (`IntoResponse` for
//! `LockError`), and the `debug` event of a refusal.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request as AxumRequest, State};
use axum::middleware::{self, Next};
use axum::response::Response as AxumResponse;
use axum::routing::get;
use distlock::{Client, LockError};
use distlock_tower::extract::{Header, PathSegment, Prefixed};
use distlock_tower::lock::{BusyStatus, HeldLock, LockLayer};
use distlock_tower::refusal::{ProblemDetails, Reason, Refusal, RefusedBy};
use http::{Request, Response, StatusCode};
use tower::ServiceExt;

use crate::app::{Fixture, Seen, TTL, app, call, layer, on_both_stores, retry_after, text};
use crate::traces::Capture;

on_both_stores!(
    a_custom_hook_answers_every_refusal_kind,
    problem_details_are_json_with_the_rfc_9457_members,
    an_outer_layer_reads_the_held_lock_and_the_refusal,
    a_handler_on_the_runtime_api_answers_like_the_layer,
);

/// Every refusal as `418` with the reason in a header and what the hook was told in the body:
/// whatever the client gets is the hook's.
fn hook(refusal: &Refusal) -> Response<String> {
    Response::builder()
        .status(StatusCode::IM_A_TEAPOT)
        .header("x-refusal", refusal.reason().code())
        .body(format!(
            "{:?} {} {}",
            refusal.refused_by(),
            refusal.status().as_u16(),
            refusal.retry_after_secs().unwrap_or(0)
        ))
        .expect("response")
}

fn refusal_header<B>(response: &Response<B>) -> Option<&str> {
    response
        .headers()
        .get("x-refusal")
        .map(|v| v.to_str().expect("ASCII"))
}

fn get_request(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).expect("request")
}

async fn a_custom_hook_answers_every_refusal_kind(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let hooked = app(layer(&fx).refusal(hook), &seen);

    // 423: the hook's status and body; the layer adds the holder's Retry-After.
    let first = call(&hooked, "/orders/1").await;
    assert_eq!(first.status(), StatusCode::OK);
    let busy = call(&hooked, "/orders/1").await;
    assert_eq!(busy.status(), StatusCode::IM_A_TEAPOT);
    assert_eq!(refusal_header(&busy), Some("lock-busy"));
    let secs = retry_after(&busy);
    assert!((1..=TTL.as_secs()).contains(&secs), "Retry-After {secs}");
    assert_eq!(text(busy).await, format!("Lock 423 {secs}"));

    // 409 when the layer says so: the refusal carries the layer's status.
    let conflict = app(
        layer(&fx).busy_status(BusyStatus::Conflict).refusal(hook),
        &seen,
    );
    let response = call(&conflict, "/orders/1").await;
    assert_eq!(refusal_header(&response), Some("lock-busy"));
    assert!(text(response).await.starts_with("Lock 409 "));
    drop(first);
    assert!(fx.wait_free("http/order:1", Duration::from_secs(2)).await);

    // 400s: no key, a malformed key, a key that cannot be a lock name.
    let by_header = |layer: LockLayer<Header, fn(&Refusal) -> Response<String>>| {
        Router::new()
            .route("/", get(|| async { "ran" }))
            .route_layer(layer)
    };
    let header_layer = || {
        LockLayer::builder(fx.client.clone(), Header::from_static("x-lock"))
            .refusal(hook as fn(&Refusal) -> Response<String>)
            .build()
            .expect("valid settings")
    };
    let response = by_header(header_layer())
        .oneshot(get_request("/"))
        .await
        .expect("infallible");
    assert_eq!(refusal_header(&response), Some("missing-key"));
    assert_eq!(text(response).await, "Lock 400 0");
    let twice = Request::get("/")
        .header("x-lock", "a")
        .header("x-lock", "b")
        .body(Body::empty())
        .expect("request");
    let response = by_header(header_layer())
        .oneshot(twice)
        .await
        .expect("infallible");
    assert_eq!(refusal_header(&response), Some("invalid-key"));
    let too_long = |_: &Request<Body>| Some("k".repeat(distlock::MAX_NAME_LEN + 1));
    let response = Router::new()
        .route("/", get(|| async { "ran" }))
        .route_layer(
            LockLayer::builder(fx.client.clone(), too_long)
                .refusal(hook)
                .build()
                .expect("valid settings"),
        )
        .oneshot(get_request("/"))
        .await
        .expect("infallible");
    assert_eq!(refusal_header(&response), Some("unusable-key"));
    let why = response.extensions().get::<Refusal>().expect("refusal");
    assert!(matches!(
        why.error().and_then(|e| e.downcast_ref::<LockError>()),
        Some(LockError::InvalidName(_))
    ));

    // 503: the lease was lost while the handler ran.
    let losing = app(
        layer(&fx)
            .ttl(Duration::from_millis(300))
            .watchdog(false)
            .refusal(hook),
        &seen,
    );
    let response = call(&losing, "/slow/2/3000").await;
    assert_eq!(refusal_header(&response), Some("lease-lost"));
    assert_eq!(retry_after(&response), 1);
    assert_eq!(text(response).await, "Lock 503 1");
}

async fn problem_details_are_json_with_the_rfc_9457_members(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let app = app(layer(&fx).refusal(ProblemDetails::new()), &seen);
    let first = call(&app, "/orders/1").await;
    let busy = call(&app, "/orders/1").await;
    assert_eq!(busy.status(), StatusCode::LOCKED);
    assert_eq!(
        busy.headers()[http::header::CONTENT_TYPE],
        "application/problem+json"
    );
    let secs = retry_after(&busy);
    let json: serde_json::Value = serde_json::from_str(&text(busy).await).expect("JSON");
    assert_eq!(json["type"], "about:blank");
    assert_eq!(json["title"], "Locked");
    assert_eq!(json["status"], 423);
    assert_eq!(
        json["detail"],
        "locked: another request holds this resource"
    );
    assert_eq!(json["retry_after"], secs);
    assert!(
        !json.to_string().contains("order:1"),
        "the lock name is not sent"
    );
    drop(first);
}

/// What an outer middleware saw: status, and the lock name with its fence or the refusal's
/// reason.
type Log = Arc<Mutex<Vec<(StatusCode, String)>>>;

async fn an_outer_layer_reads_the_held_lock_and_the_refusal(fx: Fixture) {
    let seen = Arc::new(Seen::default());
    let log = Log::default();
    let app = app(layer(&fx), &seen).layer(middleware::from_fn({
        let log = Arc::clone(&log);
        move |request: AxumRequest, next: Next| {
            let log = Arc::clone(&log);
            async move {
                let response: AxumResponse = next.run(request).await;
                let what = match (
                    response.extensions().get::<HeldLock>(),
                    response.extensions().get::<Refusal>(),
                ) {
                    (Some(lock), _) => format!(
                        "{} fence {}",
                        lock.name(),
                        lock.fence().await.expect("fence")
                    ),
                    (None, Some(refusal)) => format!(
                        "{} refused: {}",
                        refusal.key().unwrap_or("?"),
                        refusal.reason()
                    ),
                    (None, None) => "nothing".to_owned(),
                };
                log.lock().expect("log").push((response.status(), what));
                response
            }
        }
    }));
    let first = call(&app, "/orders/1").await;
    let busy = call(&app, "/orders/1").await;
    assert_eq!(busy.status(), StatusCode::LOCKED);
    let fence: u64 = text(first).await.parse().expect("fence");
    let log = log.lock().expect("log").clone();
    assert_eq!(
        log,
        [
            (StatusCode::OK, format!("http/order:1 fence {fence}")),
            (
                StatusCode::LOCKED,
                "http/order:1 refused: lock-busy".to_owned()
            ),
        ]
    );
}

/// The lock layer and a handler that takes the same lock through the runtime API (returning
/// `Result<_, LockError>`) answer a busy lock alike: `423`, the holder's `Retry-After`, the
/// same text.
async fn a_handler_on_the_runtime_api_answers_like_the_layer(fx: Fixture) {
    async fn direct(
        State(client): State<Client>,
        Path(id): Path<u64>,
    ) -> Result<String, LockError> {
        let lease = client.lock(format!("http/order:{id}")).acquire().await?;
        let fence = lease.fence().await.expect("fence");
        lease.release().await?;
        Ok(fence.to_string())
    }
    let app: Router = Router::new()
        .route(
            "/layer/{id}",
            get(|lock: HeldLock| async move { lock.fence().await.expect("fence").to_string() })
                .route_layer(LockLayer::new(
                    fx.client.clone(),
                    Prefixed::new("order:", PathSegment(1)),
                )),
        )
        .route("/direct/{id}", get(direct))
        .with_state(fx.client.clone());
    let holder = fx
        .another_client()
        .await
        .lock("http/order:1")
        .ttl(Duration::from_secs(5))
        .acquire()
        .await
        .expect("free");

    let by_layer = app
        .clone()
        .oneshot(get_request("/layer/1"))
        .await
        .expect("infallible");
    let by_handler = app
        .clone()
        .oneshot(get_request("/direct/1"))
        .await
        .expect("infallible");
    for response in [&by_layer, &by_handler] {
        assert_eq!(response.status(), StatusCode::LOCKED);
        assert_eq!(
            response.headers()[http::header::CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
        let secs = retry_after(response);
        assert!((4..=5).contains(&secs), "the holder's ttl: {secs}");
    }
    assert_eq!(text(by_layer).await, text(by_handler).await);

    holder.release().await.expect("release");
    let ok = app
        .oneshot(get_request("/direct/1"))
        .await
        .expect("infallible");
    assert_eq!(ok.status(), StatusCode::OK);
}

/// The refusal's `debug` event names the lock and the `Retry-After`; no `distlock-tower:`
/// prefix.
#[tokio::test]
async fn a_refusal_is_a_debug_event() {
    let capture = Capture::start(tracing::Level::DEBUG);
    let client = Client::in_memory();
    let holder = client.lock("http/job").acquire().await.expect("free");
    let response = job_app(&client)
        .oneshot(get_request("/"))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::LOCKED);
    let refusal = response.extensions().get::<Refusal>().expect("refusal");
    assert_eq!(
        (refusal.refused_by(), refusal.reason()),
        (RefusedBy::Lock, &Reason::LockBusy)
    );
    let logged = capture.text();
    let line = logged
        .lines()
        .find(|l| l.contains("request refused"))
        .unwrap_or_else(|| panic!("no refusal event in {logged:?}"));
    for field in [
        "DEBUG",
        "distlock_tower::lock",
        "lock=#",
        "retry_after=30",
        "status=423",
    ] {
        assert!(line.contains(field), "{field} in {line}");
    }
    assert!(!logged.contains("distlock-tower:"), "{logged}");
    drop(holder);
}

/// A router whose one route is locked on the fixed key `job`.
fn job_app(client: &Client) -> Router {
    Router::new()
        .route("/", get(|| async { "ran" }))
        .route_layer(LockLayer::new(client.clone(), |_: &Request<Body>| {
            Some("job".to_owned())
        }))
}
