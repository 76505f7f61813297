//! The readiness route over real TCP (issue 29 §3): 200 with every server up, 503 once the
//! store is gone, each time with a JSON report that names the server.

use std::time::Duration;

use axum::Router;
use distlock::Client;
use http::StatusCode;

use crate::app::{http_client, serve};
use crate::support::RedisServer;
use crate::support::fixture::connect_with_timeout;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_answers_200_while_the_store_answers_and_503_after() {
    let mut server = RedisServer::start();
    let client = connect_with_timeout(&server.url(), Duration::from_millis(500)).await;
    let app = Router::new().route("/ready", distlock_tower::health::readiness(client));
    let (addr, _task) = serve(app).await;
    let http = http_client();
    let url = format!("http://{addr}/ready");

    let response = http.get(&url).send().await.expect("GET /ready");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"].to_str().ok(),
        Some("application/json")
    );
    let body: serde_json::Value =
        serde_json::from_str(&response.text().await.expect("body")).expect("JSON");
    assert_eq!(body["ready"], true);
    assert_eq!(body["store"], "redis");
    assert_eq!(body["nodes"][0]["up"], true);
    assert!(body["nodes"][0]["latency_ms"].as_f64().is_some(), "{body}");

    server.kill();
    let response = http.get(&url).send().await.expect("GET /ready");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: serde_json::Value =
        serde_json::from_str(&response.text().await.expect("body")).expect("JSON");
    assert_eq!(body["ready"], false);
    assert_eq!(body["nodes"][0]["up"], false);
    assert!(
        body["nodes"][0]["error"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "{body}"
    );

    let memory = Router::new().route(
        "/ready",
        distlock_tower::health::readiness(Client::in_memory()),
    );
    let (addr, _task) = serve(memory).await;
    let response = http
        .get(format!("http://{addr}/ready"))
        .send()
        .await
        .expect("GET /ready");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.text().await.expect("body"),
        r#"{"ready":true,"store":"memory","nodes":[]}"#
    );
}
