//! Store failures on a real `redis-server`: the layer answers 503 quickly and never errors.

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::Client;
use http::StatusCode;

use crate::app::{Fixture, Seen, app, call, http_client, layer, retry_after, serve, text};
use crate::support::RedisServer;
use crate::support::fixture::connect_with_timeout;

/// A fixture whose client gives up on a command after `timeout`.
async fn fixture_with_timeout(timeout: Duration) -> Fixture {
    let server = RedisServer::start();
    let client = connect_with_timeout(&server.url(), timeout).await;
    Fixture::with_client(client, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_is_503_quickly() {
    let mut fx = fixture_with_timeout(Duration::from_millis(500)).await;
    let seen = Arc::new(Seen::default());
    let app = app(layer(&fx).wait(Duration::from_secs(5)), &seen);
    assert_eq!(call(&app, "/orders/1").await.status(), StatusCode::OK);

    fx.server.as_mut().expect("redis fixture").kill();
    let started = Instant::now();
    let response = call(&app, "/orders/1").await;
    let elapsed = started.elapsed();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry_after(&response), 1, "503 says when to retry");
    assert!(text(response).await.contains("unavailable"));
    // Bounded by the client's 2 s response timeout, not by the 5 s wait.
    assert!(
        elapsed < Duration::from_secs(3),
        "answered after {elapsed:?}"
    );
    eprintln!("503 after {elapsed:?} with redis-server killed");

    // And over TCP.
    let (addr, _server) = serve(app).await;
    let started = Instant::now();
    let response = http_client()
        .get(format!("http://{addr}/orders/2"))
        .send()
        .await
        .expect("the server answers");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        response
            .headers()
            .get(http::header::RETRY_AFTER)
            .map(|v| v.as_bytes()),
        Some(&b"1"[..]),
        "503 over TCP says when to retry"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "answered after {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_frozen_is_503_after_the_response_timeout() {
    let fx = fixture_with_timeout(Duration::from_millis(300)).await;
    let server = fx.server.as_ref().expect("redis fixture");
    let seen = Arc::new(Seen::default());
    let app = app(layer(&fx), &seen);
    assert_eq!(call(&app, "/orders/1").await.status(), StatusCode::OK);

    let _frozen = server.stop_guard();
    let started = Instant::now();
    let response = call(&app, "/orders/1").await;
    let elapsed = started.elapsed();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        elapsed >= Duration::from_millis(250),
        "answered after {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(2),
        "answered after {elapsed:?}"
    );
}

/// With Redis killed, the layer (through a hook, and by default) and a handler that calls the
/// runtime API (`IntoResponse` for `LockError`) all answer `503` with `Retry-After: 1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_is_the_same_503_from_the_layer_and_from_a_handler() {
    use axum::Router;
    use axum::body::Body;
    use axum::extract::State;
    use axum::routing::get;
    use distlock::LockError;
    use distlock_tower::lock::LockLayer;
    use distlock_tower::refusal::{Reason, Refusal};
    use http::{Request, Response};
    use tower::ServiceExt;

    async fn direct(State(client): State<Client>) -> Result<String, LockError> {
        let lease = client.lock("job").acquire().await?;
        Ok(lease.fence().await.expect("fence").to_string())
    }
    let mut fx = fixture_with_timeout(Duration::from_millis(300)).await;
    let hook = |refusal: &Refusal| {
        let mut response = Response::new(format!("hook: {}", refusal.reason()));
        *response.status_mut() = refusal.status();
        response
    };
    let job = |_: &Request<Body>| Some("job".to_owned());
    let app: Router = Router::new()
        .route(
            "/layer",
            get(|| async { "ran" }).route_layer(LockLayer::new(fx.client.clone(), job)),
        )
        .route(
            "/hook",
            get(|| async { "ran" }).route_layer(
                LockLayer::builder(fx.client.clone(), job)
                    .refusal(hook)
                    .build()
                    .expect("valid settings"),
            ),
        )
        .route("/direct", get(direct))
        .with_state(fx.client.clone());
    fx.server.as_mut().expect("redis fixture").kill();
    let mut bodies = Vec::new();
    for uri in ["/layer", "/hook", "/direct"] {
        let response = app
            .clone()
            .oneshot(Request::get(uri).body(Body::empty()).expect("request"))
            .await
            .expect("infallible");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "{uri}");
        assert_eq!(retry_after(&response), 1, "{uri}");
        if uri == "/hook" {
            let why = response.extensions().get::<Refusal>().expect("refusal");
            assert_eq!(why.reason(), &Reason::StoreUnavailable);
        }
        bodies.push(text(response).await);
    }
    assert_eq!(bodies[1], "hook: store-unavailable");
    assert_eq!(
        bodies[0], bodies[2],
        "the handler answers as the layer does"
    );
}
