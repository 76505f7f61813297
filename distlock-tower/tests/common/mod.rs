//! Helpers both HTTP layers' tests use (`lock_layer`, `rate_limit`): a response's body and
//! headers, an HTTP client for the tests over real TCP, and requests with a malformed key.

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
