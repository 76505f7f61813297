//! Request keys: which lock (or rate-limit subject) a request belongs to.
//!
//! Every layer of this crate takes an [`ExtractKey`]: a small, cloneable value that reads a
//! request and answers with an [`Extracted`]: a key, no key at all, or a key the request
//! carries but that cannot be used. The three are kept apart because they deserve different
//! answers:
//!
//! * [`Extracted::Key`]: the layer locks or meters the request under it.
//! * [`Extracted::Absent`]: the request does not carry this kind of key (the header is not
//!   there, the path is shorter). The layer applies its [`MissingKey`] setting: `400`, or
//!   pass without a lock or limit.
//! * [`Extracted::Invalid`]: the request carries the key, but malformed (a header given twice,
//!   over-long, not text). Always `400 Bad Request`, whatever the [`MissingKey`] setting:
//!   otherwise a client on a route that lets key-less requests through could escape its
//!   limit (or lock) by sending its key header twice.
//!
//! Provided extractors:
//!
//! | extractor | key | absent | invalid |
//! |---|---|---|---|
//! | a closure `Fn(&Request<B>) -> R`, `R` an `Option<String>`, `String` or [`Extracted`] | whatever it returns | `None` | an [`Extracted::Invalid`] it returns |
//! | [`Header`] | the value of one header, trimmed | no such header | given more than once, empty, not visible ASCII, over [`MAX_KEY_LEN`] |
//! | [`PathSegment`] | one segment of the URI path, percent-decoded | the path has fewer segments | empty, not UTF-8 or a control character once decoded, over [`MAX_KEY_LEN`] |
//! | `MatchedPath` (feature `axum`) | axum's matched route template, e.g. `/orders/{id}` | outside a router, or on the fallback | never |
//! | [`Prefixed`] | another extractor's key behind a fixed prefix | when the inner one is | when the inner one is |
//! | [`Constant`] | the same key for every request | never | never |
//! | [`ClientIp`](crate::client_ip::ClientIp) | the client's address (network) | no peer address (`ConnectInfo`, or a `SocketAddr` extension) | never |
//!
//! Values taken from the request are bounded by [`MAX_KEY_LEN`] bytes and must be text, so a
//! hostile client cannot make the layer build huge keys. Whatever an extractor answers (a
//! closure of yours too), the layers refuse a key that holds a control character
//! ([`InvalidKey::Control`]), so that no request can write a line of its own into the logs. Since an absent key is something
//! every client can produce (by leaving the header out), never let "no key" mean more access
//! than "some key" would unless you mean it ([`MissingKey::Allow`]).
//!
//! ```
//! use distlock_tower::extract::{Extracted, ExtractKey, Header, InvalidKey, PathSegment, Prefixed};
//! use http::Request;
//!
//! let request = Request::get("/orders/42/items")
//!     .header("x-tenant", "acme")
//!     .body(())
//!     .unwrap();
//!
//! let order = Prefixed::new("order:", PathSegment(1));
//! assert_eq!(order.extract_key(&request).key(), Some("order:42"));
//!
//! let tenant = Header::from_static("x-tenant");
//! assert_eq!(tenant.extract_key(&request).key(), Some("acme"));
//! assert_eq!(Header::from_static("x-user").extract_key(&request), Extracted::Absent);
//!
//! // A closure works too; annotate its argument's type. It may answer with an Option...
//! let method_and_path = |r: &Request<()>| Some(format!("{} {}", r.method(), r.uri().path()));
//! assert_eq!(method_and_path.extract_key(&request).key(), Some("GET /orders/42/items"));
//!
//! // ...or with an `Extracted`, to tell a malformed key from a missing one.
//! let query = |r: &Request<()>| match r.uri().query() {
//!     None => Extracted::Absent,
//!     Some(q) if q.len() > 64 => Extracted::Invalid(InvalidKey::TooLong),
//!     Some(q) => Extracted::Key(q.to_owned()),
//! };
//! assert_eq!(query.extract_key(&request), Extracted::Absent);
//! ```

use std::borrow::Cow;
use std::sync::Arc;

use http::{HeaderName, Request};

use crate::config_error::ConfigError;

/// The longest value, in bytes, that the provided extractors take from a request (a header
/// value, a decoded path segment). Longer values are [`InvalidKey::TooLong`]. It leaves room
/// for a [`Prefixed`] prefix under the lock-name limit of [`distlock::MAX_NAME_LEN`].
pub const MAX_KEY_LEN: usize = 256;

/// The longest header name, in bytes, that [`Header::new`] takes (and the layers' settings
/// read). HTTP sets no limit, and real names are a few dozen bytes; a longer one is a mistake
/// (a value in the name's place) that would otherwise be kept, and printed, as it is.
pub const MAX_HEADER_NAME_LEN: usize = 256;

/// What a key extractor found in a request. See the [module docs](self) for what each
/// answer gets.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Extracted {
    /// The request's key: the lock name, or the rate-limit subject.
    Key(String),
    /// The request carries no key of this kind; the layer applies its [`MissingKey`]
    /// setting.
    Absent,
    /// The request carries a key that cannot be used; the layer answers `400 Bad Request`
    /// whatever its [`MissingKey`] setting.
    Invalid(InvalidKey),
}

impl Extracted {
    /// The key, if there is one.
    #[must_use]
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::Key(key) => Some(key),
            _ => None,
        }
    }

    /// The key, if there is one.
    #[must_use]
    pub fn into_key(self) -> Option<String> {
        match self {
            Self::Key(key) => Some(key),
            _ => None,
        }
    }

    /// Why the key cannot be used, if it cannot.
    #[must_use]
    pub fn invalid(&self) -> Option<&InvalidKey> {
        match self {
            Self::Invalid(why) => Some(why),
            _ => None,
        }
    }

    /// Whether the request carries no key at all.
    #[must_use]
    pub fn is_absent(&self) -> bool {
        matches!(self, Self::Absent)
    }

    /// Applies `f` to the key; absent and invalid pass through.
    #[must_use]
    pub fn map_key(self, f: impl FnOnce(String) -> String) -> Self {
        match self {
            Self::Key(key) => Self::Key(f(key)),
            other => other,
        }
    }
}

/// `extracted`, with a key that holds a control character (a decoded `%0A`, say) made
/// [`InvalidKey::Control`]: the layers apply it to whatever an extractor answers (a closure
/// of yours included), so no request can forge a log line through its key or name something
/// no client should.
pub(crate) fn checked(extracted: Extracted) -> Extracted {
    match extracted {
        Extracted::Key(key) if key.chars().any(char::is_control) => {
            Extracted::Invalid(InvalidKey::Control)
        }
        other => other,
    }
}

/// `Some(key)` is a key, `None` is absent: what closures written for the first version of
/// [`ExtractKey`] return.
impl From<Option<String>> for Extracted {
    fn from(key: Option<String>) -> Self {
        key.map_or(Self::Absent, Self::Key)
    }
}

impl From<String> for Extracted {
    fn from(key: String) -> Self {
        Self::Key(key)
    }
}

impl From<InvalidKey> for Extracted {
    fn from(why: InvalidKey) -> Self {
        Self::Invalid(why)
    }
}

/// Why a key a request carries cannot be used. The text is sent to the client in the body
/// of the `400`; it never repeats the value itself.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidKey {
    /// Given more than once (a repeated header): two values would leave it open which one
    /// the rest of the stack reads.
    #[error("the key is given more than once")]
    Repeated,
    /// Longer than [`MAX_KEY_LEN`] bytes.
    #[error("the key is longer than {} bytes", MAX_KEY_LEN)]
    TooLong,
    /// Not text: a header value that is not visible ASCII, a path segment that is not UTF-8
    /// once decoded.
    #[error("the key is not text")]
    NotText,
    /// Present but empty (or only whitespace).
    #[error("the key is empty")]
    Empty,
    /// Shorter than the layer's minimum (the
    /// [`IdempotencyLayer`](crate::IdempotencyLayer)'s `min_key_len`).
    #[error("the key is shorter than {0} bytes")]
    TooShort(usize),
    /// Holds a control character (a decoded `%0A` in a path segment, say): refused so that no
    /// request can write a line of its own into the logs, or a name no client should send.
    #[error("the key holds a control character")]
    Control,
    /// A reason of your own extractor's, e.g. a key that does not have the expected form.
    #[error("{0}")]
    Custom(Cow<'static, str>),
}

impl InvalidKey {
    /// An [`InvalidKey::Custom`] with this reason. It is sent to the client: do not include
    /// secrets or the value itself.
    #[must_use]
    pub fn custom(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::Custom(reason.into())
    }
}

/// What a layer does with a request whose key is [absent](Extracted::Absent). A key that is
/// [invalid](Extracted::Invalid) is not a missing one: it is answered `400 Bad Request`
/// whichever is set.
///
/// One type for every layer of this crate; `lock::MissingKey` and `rate_limit::MissingKey`
/// are this type too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissingKey {
    /// `400 Bad Request`; the inner service is not called. The default: a client can always
    /// leave a header out, so "no key" must not mean "no limit" or "no lock" unless you say
    /// so.
    #[default]
    Reject,
    /// Call the inner service without the layer: unmetered under a
    /// [`RateLimitLayer`](crate::RateLimitLayer), unlocked under a
    /// [`LockLayer`](crate::LockLayer) (handlers see no [`HeldLock`](crate::HeldLock)). For
    /// routes where only some requests carry the key.
    Allow,
}

/// Reads the key of a request: the name of the lock it takes, or the subject it is rate
/// limited as.
///
/// Implemented for closures `Fn(&Request<B>) -> R` where `R` converts into an [`Extracted`]
/// (`Option<String>`, `String`, [`Extracted`] itself), and for the extractors of this module.
/// Implement it for your own type when a closure is not enough (for instance to carry
/// configuration); it must be cheap to clone, since services are cloned per connection.
pub trait ExtractKey<B>: Clone + Send + Sync + 'static {
    /// The key of this request, [`Extracted::Absent`] when it has none (the layer then applies
    /// its [`MissingKey`] setting), or [`Extracted::Invalid`] when it has one that cannot be
    /// used (the layer answers `400`).
    ///
    /// Called once per request, before the inner service; it must not block.
    fn extract_key(&self, request: &Request<B>) -> Extracted;

    /// What usually makes this extractor answer [`Extracted::Absent`], for the layer's debug
    /// event about a request without a key: a fix for a deployment mistake rather than a
    /// client's, such as [`ClientIp`](crate::client_ip::ClientIp)'s missing peer address.
    /// `None` (the default) when absence is the client's doing, as a header left out.
    fn absent_hint(&self) -> Option<&'static str> {
        None
    }
}

impl<B, F, R> ExtractKey<B> for F
where
    F: Fn(&Request<B>) -> R + Clone + Send + Sync + 'static,
    R: Into<Extracted>,
{
    fn extract_key(&self, request: &Request<B>) -> Extracted {
        self(request).into()
    }
}

/// The value of one request header, with surrounding whitespace trimmed.
///
/// [Absent](Extracted::Absent) when the header is not in the request. [Invalid](InvalidKey)
/// when it appears more than once, is longer than [`MAX_KEY_LEN`] bytes, is not visible
/// ASCII, or is empty or only whitespace: the client did send the header, so an empty one
/// is a malformed key, not a missing one.
#[derive(Clone, Debug)]
pub struct Header(pub HeaderName);

impl Header {
    /// The header named `name` (any case), or [`ConfigError::InvalidHeaderName`] if it is
    /// not a valid HTTP field name, [`ConfigError::HeaderNameTooLong`] past
    /// [`MAX_HEADER_NAME_LEN`] bytes: for names read from configuration.
    ///
    /// ```
    /// use distlock_tower::ConfigError;
    /// use distlock_tower::extract::Header;
    ///
    /// let from_config = "X-Api-Key";
    /// assert_eq!(Header::new(from_config)?.0, "x-api-key");
    /// assert!(Header::new("x api key").is_err());
    /// let pasted = "x".repeat(10_000);
    /// assert!(matches!(Header::new(&pasted), Err(ConfigError::HeaderNameTooLong { len: 10_000, .. })));
    /// # Ok::<(), distlock_tower::ConfigError>(())
    /// ```
    pub fn new(name: &str) -> Result<Self, ConfigError> {
        if name.len() > MAX_HEADER_NAME_LEN {
            return Err(ConfigError::HeaderNameTooLong {
                len: name.len(),
                max: MAX_HEADER_NAME_LEN,
            });
        }
        HeaderName::try_from(name)
            .map(Self)
            .map_err(|_| ConfigError::InvalidHeaderName {
                name: name.to_owned(),
            })
    }

    /// The header named `name`, a lower-case literal in your code.
    ///
    /// # Panics
    /// If `name` is not a valid lower-case header name, as [`HeaderName::from_static`]: a
    /// mistake in the source, found the first time it runs. For a name that comes from
    /// configuration use [`new`](Self::new), which returns the error instead.
    #[must_use]
    pub fn from_static(name: &'static str) -> Self {
        Self(HeaderName::from_static(name))
    }
}

impl<B> ExtractKey<B> for Header {
    fn extract_key(&self, request: &Request<B>) -> Extracted {
        let mut values = request.headers().get_all(&self.0).iter();
        let Some(value) = values.next() else {
            return Extracted::Absent;
        };
        if values.next().is_some() {
            return InvalidKey::Repeated.into();
        }
        if value.len() > MAX_KEY_LEN {
            return InvalidKey::TooLong.into();
        }
        let Ok(text) = value.to_str() else {
            return InvalidKey::NotText.into();
        };
        match text.trim() {
            "" => InvalidKey::Empty.into(),
            key => Extracted::Key(key.to_owned()),
        }
    }
}

/// The same key for every request: one limit (or one lock) for everything the layer wraps,
/// such as `ConcurrencyLimitLayer::new(client, Constant::from_static("exports"), 5)` for at
/// most five exports at once across every replica.
///
/// A key is 1 to [`MAX_KEY_LEN`] bytes: an empty one would be refused by the runtime on every
/// request, so it is refused here, where the layer is made.
///
/// ```
/// use distlock_tower::extract::{Constant, ExtractKey, Extracted};
///
/// let key = Constant::from_static("exports");
/// let request = http::Request::new(());
/// assert_eq!(key.extract_key(&request), Extracted::Key("exports".to_owned()));
///
/// let from_config = "";
/// assert!(Constant::new(from_config).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Constant(Arc<str>);

impl Constant {
    /// Always `key`, or [`ConfigError::InvalidConstantKey`] if it is empty or longer than
    /// [`MAX_KEY_LEN`] bytes: for keys read from configuration.
    pub fn new(key: impl Into<Arc<str>>) -> Result<Self, ConfigError> {
        let key = key.into();
        if key.is_empty() || key.len() > MAX_KEY_LEN {
            return Err(ConfigError::InvalidConstantKey {
                len: key.len(),
                max: MAX_KEY_LEN,
            });
        }
        Ok(Self(key))
    }

    /// Always `key`, a literal in your code.
    ///
    /// # Panics
    /// If `key` is empty or longer than [`MAX_KEY_LEN`] bytes, as [`Header::from_static`]
    /// panics on a bad literal: a mistake in the source, found the first time it runs. For a
    /// key that comes from configuration use [`new`](Self::new), which returns the error.
    #[must_use]
    pub fn from_static(key: &'static str) -> Self {
        match Self::new(key) {
            Ok(constant) => constant,
            Err(err) => panic!("Constant::from_static({key:?}): {err}"),
        }
    }
}

impl<B> ExtractKey<B> for Constant {
    fn extract_key(&self, _request: &Request<B>) -> Extracted {
        Extracted::Key(self.0.to_string())
    }
}

/// The segment at this zero-based index of the URI path, percent-decoded: in `/orders/42`,
/// segment 0 is `orders` and segment 1 is `42`.
///
/// Decoding matters: `/orders/4%32` names the same order as `/orders/42` (axum's `Path`
/// extractor decodes it), so both must take the same lock. Invalid escapes are kept as they
/// are, as axum does.
///
/// [Absent](Extracted::Absent) when the path has no such segment. One trailing slash ends
/// the path rather than opening an empty segment: `/orders/` has the single segment
/// `orders`, like `/orders`, and `/` has none. [Invalid](InvalidKey) when the segment is
/// empty (`/orders//42` for segment 1: the client wrote the slot and left it empty), longer
/// than [`MAX_KEY_LEN`] bytes, not UTF-8 once decoded, or holding a control character once
/// decoded (`%0A`).
///
/// Under axum's `Router::nest`, the path the layer sees has the nesting prefix removed when
/// the layer sits on the nested router, so count segments from there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathSegment(pub usize);

impl<B> ExtractKey<B> for PathSegment {
    fn extract_key(&self, request: &Request<B>) -> Extracted {
        let path = request.uri().path();
        let path = path.strip_prefix('/').unwrap_or(path);
        let path = path.strip_suffix('/').unwrap_or(path);
        if path.is_empty() {
            return Extracted::Absent;
        }
        let Some(raw) = path.split('/').nth(self.0) else {
            return Extracted::Absent;
        };
        if raw.is_empty() {
            return InvalidKey::Empty.into();
        }
        // An escape takes three bytes for one, so a longer raw segment cannot fit once decoded.
        if raw.len() > 3 * MAX_KEY_LEN {
            return InvalidKey::TooLong.into();
        }
        // Which segment is the key, and the bounds above, are ours; the decoding is RFC 3986's,
        // which `percent-encoding` does as axum's `Path` does: a malformed escape stays as it is.
        let decoded: Vec<u8> = percent_encoding::percent_decode_str(raw).collect();
        if decoded.len() > MAX_KEY_LEN {
            return InvalidKey::TooLong.into();
        }
        checked(String::from_utf8(decoded).map_or(InvalidKey::NotText.into(), Extracted::Key))
    }
}

/// The route template axum matched, such as `/orders/{id}`: one key per route, whatever the
/// parameters. Useful to serialize a whole endpoint.
///
/// Reads the [`axum::extract::MatchedPath`] request extension, which the router sets before
/// it calls a route's layers (both `Router::layer` and `Router::route_layer`).
/// [Absent](Extracted::Absent) when the layer runs outside a router, or on the fallback;
/// never invalid (the template is the application's, not the client's).
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatchedPath;

#[cfg(feature = "axum")]
impl<B> ExtractKey<B> for MatchedPath {
    fn extract_key(&self, request: &Request<B>) -> Extracted {
        request
            .extensions()
            .get::<axum::extract::MatchedPath>()
            .map(|matched| matched.as_str().to_owned())
            .into()
    }
}

/// Another extractor's key with a fixed prefix in front, so keys of different kinds cannot
/// collide: `Prefixed::new("order:", PathSegment(1))` turns `/orders/42` into `order:42`.
/// Absent or invalid when the inner key is.
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
    fn extract_key(&self, request: &Request<B>) -> Extracted {
        self.inner.extract_key(request).map_key(|key| {
            let mut out = String::with_capacity(self.prefix.len() + key.len());
            out.push_str(&self.prefix);
            out.push_str(&key);
            out
        })
    }

    fn absent_hint(&self) -> Option<&'static str> {
        self.inner.absent_hint()
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

    fn key(k: &str) -> Extracted {
        Extracted::Key(k.to_owned())
    }

    #[test]
    fn closures_returning_an_option_or_an_extracted_are_extractors() {
        let by_method =
            |r: &Request<()>| (r.method() == http::Method::POST).then(|| "post".to_owned());
        assert_eq!(by_method.extract_key(&get("/")), Extracted::Absent);
        let post = Request::post("/").body(()).expect("valid request");
        assert_eq!(by_method.extract_key(&post), key("post"));

        let always = |_: &Request<()>| "job".to_owned();
        assert_eq!(always.extract_key(&get("/")), key("job"));

        let picky = |r: &Request<()>| {
            if r.uri().path().contains("..") {
                Extracted::Invalid(InvalidKey::custom("the path climbs"))
            } else {
                Extracted::Key(r.uri().path().to_owned())
            }
        };
        assert_eq!(picky.extract_key(&get("/a")), key("/a"));
        let climbing = picky.extract_key(&get("/a/../b"));
        assert_eq!(
            climbing.invalid().map(ToString::to_string).as_deref(),
            Some("the path climbs")
        );
    }

    #[test]
    fn extracted_converts_and_reads() {
        assert_eq!(Extracted::from(None::<String>), Extracted::Absent);
        assert_eq!(Extracted::from(Some("k".to_owned())), key("k"));
        assert_eq!(
            Extracted::from(InvalidKey::Empty),
            Extracted::Invalid(InvalidKey::Empty)
        );
        assert_eq!(key("k").key(), Some("k"));
        assert_eq!(key("k").into_key().as_deref(), Some("k"));
        assert!(Extracted::Absent.is_absent());
        assert!(!Extracted::Invalid(InvalidKey::Repeated).is_absent());
        assert_eq!(Extracted::Invalid(InvalidKey::Repeated).key(), None);
        assert_eq!(
            InvalidKey::TooLong.to_string(),
            format!("the key is longer than {MAX_KEY_LEN} bytes")
        );
    }

    #[test]
    fn header_value_is_the_key() {
        let header = Header::from_static("x-key");
        let request = with_header(HeaderValue::from_static("  tenant-7 "));
        assert_eq!(header.extract_key(&request), key("tenant-7"));
    }

    #[test]
    fn header_not_sent_is_absent_and_empty_is_invalid() {
        let header = Header::from_static("x-key");
        assert_eq!(header.extract_key(&get("/")), Extracted::Absent);
        for empty in ["", "   ", "\t"] {
            assert_eq!(
                header.extract_key(&with_header(HeaderValue::from_static(empty))),
                Extracted::Invalid(InvalidKey::Empty),
                "{empty:?}"
            );
        }
    }

    #[test]
    fn header_hostile_values_are_invalid() {
        let header = Header::from_static("x-key");
        let not_utf8 = HeaderValue::from_bytes(b"\xff\xfe\xfd").expect("opaque bytes are allowed");
        assert_eq!(
            header.extract_key(&with_header(not_utf8)),
            Extracted::Invalid(InvalidKey::NotText)
        );
        let latin1 =
            HeaderValue::from_bytes("caf\u{e9}".as_bytes()).expect("opaque bytes are allowed");
        assert_eq!(
            header.extract_key(&with_header(latin1)),
            Extracted::Invalid(InvalidKey::NotText)
        );

        let huge = HeaderValue::from_str(&"a".repeat(1 << 20)).expect("visible ASCII");
        assert_eq!(
            header.extract_key(&with_header(huge)),
            Extracted::Invalid(InvalidKey::TooLong)
        );
        let over = HeaderValue::from_str(&"a".repeat(MAX_KEY_LEN + 1)).expect("visible ASCII");
        assert_eq!(
            header.extract_key(&with_header(over)),
            Extracted::Invalid(InvalidKey::TooLong)
        );
        let at_limit = HeaderValue::from_str(&"a".repeat(MAX_KEY_LEN)).expect("visible ASCII");
        assert_eq!(
            header
                .extract_key(&with_header(at_limit))
                .key()
                .map(str::len),
            Some(MAX_KEY_LEN)
        );
    }

    #[test]
    fn header_given_twice_is_invalid() {
        let header = Header::from_static("x-key");
        for second in ["b", "a", ""] {
            let mut request = with_header(HeaderValue::from_static("a"));
            request
                .headers_mut()
                .append("x-key", HeaderValue::from_static(second));
            assert_eq!(
                header.extract_key(&request),
                Extracted::Invalid(InvalidKey::Repeated),
                "a, then {second:?}"
            );
        }
    }

    #[test]
    fn path_segments_count_from_zero() {
        let request = get("/orders/42/items?x=1");
        assert_eq!(PathSegment(0).extract_key(&request), key("orders"));
        assert_eq!(PathSegment(1).extract_key(&request), key("42"));
        assert_eq!(PathSegment(2).extract_key(&request), key("items"));
        assert_eq!(PathSegment(3).extract_key(&request), Extracted::Absent);
    }

    #[test]
    fn path_trailing_slash_ends_the_path_and_an_inner_empty_segment_is_invalid() {
        assert_eq!(PathSegment(0).extract_key(&get("/")), Extracted::Absent);
        assert_eq!(
            PathSegment(1).extract_key(&get("/orders/")),
            Extracted::Absent
        );
        assert_eq!(PathSegment(0).extract_key(&get("/orders/")), key("orders"));
        assert_eq!(PathSegment(1).extract_key(&get("/orders/42/")), key("42"));
        assert_eq!(
            PathSegment(1).extract_key(&get("/orders//42")),
            Extracted::Invalid(InvalidKey::Empty)
        );
        assert_eq!(
            PathSegment(1).extract_key(&get("/orders//")),
            Extracted::Invalid(InvalidKey::Empty)
        );
        assert_eq!(
            PathSegment(0).extract_key(&get("//orders")),
            Extracted::Invalid(InvalidKey::Empty)
        );
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
            PathSegment(1).extract_key(&get("/a/caf%C3%A9%20x%2Fy")),
            key("caf\u{e9} x/y")
        );
        // Invalid escapes are kept, as axum's Path extractor keeps them.
        assert_eq!(
            PathSegment(1).extract_key(&get("/a/100%zz%4")),
            key("100%zz%4")
        );
    }

    #[test]
    fn path_hostile_segments_are_invalid() {
        assert_eq!(
            PathSegment(1).extract_key(&get("/a/%FF%FE")),
            Extracted::Invalid(InvalidKey::NotText),
            "not UTF-8"
        );
        assert_eq!(
            PathSegment(1).extract_key(&get("/a/%C3")),
            Extracted::Invalid(InvalidKey::NotText),
            "truncated UTF-8"
        );
        // `http::Uri` itself refuses URIs of 64 KiB and more.
        let huge = format!("/a/{}", "b".repeat(60_000));
        assert_eq!(
            PathSegment(1).extract_key(&get(&huge)),
            Extracted::Invalid(InvalidKey::TooLong)
        );
        let huge_encoded = format!("/a/{}", "%41".repeat(MAX_KEY_LEN + 1));
        assert_eq!(
            PathSegment(1).extract_key(&get(&huge_encoded)),
            Extracted::Invalid(InvalidKey::TooLong)
        );
        let fits_encoded = format!("/a/{}", "%41".repeat(MAX_KEY_LEN));
        assert_eq!(
            PathSegment(1).extract_key(&get(&fits_encoded)),
            Extracted::Key("A".repeat(MAX_KEY_LEN))
        );
        let many = format!("/{}", "x/".repeat(30_000));
        assert_eq!(
            PathSegment(usize::MAX).extract_key(&get(&many)),
            Extracted::Absent
        );
    }

    #[cfg(feature = "axum")]
    #[test]
    fn matched_path_outside_a_router_is_absent() {
        assert_eq!(
            MatchedPath.extract_key(&get("/orders/42")),
            Extracted::Absent
        );
    }

    #[cfg(feature = "axum")]
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
                MatchedPath
                    .extract_key(&request)
                    .into_key()
                    .unwrap_or_default()
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
    fn prefixed_puts_the_prefix_in_front_and_passes_absent_and_invalid_through() {
        let order = Prefixed::new("order:", PathSegment(1));
        assert_eq!(order.prefix(), "order:");
        assert_eq!(order.inner(), &PathSegment(1));
        assert_eq!(order.extract_key(&get("/orders/42")), key("order:42"));
        assert_eq!(
            order.extract_key(&get("/orders")),
            Extracted::Absent,
            "no inner key, no key"
        );
        assert_eq!(
            order.extract_key(&get("/orders/%FF")),
            Extracted::Invalid(InvalidKey::NotText),
            "an invalid inner key stays invalid"
        );
        let nested = Prefixed::new(String::from("a:"), Prefixed::new("b:", PathSegment(0)));
        assert_eq!(nested.extract_key(&get("/c")), key("a:b:c"));
    }
}
