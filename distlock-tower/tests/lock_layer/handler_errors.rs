//! A handler's own distlock errors, answered as the layers answer theirs (issue 29 §2), and
//! every `500` logged once at ERROR with its reason, over real TCP.

use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::get;
use distlock::Client;
use distlock::ratelimit::{Policy, Rate, RateLimiter};
use distlock_tower::concurrency::HeldPermit;
use distlock_tower::extract::{PathSegment, Prefixed};
use distlock_tower::lock::{HeldLock, LockLayer};
use distlock_tower::rate_limit::RateLimitLayer;
use distlock_tower::refusal::{ProblemDetails, Rendered};
use http::{Request, StatusCode};

use crate::app::{Fixture, http_client, http_get, on_both_stores, serve};
use crate::traces::Capture;

on_both_stores!(handler_errors_answer_as_the_layers_do);

/// What a handler needs: the client, and a limiter for the rate-limit routes.
#[derive(Clone)]
struct Shop {
    client: Client,
    limiter: RateLimiter,
}

/// Takes `http/order:{id}` (the lock layer's name for `order:{id}`) through the runtime
/// API; a busy lock is the handler's own error.
async fn settle(
    State(shop): State<Shop>,
    Path(id): Path<String>,
) -> Result<String, Rendered<ProblemDetails>> {
    let lease = shop
        .client
        .lock(format!("http/order:{id}"))
        .acquire()
        .await?;
    Ok(lease.fence().await.expect("fence").to_string())
}

/// Checks a subject the limiter cannot use (too long to be a key).
async fn check_unusable(State(shop): State<Shop>) -> Result<String, Rendered<ProblemDetails>> {
    let subject = "x".repeat(distlock::MAX_NAME_LEN + 1);
    let decision = shop.limiter.check(&subject).await?;
    Ok(decision.remaining.to_string())
}

fn shop_app(client: &Client, limiter: &RateLimiter) -> Router {
    let too_long = |_: &Request<axum::body::Body>| Some("x".repeat(distlock::MAX_NAME_LEN + 1));
    let locked = LockLayer::builder(client.clone(), Prefixed::new("order:", PathSegment(1)))
        .refusal(ProblemDetails::new())
        .build()
        .expect("valid settings");
    let limited = RateLimitLayer::builder(limiter.clone(), too_long)
        .refusal(ProblemDetails::new())
        .build()
        .expect("valid settings");
    Router::new()
        .route("/layer/{id}", get(|| async { "ran" }).route_layer(locked))
        .route("/direct/{id}", get(settle))
        .route("/limited", get(|| async { "ran" }).route_layer(limited))
        .route("/check", get(check_unusable))
        .with_state(Shop {
            client: client.clone(),
            limiter: limiter.clone(),
        })
}

/// Status, `Content-Type`, `Retry-After` and the problem document of a response.
async fn answer(
    http: &reqwest::Client,
    url: String,
) -> (StatusCode, String, Option<u64>, serde_json::Value) {
    let response = http.get(url).send().await.expect("request");
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().expect("ASCII").to_owned())
    };
    let content_type = header("content-type").unwrap_or_default();
    let retry_after = header("retry-after").map(|v| v.parse().expect("whole seconds"));
    let status = response.status();
    let body = response.text().await.expect("body");
    let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{body:?}: {e}"));
    (status, content_type, retry_after, json)
}

/// With the layers answering problem documents, a handler that returns
/// `Rendered<ProblemDetails>` answers the same document for the same situation: a busy lock
/// (`423`, the holder's ttl in `Retry-After`) and a key the limiter cannot use (`400`).
async fn handler_errors_answer_as_the_layers_do(fx: Fixture) {
    let limiter = fx
        .client
        .rate_limiter(Policy::gcra("api", Rate::per_minute(60).expect("rate")).expect("policy"))
        .build()
        .expect("valid limiter");
    let (addr, _server) = serve(shop_app(&fx.client, &limiter)).await;
    let http = http_client();
    let holder = fx
        .another_client()
        .await
        .lock("http/order:1")
        .ttl(Duration::from_secs(20))
        .acquire()
        .await
        .expect("free");

    let (layer_status, layer_type, layer_wait, layer_json) =
        answer(&http, format!("http://{addr}/layer/1")).await;
    let (own_status, own_type, own_wait, own_json) =
        answer(&http, format!("http://{addr}/direct/1")).await;
    assert_eq!(
        (layer_status, own_status),
        (StatusCode::LOCKED, StatusCode::LOCKED)
    );
    assert_eq!(layer_type, "application/problem+json");
    assert_eq!(own_type, layer_type);
    for wait in [layer_wait, own_wait] {
        let wait = wait.expect("Retry-After");
        assert!((1..=20).contains(&wait), "the holder's ttl: {wait}");
    }
    for field in ["type", "title", "status", "detail"] {
        assert_eq!(own_json[field], layer_json[field], "{field}");
    }
    assert_eq!(own_json["retry_after"], own_wait.expect("Retry-After"));
    holder.release().await.expect("release");

    let (layer_status, layer_type, _, layer_json) =
        answer(&http, format!("http://{addr}/limited")).await;
    let (own_status, own_type, own_wait, own_json) =
        answer(&http, format!("http://{addr}/check")).await;
    assert_eq!(
        (layer_status, own_status),
        (StatusCode::BAD_REQUEST, StatusCode::BAD_REQUEST)
    );
    assert_eq!(
        (layer_type.as_str(), own_type.as_str()),
        ("application/problem+json", "application/problem+json")
    );
    assert_eq!(own_wait, None);
    assert_eq!(own_json, layer_json, "the same document");
    assert_eq!(
        own_json["detail"],
        "this request's rate-limit key is unusable"
    );
}

/// A scheduled job whose `at_most` is shorter than its `at_least`: a configuration mistake
/// the runtime refuses with `LockError::InvalidConfig`.
async fn misconfigured_job(client: Client) -> Result<Option<()>, distlock::LockError> {
    client
        .job("nightly")
        .at_least(Duration::from_secs(60))
        .at_most(Duration::from_secs(1))
        .run(|_| async {})
        .await
}

/// Every `500` that the runtime's `IntoResponse`, [`Rendered`] or the layers' extractors make
/// is one ERROR event with its reason; the other answers add none.
#[tokio::test]
async fn every_500_is_logged_once_at_error() {
    let capture = Capture::start(tracing::Level::WARN);
    let client = Client::in_memory();
    let app =
        Router::new()
            .route(
                "/job/rendered",
                get(|State(client): State<Client>| async move {
                    misconfigured_job(client)
                        .await
                        .map(|_| "ran")
                        .map_err(Rendered::<ProblemDetails>::from)
                }),
            )
            .route(
                "/job/plain",
                get(|State(client): State<Client>| async move {
                    misconfigured_job(client).await.map(|_| "ran")
                }),
            )
            .route(
                "/held",
                get(|lock: HeldLock| async move { lock.fence().await.expect("fence").to_string() }),
            )
            .route(
                "/permit",
                get(|permit: HeldPermit| async move {
                    permit.fence().await.expect("fence").to_string()
                }),
            )
            .route(
                "/busy/{id}",
                get(
                    |State(client): State<Client>, Path(id): Path<String>| async move {
                        let lease = client.lock(id).acquire().await?;
                        Ok::<_, distlock::LockError>(lease.fence().await?.to_string())
                    },
                ),
            )
            .with_state(client.clone());
    let (addr, _server) = serve(app).await;
    let http = http_client();
    let _holder = client.lock("taken").acquire().await.expect("free");

    let mut seen = 0;
    for (path, status, reason) in [
        (
            "/job/rendered",
            500,
            "min_hold: 1m is longer than max_hold, 1s",
        ),
        (
            "/job/plain",
            500,
            "min_hold: 1m is longer than max_hold, 1s",
        ),
        ("/held", 500, "is the route behind a LockLayer?"),
        (
            "/permit",
            500,
            "is the route behind a ConcurrencyLimitLayer?",
        ),
        ("/busy/taken", 423, ""),
    ] {
        let response = http_get(&http, format!("http://{addr}{path}")).await;
        assert_eq!(response.status().as_u16(), status, "{path}");
        let body = response.text().await.expect("body");
        assert!(
            !body.contains("min_hold"),
            "the reason stays in the logs: {body}"
        );
        let logged = capture.text();
        let errors: Vec<&str> = logged.lines().filter(|l| l.contains(" ERROR ")).collect();
        if status == 500 {
            seen += 1;
            assert_eq!(errors.len(), seen, "one ERROR line for {path}: {logged}");
            let last = errors.last().expect("an ERROR line");
            assert!(last.contains(reason), "{path}: {reason} in {last}");
            assert!(last.contains("answering 500"), "{last}");
        } else {
            assert_eq!(errors.len(), seen, "no ERROR line for {path}: {logged}");
        }
    }
}
