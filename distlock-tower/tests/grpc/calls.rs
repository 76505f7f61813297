//! gRPC calls through the layers, over TCP, on both stores.

use std::net::SocketAddr;
use std::time::Duration;

use axum::routing::get;
use distlock::ratelimit::{Policy, Rate, RateLimiter};
use distlock_tower::extract::Header;
use distlock_tower::refusal::{Grpc, ProblemDetails};
use distlock_tower::{ConcurrencyLimitLayer, LockLayer, RateLimitLayer};
use http::StatusCode;
use http_body::Body as _;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tonic::Code;
use tonic::metadata::MetadataValue;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use tonic_types::StatusExt as _;
use tower::ServiceExt as _;

use crate::common::{grpc_channel, http_client};
use crate::support::fixture::{Fixture, on_both_stores};

on_both_stores!(
    a_spent_budget_is_resource_exhausted_with_retry_info,
    http_and_grpc_calls_share_one_budget,
    a_held_lock_is_aborted_with_the_holders_ttl,
    a_full_concurrency_limit_is_unavailable_while_a_stream_runs
);

/// The rate-limit and lock answers with the budget and the lock on a Redis Cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster() {
    a_spent_budget_is_resource_exhausted_with_retry_info(Fixture::on_shared_cluster("grpc").await)
        .await;
    a_held_lock_is_aborted_with_the_holders_ttl(Fixture::on_shared_cluster("grpc").await).await;
}

/// The metadata (header) that carries the rate-limit key.
const API_KEY: &str = "x-api-key";

/// A limiter on the fixture's store: `per_minute` calls a minute, all of them at once.
fn limiter(fx: &Fixture, name: &str, per_minute: u32) -> RateLimiter {
    let rate = Rate::per_minute(per_minute)
        .and_then(|r| r.burst(per_minute))
        .expect("valid rate");
    fx.client
        .rate_limiter(Policy::gcra(name, rate).expect("valid policy"))
        .build()
        .expect("valid limiter")
}

/// A loopback listener on a free port.
async fn listen() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("bound address");
    (listener, addr)
}

/// Serves `grpc.health.v1.Health` with tonic's own server (HTTP/2) on 127.0.0.1, `$layer` in
/// front of it. A macro: spelling out the bounds `Server::layer` puts on a layer would be
/// longer than the body.
macro_rules! serve_grpc {
    ($layer:expr) => {{
        let (listener, addr) = listen().await;
        let router = Server::builder()
            .layer($layer)
            .add_service(tonic_health::server::health_reporter().1);
        let task: JoinHandle<()> = tokio::spawn(async move {
            router
                .serve_with_incoming(TcpIncoming::from(listener))
                .await
                .expect("the gRPC server runs");
        });
        (addr, task)
    }};
}

/// A tonic client of the health service at `addr`, on its own HTTP/2 connection.
async fn client(addr: SocketAddr) -> HealthClient<Channel> {
    HealthClient::new(grpc_channel(addr).await)
}

/// `Health/Check` of the whole server, with `value` in the metadata `name`.
async fn check(
    client: &mut HealthClient<Channel>,
    name: &'static str,
    value: &str,
) -> Result<tonic::Response<HealthCheckResponse>, tonic::Status> {
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    });
    let value: MetadataValue<_> = value.parse().expect("an ASCII value");
    request.metadata_mut().insert(name, value);
    client.check(request).await
}

/// Asserts that the call passed and the service answered it.
fn assert_served(answer: Result<tonic::Response<HealthCheckResponse>, tonic::Status>, what: &str) {
    match answer {
        Ok(response) => assert_eq!(
            response.get_ref().status,
            ServingStatus::Serving as i32,
            "{what}"
        ),
        Err(status) => panic!("{what}: refused with {status:?}"),
    }
}

/// The `RetryInfo` delay of `status`; panics if there is none.
fn retry_delay(status: &tonic::Status) -> Duration {
    status
        .get_error_details()
        .retry_info()
        .and_then(|info| info.retry_delay)
        .unwrap_or_else(|| panic!("a RetryInfo with a delay in {status:?}"))
}

/// The `ErrorInfo` reason of `status`.
fn error_reason(status: &tonic::Status) -> String {
    status
        .get_error_details()
        .error_info()
        .map(|info| info.reason.clone())
        .unwrap_or_else(|| panic!("an ErrorInfo in {status:?}"))
}

/// Three calls a minute for a key through tonic's server: three pass, the fourth is
/// `RESOURCE_EXHAUSTED` with a `RetryInfo` of at most the policy's 20 s interval, which
/// tonic's client decodes from the trailers-only answer; the layer's own headers arrive as
/// metadata; another key has its own budget.
async fn a_spent_budget_is_resource_exhausted_with_retry_info(fx: Fixture) {
    let layer =
        RateLimitLayer::builder(limiter(&fx, "grpc-calls", 3), Header::from_static(API_KEY))
            .refusal(Grpc::new())
            .build()
            .expect("valid layer");
    let (addr, _server) = serve_grpc!(layer);
    let mut grpc = client(addr).await;
    for n in 1..=3 {
        assert_served(check(&mut grpc, API_KEY, "k1").await, &format!("call {n}"));
    }
    let refused = check(&mut grpc, API_KEY, "k1")
        .await
        .expect_err("the fourth call is over the budget");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused
            .message()
            .starts_with("too many requests; retry in "),
        "{refused:?}"
    );
    let delay = retry_delay(&refused);
    assert!(
        delay > Duration::ZERO && delay <= Duration::from_secs(20),
        "RetryInfo {delay:?}: within one interval of a 3-a-minute policy"
    );
    assert_eq!(error_reason(&refused), "TOO_MANY_REQUESTS");
    let info = refused.get_error_details();
    assert_eq!(
        info.error_info().map(|i| i.metadata["policy"].as_str()),
        Some("grpc-calls")
    );
    // What the layer adds after the hook is metadata to a gRPC client.
    let metadata = refused.metadata();
    let retry_after: u64 = metadata
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in the metadata");
    assert!((1..=20).contains(&retry_after), "Retry-After {retry_after}");
    assert!(metadata.get("ratelimit").is_some(), "{metadata:?}");
    assert!(metadata.get("ratelimit-policy").is_some(), "{metadata:?}");

    assert_served(check(&mut grpc, API_KEY, "k2").await, "another key");
    // A call without the key is the caller's error, not a quota.
    let keyless = grpc
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect_err("no key");
    assert_eq!(keyless.code(), Code::InvalidArgument, "{keyless:?}");
    assert_eq!(keyless.message(), "this request has no rate-limit key");
}

/// One layer in front of an HTTP route and the gRPC service on one listener (axum serving
/// HTTP/1.1 and HTTP/2): HTTP requests and gRPC calls with the same key spend one budget of
/// four, and once it is spent each face is refused in its own protocol: a `429` problem
/// document over HTTP, `RESOURCE_EXHAUSTED` over gRPC.
async fn http_and_grpc_calls_share_one_budget(fx: Fixture) {
    let layer =
        RateLimitLayer::builder(limiter(&fx, "one-budget", 4), Header::from_static(API_KEY))
            .refusal(Grpc::new().or_http(ProblemDetails::new()))
            .build()
            .expect("valid layer");
    let app = tonic::service::Routes::new(tonic_health::server::health_reporter().1)
        .into_axum_router()
        .route("/status", get(|| async { "ok" }))
        .layer(layer);
    let (listener, addr) = listen().await;
    let served = app.clone();
    let _server = tokio::spawn(async move {
        axum::serve(listener, served).await.expect("server runs");
    });
    let http = http_client();
    let get = |key: &'static str| {
        http.get(format!("http://{addr}/status"))
            .header(API_KEY, key)
            .send()
    };
    let mut grpc = client(addr).await;

    // Two of each, interleaved, spend the four.
    for n in 1..=2 {
        let response = get("tenant").await.expect("HTTP request");
        assert_eq!(response.status(), StatusCode::OK, "HTTP request {n}");
        assert_served(
            check(&mut grpc, API_KEY, "tenant").await,
            &format!("gRPC call {n}"),
        );
    }
    let refused = check(&mut grpc, API_KEY, "tenant")
        .await
        .expect_err("the budget is spent by both faces");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let delay = retry_delay(&refused);
    assert!(
        delay > Duration::ZERO && delay <= Duration::from_secs(15),
        "{delay:?}"
    );
    let response = get("tenant").await.expect("HTTP request");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    assert!(response.headers().get("grpc-status").is_none());
    assert!(response.headers().contains_key("retry-after"));

    // Another tenant's budget is untouched, on both faces.
    let response = get("other").await.expect("HTTP request");
    assert_eq!(response.status(), StatusCode::OK);
    assert_served(check(&mut grpc, API_KEY, "other").await, "another tenant");

    // The refusal is a head alone: its body is at its end before it is polled, so HTTP/2
    // sends one HEADERS frame that ends the stream (a trailers-only answer).
    let request = http::Request::post("/grpc.health.v1.Health/Check")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header(API_KEY, "tenant")
        .body(axum::body::Body::empty())
        .expect("request");
    let response = app.oneshot(request).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["grpc-status"], "8");
    assert!(response.body().is_end_stream(), "no DATA frame");
}

/// The lock layer in front of tonic's server: a call whose lock another holder has is
/// `ABORTED`, with the holder's remaining ttl as its `RetryInfo`; other locks pass.
async fn a_held_lock_is_aborted_with_the_holders_ttl(fx: Fixture) {
    let layer = LockLayer::builder(fx.client.clone(), Header::from_static("x-job"))
        .refusal(Grpc::new())
        .build()
        .expect("valid layer");
    let (addr, _server) = serve_grpc!(layer);
    let mut grpc = client(addr).await;
    assert_served(check(&mut grpc, "x-job", "job:1").await, "a free lock");

    let holder = fx
        .client
        .lock("http/job:1")
        .ttl(Duration::from_secs(20))
        .acquire()
        .await
        .expect("the layer released it");
    let refused = check(&mut grpc, "x-job", "job:1")
        .await
        .expect_err("the lock is held");
    assert_eq!(refused.code(), Code::Aborted, "{refused:?}");
    assert_eq!(
        refused.message(),
        "locked: another request holds this resource"
    );
    let delay = retry_delay(&refused);
    assert!(
        delay > Duration::ZERO && delay <= Duration::from_secs(20),
        "the holder's ttl: {delay:?}"
    );
    assert_eq!(error_reason(&refused), "LOCK_BUSY");
    assert_served(check(&mut grpc, "x-job", "job:2").await, "another lock");

    holder.release().await.expect("released");
    assert_served(
        check(&mut grpc, "x-job", "job:1").await,
        "the lock once released",
    );
}

/// The concurrency limit in front of tonic's server, one call at a time per tenant: a
/// server-streaming `Health/Watch` holds the tenant's permit while its stream is open, so a
/// `Check` meanwhile is `UNAVAILABLE` with the layer's `retry_after` as its `RetryInfo`;
/// another tenant passes; once the client drops the stream, the permit comes back.
async fn a_full_concurrency_limit_is_unavailable_while_a_stream_runs(fx: Fixture) {
    let wait = Duration::from_secs(2);
    let layer =
        ConcurrencyLimitLayer::builder(fx.client.clone(), Header::from_static("x-tenant"), 1)
            .retry_after(wait)
            .refusal(Grpc::new())
            .build()
            .expect("valid layer");
    let (addr, _server) = serve_grpc!(layer);
    let mut grpc = client(addr).await;

    let mut watch = tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    });
    watch
        .metadata_mut()
        .insert("x-tenant", MetadataValue::from_static("t1"));
    let mut stream = grpc
        .clone()
        .watch(watch)
        .await
        .expect("the stream opens")
        .into_inner();
    let first = stream
        .message()
        .await
        .expect("a status")
        .expect("the stream is open");
    assert_eq!(first.status, ServingStatus::Serving as i32);

    let refused = check(&mut grpc, "x-tenant", "t1")
        .await
        .expect_err("t1's one permit is the stream's");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert_eq!(retry_delay(&refused), wait);
    assert_eq!(error_reason(&refused), "AT_CAPACITY");
    assert_served(check(&mut grpc, "x-tenant", "t2").await, "another tenant");

    // The client goes away: the server drops the stream's body, and with it the permit (the
    // release runs in the background, so give it a moment).
    drop(stream);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match check(&mut grpc, "x-tenant", "t1").await {
            Ok(_) => break,
            Err(status) if status.code() == Code::Unavailable => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the permit never came back: {status:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(status) => panic!("unexpected {status:?}"),
        }
    }
}
