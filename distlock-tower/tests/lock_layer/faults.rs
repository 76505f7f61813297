//! Store failures on a real `redis-server`: the layer answers 503 quickly and never errors.

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::Client;
use http::StatusCode;

use crate::app::{Fixture, Seen, app, call, http_client, layer, retry_after, serve, text};
use crate::support::RedisServer;

/// A fixture whose client gives up on a command after `timeout`.
async fn fixture_with_timeout(timeout: Duration) -> Fixture {
    let server = RedisServer::start();
    let client = Client::builder()
        .response_timeout(timeout)
        .connect(&server.url())
        .await
        .expect("connect");
    Fixture {
        client,
        server: Some(server),
    }
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
