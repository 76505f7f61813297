//! The fixture (a client on one of the two stores), a small axum app, requests with a peer
//! address, a TCP server and client, and a parser for the rate-limit fields.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use distlock::ratelimit::{Policy, Rate, RateLimiter};
use http::{Request, Response};
use tower::ServiceExt;

pub(crate) use crate::common::{header, http_client, retry_after, serve, text};
pub(crate) use crate::support::fixture::{Fixture, on_both_stores};

/// The peer address of the requests the tests send as one client.
pub const PEER: &str = "203.0.113.9:5000";

/// A GCRA policy `name`: `per_minute` requests a minute, `burst` at once.
pub fn gcra(name: &str, per_minute: u32, burst: u32) -> Policy {
    Policy::gcra(
        name,
        Rate::per_minute(per_minute)
            .and_then(|r| r.burst(burst))
            .expect("valid rate"),
    )
    .expect("valid policy")
}

/// A limiter on the fixture's client with [`gcra`]`(name, per_minute, burst)`.
pub fn gcra_limiter(fx: &Fixture, name: &str, per_minute: u32, burst: u32) -> RateLimiter {
    fx.client
        .rate_limiter(gcra(name, per_minute, burst))
        .build()
        .expect("valid limiter")
}

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
