//! The fixture (a client on one of the two stores), a small axum app, requests with a peer
//! address, a TCP server and client, and a parser for the rate-limit fields.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use http::{Request, Response};
use tokio::task::JoinHandle;
use tower::ServiceExt;

pub(crate) use crate::support::fixture::{Fixture, on_both_stores};

/// `GET /`, `GET /a`, `GET /b`, `GET /items/{id}`: each answers its route.
pub fn routes() -> Router {
    Router::new()
        .route("/", get(|| async { "root" }))
        .route("/a", get(|| async { "a" }))
        .route("/b", get(|| async { "b" }))
        .route("/items/{id}", get(|| async { "item" }))
}

/// A GET from `peer` with extra headers.
pub fn request_from(uri: &str, peer: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut builder = Request::get(uri);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let mut request = builder.body(Body::empty()).expect("valid request");
    let peer: SocketAddr = peer.parse().expect("peer address");
    request.extensions_mut().insert(ConnectInfo(peer));
    request
}

/// One request through the router.
pub async fn call(app: &Router, request: Request<Body>) -> Response<Body> {
    app.clone()
        .oneshot(request)
        .await
        .expect("axum services are infallible")
}

/// The whole body as text.
pub async fn text(response: Response<Body>) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body reads");
    String::from_utf8(bytes.to_vec()).expect("UTF-8 body")
}

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

/// One item of a `RateLimit-Policy` or `RateLimit` field: the policy name and its integer
/// parameters.
pub type FieldItem = (String, BTreeMap<String, i64>);

/// Parses a `RateLimit-Policy` or `RateLimit` value as an RFC 9651 structured-field List
/// whose members are Strings with Integer parameters, as the httpapi draft requires.
pub fn parse_field(value: &str) -> Vec<FieldItem> {
    let list: sfv::List = sfv::Parser::new(value)
        .parse()
        .unwrap_or_else(|e| panic!("{value:?} is not a structured-field list: {e}"));
    list.into_iter()
        .map(|entry| match entry {
            sfv::ListEntry::Item(item) => {
                let name = item
                    .bare_item
                    .as_string()
                    .unwrap_or_else(|| panic!("{value:?}: the policy name must be an sf-string"))
                    .as_str()
                    .to_owned();
                let params = item
                    .params
                    .iter()
                    .map(|(k, v)| {
                        let int = v
                            .as_integer()
                            .unwrap_or_else(|| panic!("{value:?}: {k:?} is not an integer"));
                        (k.as_str().to_owned(), i64::from(int))
                    })
                    .collect();
                (name, params)
            }
            other => panic!("{value:?}: expected items, got {other:?}"),
        })
        .collect()
}

/// The parsed `RateLimit-Policy` and `RateLimit` fields of a response.
pub fn fields<B>(response: &Response<B>) -> (Vec<FieldItem>, Vec<FieldItem>) {
    (
        parse_field(header(response, "ratelimit-policy").expect("RateLimit-Policy is set")),
        parse_field(header(response, "ratelimit").expect("RateLimit is set")),
    )
}

/// Serves `app` on 127.0.0.1 with the peer address in `ConnectInfo`.
pub async fn serve(app: Router) -> (SocketAddr, JoinHandle<()>) {
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

/// An HTTP client with its own connection pool.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("HTTP client builds")
}
