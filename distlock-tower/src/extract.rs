//! Request keys: which lock (or rate-limit subject) a request belongs to.
//!
//! Every layer of this crate takes an [`ExtractKey`]: a small, cloneable value that reads a
//! key out of a request, or says it has none. The layer decides what a request without a key
//! gets (see each layer's builder); an extractor only reads.
//!
//! Provided extractors:
//!
//! | extractor | key |
//! |---|---|
//! | a closure `Fn(&Request<B>) -> Option<String>` | whatever it returns |
//! | [`Header`] | the value of one header |
//! | [`PathSegment`] | one segment of the URI path, percent-decoded |
//! | [`MatchedPath`] | axum's matched route template, e.g. `/orders/{id}` |
//! | [`Prefixed`] | another extractor's key behind a fixed prefix |
//!
//! Values taken from the request are bounded by [`MAX_KEY_LEN`] bytes and must be text, so a
//! hostile client cannot make the layer build huge keys; a value that breaks these rules
//! counts as missing. Since a missing key is something every client can produce (by leaving
//! the header out), never let "no key" mean more access than "some key" would.
//!
//! ```
//! use distlock_tower::extract::{ExtractKey, Header, PathSegment, Prefixed};
//! use http::Request;
//!
//! let request = Request::get("/orders/42/items")
//!     .header("x-tenant", "acme")
//!     .body(())
//!     .unwrap();
//!
//! let order = Prefixed::new("order:", PathSegment(1));
//! assert_eq!(order.extract_key(&request).as_deref(), Some("order:42"));
//!
//! let tenant = Header::from_static("x-tenant");
//! assert_eq!(tenant.extract_key(&request).as_deref(), Some("acme"));
//!
//! // A closure works too; annotate its argument's type.
//! let method_and_path = |r: &Request<()>| Some(format!("{} {}", r.method(), r.uri().path()));
//! assert_eq!(method_and_path.extract_key(&request).as_deref(), Some("GET /orders/42/items"));
//! ```

use std::sync::Arc;

use http::{HeaderName, Request};

/// The longest value, in bytes, that the provided extractors take from a request (a header
/// value, a decoded path segment). Longer values count as missing. It leaves room for a
/// [`Prefixed`] prefix under the lock-name limit of [`distlock::MAX_NAME_LEN`].
pub const MAX_KEY_LEN: usize = 256;

/// Reads the key of a request: the name of the lock it takes, or the subject it is rate
/// limited as.
///
/// Implemented for closures `Fn(&Request<B>) -> Option<String>` and for the extractors of
/// this module. Implement it for your own type when a closure is not enough (for instance to
/// carry configuration); it must be cheap to clone, since services are cloned per connection.
pub trait ExtractKey<B>: Clone + Send + Sync + 'static {
    /// The key for this request, or `None` when it has none (the layer then applies its
    /// configured behaviour for requests without a key).
    ///
    /// Called once per request, before the inner service; it must not block.
    fn extract_key(&self, request: &Request<B>) -> Option<String>;
}

impl<B, F> ExtractKey<B> for F
where
    F: Fn(&Request<B>) -> Option<String> + Clone + Send + Sync + 'static,
{
    fn extract_key(&self, request: &Request<B>) -> Option<String> {
        self(request)
    }
}

/// The value of one request header.
///
/// Missing when the header is absent, appears more than once (two values would leave it open
/// which one the rest of the stack reads), is empty, is not visible ASCII, or is longer than
/// [`MAX_KEY_LEN`] bytes. Surrounding whitespace is trimmed.
#[derive(Clone, Debug)]
pub struct Header(pub HeaderName);

impl Header {
    /// The header named `name`.
    ///
    /// # Panics
    /// If `name` is not a valid lower-case header name (see [`HeaderName::from_static`]).
    #[must_use]
    pub fn from_static(name: &'static str) -> Self {
        Self(HeaderName::from_static(name))
    }
}

impl<B> ExtractKey<B> for Header {
    fn extract_key(&self, request: &Request<B>) -> Option<String> {
        let mut values = request.headers().get_all(&self.0).iter();
        let value = values.next()?;
        if values.next().is_some() || value.len() > MAX_KEY_LEN {
            return None;
        }
        let text = value.to_str().ok()?.trim();
        (!text.is_empty()).then(|| text.to_owned())
    }
}

/// The segment at this zero-based index of the URI path, percent-decoded: in `/orders/42`,
/// segment 0 is `orders` and segment 1 is `42`.
///
/// Decoding matters: `/orders/4%32` names the same order as `/orders/42` (axum's `Path`
/// extractor decodes it), so both must take the same lock. Invalid escapes are kept as they
/// are, as axum does. Missing when the path has no such segment, the segment is empty, or
/// it is longer than [`MAX_KEY_LEN`] bytes or not UTF-8 once decoded.
///
/// Under axum's `Router::nest`, the path the layer sees has the nesting prefix removed when
/// the layer sits on the nested router, so count segments from there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathSegment(pub usize);

impl<B> ExtractKey<B> for PathSegment {
    fn extract_key(&self, request: &Request<B>) -> Option<String> {
        let path = request.uri().path();
        let raw = path
            .strip_prefix('/')
            .unwrap_or(path)
            .split('/')
            .nth(self.0)?;
        // An escape takes three bytes for one, so a longer raw segment cannot fit once decoded.
        if raw.is_empty() || raw.len() > 3 * MAX_KEY_LEN {
            return None;
        }
        let decoded = percent_decode(raw);
        if decoded.is_empty() || decoded.len() > MAX_KEY_LEN {
            return None;
        }
        String::from_utf8(decoded).ok()
    }
}

/// Decodes `%XX` escapes; anything else, including a `%` not followed by two hex digits, is
/// kept as it is.
fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hi) = bytes.get(i + 1).and_then(|b| hex_value(*b))
            && let Some(lo) = bytes.get(i + 2).and_then(|b| hex_value(*b))
        {
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The route template axum matched, such as `/orders/{id}`: one key per route, whatever the
/// parameters. Useful to serialize a whole endpoint.
///
/// Reads the [`axum::extract::MatchedPath`] request extension, which the router sets before
/// it calls a route's layers (both `Router::layer` and `Router::route_layer`). Missing when
/// the layer runs outside a router, or on the fallback.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatchedPath;

impl<B> ExtractKey<B> for MatchedPath {
    fn extract_key(&self, request: &Request<B>) -> Option<String> {
        let matched = request.extensions().get::<axum::extract::MatchedPath>()?;
        Some(matched.as_str().to_owned())
    }
}

/// Another extractor's key with a fixed prefix in front, so keys of different kinds cannot
/// collide: `Prefixed::new("order:", PathSegment(1))` turns `/orders/42` into `order:42`.
/// Missing when the inner key is.
#[derive(Clone, Debug)]
pub struct Prefixed<K> {
    prefix: Arc<str>,
    inner: K,
}

impl<K> Prefixed<K> {
    /// `prefix` followed by the key of `inner`.
    #[must_use]
    pub fn new(prefix: impl Into<Arc<str>>, inner: K) -> Self {
        Self {
            prefix: prefix.into(),
            inner,
        }
    }

    /// The prefix.
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The wrapped extractor.
    #[must_use]
    pub fn inner(&self) -> &K {
        &self.inner
    }
}

impl<B, K: ExtractKey<B>> ExtractKey<B> for Prefixed<K> {
    fn extract_key(&self, request: &Request<B>) -> Option<String> {
        let key = self.inner.extract_key(request)?;
        let mut out = String::with_capacity(self.prefix.len() + key.len());
        out.push_str(&self.prefix);
        out.push_str(&key);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn get(uri: &str) -> Request<()> {
        Request::get(uri).body(()).expect("valid request")
    }

    fn with_header(value: HeaderValue) -> Request<()> {
        let mut request = get("/");
        request.headers_mut().insert("x-key", value);
        request
    }

    #[test]
    fn closure_is_an_extractor() {
        let by_method =
            |r: &Request<()>| (r.method() == http::Method::POST).then(|| "post".to_owned());
        assert_eq!(by_method.extract_key(&get("/")), None);
        let post = Request::post("/").body(()).expect("valid request");
        assert_eq!(by_method.extract_key(&post).as_deref(), Some("post"));
    }

    #[test]
    fn header_value_is_the_key() {
        let header = Header::from_static("x-key");
        let request = with_header(HeaderValue::from_static("  tenant-7 "));
        assert_eq!(header.extract_key(&request).as_deref(), Some("tenant-7"));
    }

    #[test]
    fn header_missing_or_empty_has_no_key() {
        let header = Header::from_static("x-key");
        assert_eq!(header.extract_key(&get("/")), None);
        assert_eq!(
            header.extract_key(&with_header(HeaderValue::from_static(""))),
            None
        );
        assert_eq!(
            header.extract_key(&with_header(HeaderValue::from_static("   "))),
            None
        );
    }

    #[test]
    fn header_hostile_values_have_no_key() {
        let header = Header::from_static("x-key");
        let not_utf8 = HeaderValue::from_bytes(b"\xff\xfe\xfd").expect("opaque bytes are allowed");
        assert_eq!(header.extract_key(&with_header(not_utf8)), None);
        let latin1 =
            HeaderValue::from_bytes("caf\u{e9}".as_bytes()).expect("opaque bytes are allowed");
        assert_eq!(header.extract_key(&with_header(latin1)), None);

        let huge = HeaderValue::from_str(&"a".repeat(1 << 20)).expect("visible ASCII");
        assert_eq!(header.extract_key(&with_header(huge)), None);
        let at_limit = HeaderValue::from_str(&"a".repeat(MAX_KEY_LEN)).expect("visible ASCII");
        assert_eq!(
            header.extract_key(&with_header(at_limit)).map(|k| k.len()),
            Some(MAX_KEY_LEN)
        );
    }

    #[test]
    fn header_given_twice_has_no_key() {
        let header = Header::from_static("x-key");
        let mut request = with_header(HeaderValue::from_static("a"));
        request
            .headers_mut()
            .append("x-key", HeaderValue::from_static("b"));
        assert_eq!(header.extract_key(&request), None);
    }

    #[test]
    fn path_segments_count_from_zero() {
        let request = get("/orders/42/items?x=1");
        assert_eq!(
            PathSegment(0).extract_key(&request).as_deref(),
            Some("orders")
        );
        assert_eq!(PathSegment(1).extract_key(&request).as_deref(), Some("42"));
        assert_eq!(
            PathSegment(2).extract_key(&request).as_deref(),
            Some("items")
        );
        assert_eq!(PathSegment(3).extract_key(&request), None);
        assert_eq!(PathSegment(0).extract_key(&get("/")), None);
        assert_eq!(PathSegment(1).extract_key(&get("/orders//42")), None);
        assert_eq!(PathSegment(1).extract_key(&get("/orders/")), None);
    }

    #[test]
    fn path_segments_are_percent_decoded() {
        let plain = PathSegment(1).extract_key(&get("/orders/42"));
        let encoded = PathSegment(1).extract_key(&get("/orders/4%32"));
        assert_eq!(
            plain, encoded,
            "two spellings of one order must take one lock"
        );
        assert_eq!(
            PathSegment(1)
                .extract_key(&get("/a/caf%C3%A9%20x%2Fy"))
                .as_deref(),
            Some("caf\u{e9} x/y")
        );
        // Invalid escapes are kept, as axum's Path extractor keeps them.
        assert_eq!(
            PathSegment(1).extract_key(&get("/a/100%zz%4")).as_deref(),
            Some("100%zz%4")
        );
    }

    #[test]
    fn path_hostile_segments_have_no_key() {
        assert_eq!(
            PathSegment(1).extract_key(&get("/a/%FF%FE")),
            None,
            "not UTF-8"
        );
        assert_eq!(
            PathSegment(1).extract_key(&get("/a/%C3")),
            None,
            "truncated UTF-8"
        );
        // `http::Uri` itself refuses URIs of 64 KiB and more.
        let huge = format!("/a/{}", "b".repeat(60_000));
        assert_eq!(PathSegment(1).extract_key(&get(&huge)), None);
        let huge_encoded = format!("/a/{}", "%41".repeat(MAX_KEY_LEN + 1));
        assert_eq!(PathSegment(1).extract_key(&get(&huge_encoded)), None);
        let fits_encoded = format!("/a/{}", "%41".repeat(MAX_KEY_LEN));
        assert_eq!(
            PathSegment(1).extract_key(&get(&fits_encoded)),
            Some("A".repeat(MAX_KEY_LEN))
        );
        let many = format!("/{}", "x/".repeat(30_000));
        assert_eq!(PathSegment(usize::MAX).extract_key(&get(&many)), None);
    }

    #[test]
    fn matched_path_outside_a_router_has_no_key() {
        assert_eq!(MatchedPath.extract_key(&get("/orders/42")), None);
    }

    #[tokio::test]
    async fn matched_path_is_the_route_template() {
        use axum::Router;
        use axum::body::Body;
        use axum::routing::get as route_get;
        use tower::ServiceExt;

        // The extractor runs in a middleware position and hands the key to the handler.
        let app = Router::new().route(
            "/orders/{id}",
            route_get(|request: Request<Body>| async move {
                MatchedPath.extract_key(&request).unwrap_or_default()
            }),
        );
        let response = app
            .oneshot(
                Request::get("/orders/42")
                    .body(Body::empty())
                    .expect("valid request"),
            )
            .await
            .expect("infallible");
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .expect("in-memory body")
            .to_bytes();
        assert_eq!(&body[..], b"/orders/{id}");
    }

    #[test]
    fn prefixed_puts_the_prefix_in_front() {
        let order = Prefixed::new("order:", PathSegment(1));
        assert_eq!(order.prefix(), "order:");
        assert_eq!(order.inner(), &PathSegment(1));
        assert_eq!(
            order.extract_key(&get("/orders/42")).as_deref(),
            Some("order:42")
        );
        assert_eq!(
            order.extract_key(&get("/orders")),
            None,
            "no inner key, no key"
        );
        let nested = Prefixed::new(String::from("a:"), Prefixed::new("b:", PathSegment(0)));
        assert_eq!(nested.extract_key(&get("/c")).as_deref(), Some("a:b:c"));
    }
}
