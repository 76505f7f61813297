//! Helpers the tower crate's test binaries share (`lock_layer`, `rate_limit`, `grpc`, `rls`):
//! a response's body and headers, a server and an HTTP client for the tests over real TCP,
//! requests with a malformed key, and a gRPC channel.
// Each binary uses only some of them.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use distlock_tower::extract::MAX_KEY_LEN;
use http::{HeaderValue, Request, Response};

/// The whole body as text.
pub async fn text(response: Response<Body>) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body reads");
    String::from_utf8(bytes.to_vec()).expect("UTF-8 body")
}

/// The value of header `name`, if set; panics if it is not ASCII.
pub fn header<'a, B>(response: &'a Response<B>, name: &str) -> Option<&'a str> {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().expect("ASCII header"))
}

/// `Retry-After` in seconds; panics if it is missing or not a number.
pub fn retry_after<B>(response: &Response<B>) -> u64 {
    header(response, "retry-after")
        .expect("Retry-After is set")
        .parse()
        .expect("whole seconds")
}

/// Serves `app` on 127.0.0.1 on a free port, with the peer's address in `ConnectInfo`; the
/// server stops with the test's runtime.
pub async fn serve(app: axum::Router) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("bound address");
    let task = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .expect("server runs");
    });
    (addr, task)
}

/// A gRPC channel to the server at `addr`, on its own HTTP/2 connection (10 s to connect,
/// 30 s a call).
pub async fn grpc_channel(addr: SocketAddr) -> tonic::transport::Channel {
    tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .expect("valid URI")
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(30))
        .connect()
        .await
        .expect("connects")
}

/// Checks that `response` is a layer's refusal because its client is closed for shutdown:
/// `503`, `Retry-After: 1`, and the `Refusal` extension says `ShuttingDown`.
pub fn assert_refused_for_shutdown<B>(response: &Response<B>) {
    assert_eq!(response.status(), http::StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(response, "retry-after"), Some("1"));
    let refusal = response
        .extensions()
        .get::<distlock_tower::refusal::Refusal>()
        .expect("refusal");
    assert_eq!(
        refusal.reason(),
        &distlock_tower::refusal::Reason::ShuttingDown
    );
}

/// One app for each missing-key setting a layer can have, by name: the default (`None`),
/// `reject` and `allow`, each made by `app`.
pub fn per_missing_key_setting<M, A>(
    reject: M,
    allow: M,
    app: impl Fn(Option<M>) -> A,
) -> [(&'static str, A); 3] {
    [
        ("default", app(None)),
        ("reject", app(Some(reject))),
        ("allow", app(Some(allow))),
    ]
}

/// An HTTP client with its own connection pool (no proxy, 30 s timeout).
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("HTTP client builds")
}

/// `GET /` requests whose `header` is present but unusable, each with what is wrong with it:
/// duplicated (`key` twice, or `key` and `other`), over-long, not text, not ASCII, empty,
/// whitespace only.
pub fn malformed_key_requests(
    header: &'static str,
    key: &[u8],
    other: &[u8],
) -> Vec<(&'static str, Request<Body>)> {
    let with = |values: &[&[u8]]| {
        let mut request = Request::get("/").body(Body::empty()).expect("request");
        for value in values {
            let value = HeaderValue::from_bytes(value).expect("bytes HeaderValue accepts");
            request.headers_mut().append(header, value);
        }
        request
    };
    let long = "k".repeat(MAX_KEY_LEN + 1);
    vec![
        ("duplicated", with(&[key, key])),
        ("duplicated, different", with(&[key, other])),
        ("over-long", with(&[long.as_bytes()])),
        ("not text", with(&[b"\xff\xfe"])),
        ("not ASCII", with(&["caf\u{e9}".as_bytes()])),
        ("empty", with(&[b""])),
        ("whitespace only", with(&[b" \t "])),
    ]
}
