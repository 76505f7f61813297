//! [`Grpc`] and [`GrpcOrHttp`]: refusals as gRPC statuses (feature `tonic`).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use tonic::Code;
use tonic_types::{ErrorDetails, StatusExt};

use super::{MakeRefusal, PlainText, Reason, Refusal};

/// The `domain` of the `ErrorInfo` detail unless [`Grpc::domain`] sets another.
const DEFAULT_DOMAIN: &str = "distlock";

/// A [`MakeRefusal`] that answers with a gRPC status, for services that tonic (or any gRPC
/// server) serves: a *trailers-only* response, as gRPC servers send an error that comes before
/// any message.
///
/// * HTTP status `200`, `content-type: application/grpc`, and no body: the response is a
///   head alone, which over HTTP/2 is one `HEADERS` frame that ends the stream.
/// * `grpc-status`: the code of [the table below](#codes).
/// * `grpc-message`: [`Refusal::detail`], percent-encoded as gRPC asks (it never contains
///   the key).
/// * `grpc-status-details-bin`: a `google.rpc.Status` with the same code and message and
///   these details, which tonic's client reads with
///   [`tonic_types::StatusExt::get_error_details`]:
///   * `RetryInfo { retry_delay }`, when the refusal has a wait ([`Refusal::retry_after`]:
///     the rate limiter's exact wait, the lock holder's remaining ttl, the concurrency
///     limit's `retry_after`, 1 s after a store failure). gRPC clients that honour it wait
///     that long; the rounded `Retry-After` the layer adds is there too, as metadata.
///   * `ErrorInfo { reason, domain, metadata }`: the [reason's code](Reason::code) in upper
///     snake case (`TOO_MANY_REQUESTS`, `LOCK_BUSY`...), the domain `distlock` (or
///     [`domain`](Self::domain)), and for a rate-limit denial the binding policy's name as
///     `policy` (the name the `RateLimit-Policy` field sends anyway).
///
/// What the layer adds after the hook (`Retry-After`, `RateLimit-Policy` / `RateLimit`) are
/// ordinary headers, which a gRPC client sees as the call's metadata.
///
/// # Codes
///
/// | [`Reason`] | HTTP default | gRPC code | `RetryInfo` |
/// | --- | --- | --- | --- |
/// | `TooManyRequests` | `429` | `RESOURCE_EXHAUSTED` (8) | the limiter's wait |
/// | `LockBusy` | `423` / `409` | `ABORTED` (10) | the holder's remaining ttl |
/// | `AtCapacity` | `503` | `UNAVAILABLE` (14) | the layer's `retry_after` |
/// | `AtCapacity`, layer answering `429` | `429` | `RESOURCE_EXHAUSTED` (8) | the layer's `retry_after` |
/// | `StoreUnavailable` | `503` | `UNAVAILABLE` (14) | 1 s |
/// | `LeaseLost` | `503` | `ABORTED` (10) | 1 s |
/// | `InFlight` (idempotency) | `409` | `ABORTED` (10) | the layer's wait |
/// | `MissingKey`, `InvalidKey`, `UnusableKey` | `400` | `INVALID_ARGUMENT` (3) | none |
/// | `CostTooLarge`, `BodyTooLarge` | `413` | `RESOURCE_EXHAUSTED` (8) | none |
/// | `KeyReused` (idempotency) | `422` | `FAILED_PRECONDITION` (9) | none |
/// | `Internal` | `500` | `INTERNAL` (13) | none |
///
/// Why these: `RESOURCE_EXHAUSTED` is gRPC's code for a quota or rate limit, the one that
/// `google.rpc.Code` pairs with HTTP `429`. A busy lock is a conflict with another request on
/// the same resource, which gRPC calls `ABORTED` ("retry at a higher level"), the code paired
/// with `409`. A lost lease is `ABORTED` too, not `UNAVAILABLE`: the handler was stopped part
/// way, and `UNAVAILABLE` is the code that clients' retry policies usually retry without
/// asking, which is only safe when nothing was done. A store that failed or a full
/// concurrency limit is `UNAVAILABLE` (a `503`: try again shortly), except when the
/// concurrency layer is set to answer `429`, whose code is the quota's. A request that can
/// never pass (costs more than the policy allows at once, or a body over the idempotency
/// layer's cap) is `RESOURCE_EXHAUSTED` without `RetryInfo`, as gRPC servers answer a message
/// over their size limit; `ErrorInfo` tells it from a rate-limit denial. An idempotency key
/// reused for another request is `FAILED_PRECONDITION`: the call is fine, the key's earlier
/// use is the problem. [`Grpc::code`] is the table; a hook of your own can start from
/// [`Grpc::status`] and change what it needs.
///
/// Two limits: the answer is always `content-type: application/grpc`, so a gRPC-Web client
/// needs tonic-web's translation *outside* the layer (its requests are still recognised as
/// gRPC); and the idempotency layer stores responses by HTTP status, so a gRPC refusal
/// (HTTP `200`) or a gRPC error from the service would be replayed like a success unless
/// `grpc-status` is among the headers it keeps: idempotency over gRPC is not supported.
///
/// ```
/// use std::time::Duration;
///
/// use distlock::ratelimit::{Policy, Rate};
/// use distlock_tower::RateLimitLayer;
/// use distlock_tower::extract::Header;
/// use distlock_tower::refusal::Grpc;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = distlock::Client::in_memory()
///     .rate_limiter(Policy::gcra("calls", Rate::per_second(10)?)?)
///     .build()?;
/// // tonic::transport::Server::builder().layer(layer).add_service(...)
/// let layer = RateLimitLayer::builder(limiter, Header::from_static("x-api-key"))
///     .refusal(Grpc::new())
///     .build()?;
/// # let _ = layer;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub struct Grpc {
    domain: Arc<str>,
}

impl Default for Grpc {
    fn default() -> Self {
        Self {
            domain: Arc::from(DEFAULT_DOMAIN),
        }
    }
}

impl Grpc {
    /// gRPC statuses with an `ErrorInfo` in the domain `distlock`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The `domain` of the `ErrorInfo` detail: your service's name (Google's APIs use their
    /// host name, e.g. `"pubsub.googleapis.com"`), which clients match with the `reason`.
    pub fn domain(mut self, domain: impl Into<Arc<str>>) -> Self {
        self.domain = domain.into();
        self
    }

    /// A hook that answers gRPC calls as this one does and every other request with `http`
    /// (see [`GrpcOrHttp`]).
    pub fn or_http<H: MakeRefusal>(self, http: H) -> GrpcOrHttp<H> {
        GrpcOrHttp::new(self, http)
    }

    /// The gRPC code of `refusal` (the [table](#codes)).
    #[must_use]
    pub fn code(refusal: &Refusal) -> Code {
        match refusal.reason() {
            Reason::TooManyRequests | Reason::CostTooLarge | Reason::BodyTooLarge => {
                Code::ResourceExhausted
            }
            Reason::AtCapacity if refusal.status() == StatusCode::TOO_MANY_REQUESTS => {
                Code::ResourceExhausted
            }
            Reason::AtCapacity | Reason::StoreUnavailable | Reason::ShuttingDown => {
                Code::Unavailable
            }
            Reason::LockBusy | Reason::LeaseLost | Reason::InFlight => Code::Aborted,
            Reason::MissingKey
            | Reason::InvalidKey(_)
            | Reason::UnusableKey
            | Reason::MissingScope => Code::InvalidArgument,
            Reason::KeyReused | Reason::OutcomeUnknown | Reason::ResponseNotKept => {
                Code::FailedPrecondition
            }
            Reason::Internal => Code::Internal,
        }
    }

    /// The status this hook answers `refusal` with: [`code`](Self::code),
    /// [`Refusal::detail`] as the message, and the `RetryInfo` and `ErrorInfo` details. For a
    /// hook of your own, or a tonic handler that calls the runtime itself and returns
    /// `Err(Grpc::new().status(&Refusal::from(err)))`.
    #[must_use]
    pub fn status(&self, refusal: &Refusal) -> tonic::Status {
        let mut metadata = HashMap::new();
        if let Some(decision) = refusal.decision() {
            metadata.insert("policy".to_owned(), decision.policy.to_string());
        }
        let reason = refusal
            .reason()
            .code()
            .to_ascii_uppercase()
            .replace('-', "_");
        let mut details = ErrorDetails::with_error_info(reason, &*self.domain, metadata);
        if let Some(wait) = refusal.retry_after() {
            details.set_retry_info(Some(wait));
        }
        tonic::Status::with_error_details(Self::code(refusal), refusal.detail(), details)
    }
}

impl MakeRefusal for Grpc {
    type Body = Bytes;

    fn make_refusal(&self, refusal: &Refusal) -> Response<Bytes> {
        trailers_only(&self.status(refusal))
    }
}

/// `status` as a trailers-only response: `200`, `application/grpc`, the `grpc-*` headers and
/// an empty body.
fn trailers_only(status: &tonic::Status) -> Response<Bytes> {
    let mut response = Response::new(Bytes::new());
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    if status.add_header(headers).is_err() {
        // Cannot happen (the message is percent-encoded, the details base64), but a status
        // the client can read beats a half-written one.
        headers.remove("grpc-message");
        headers.remove("grpc-status-details-bin");
        headers.insert("grpc-status", HeaderValue::from(i32::from(status.code())));
    }
    response
}

/// A [`MakeRefusal`] for a service with an HTTP and a gRPC face behind one layer, so that one
/// budget (one limiter, one lock, one concurrency limit) serves both: a refusal of a gRPC call
/// (a request whose `content-type` starts with `application/grpc`, see
/// [`Refusal::is_grpc`]) is answered by [`Grpc`], every other one by the HTTP hook `H`
/// ([`PlainText`] unless you choose another, e.g. [`ProblemDetails`](super::ProblemDetails)).
///
/// ```
/// use axum::Router;
/// use axum::routing::get;
/// use distlock::ratelimit::{Policy, Rate};
/// use distlock_tower::RateLimitLayer;
/// use distlock_tower::extract::Header;
/// use distlock_tower::refusal::{Grpc, ProblemDetails};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = distlock::Client::in_memory()
///     .rate_limiter(Policy::gcra("calls", Rate::per_second(10)?)?)
///     .build()?;
/// // HTTP routes and a tonic service in one router (tonic's `Routes::into_axum_router`),
/// // served by `axum::serve` over HTTP/1.1 and HTTP/2.
/// let app: Router = Router::new().route("/status", get(|| async { "ok" }));
/// let app = app.layer(
///     RateLimitLayer::builder(limiter, Header::from_static("x-api-key"))
///         .refusal(Grpc::new().or_http(ProblemDetails::new()))
///         .build()?,
/// );
/// # let _ = app;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub struct GrpcOrHttp<H = PlainText> {
    grpc: Grpc,
    http: H,
}

impl<H: MakeRefusal> GrpcOrHttp<H> {
    /// `grpc` for gRPC calls, `http` for the rest.
    pub fn new(grpc: Grpc, http: H) -> Self {
        Self { grpc, http }
    }
}

impl<H: MakeRefusal> MakeRefusal for GrpcOrHttp<H> {
    type Body = Bytes;

    fn make_refusal(&self, refusal: &Refusal) -> Response<Bytes> {
        if refusal.is_grpc() {
            self.grpc.make_refusal(refusal)
        } else {
            self.http.make_refusal(refusal).map(Into::into)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use distlock::{InvalidName, LockError, RateLimitError, StoreError};
    use tonic_types::StatusExt as _;

    use super::*;
    use crate::extract::InvalidKey;
    use crate::refusal::RefusedBy;

    fn busy() -> Refusal {
        Refusal::lock_error(
            "order:1",
            LockError::Busy {
                name: "order:1".to_owned(),
                retry_after: Duration::from_millis(2500),
            },
            StatusCode::LOCKED,
        )
    }

    /// The status a tonic client would read back from `response`'s headers.
    fn read(response: &Response<Bytes>) -> tonic::Status {
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "application/grpc");
        assert!(response.body().is_empty(), "trailers-only: no body");
        tonic::Status::from_header_map(response.headers()).expect("grpc-status is set")
    }

    #[test]
    fn every_reason_has_its_code() {
        let store = || StoreError::Timeout {
            after: Duration::from_millis(5),
        };
        let cases = [
            (busy(), Code::Aborted),
            (
                Refusal::lock_error("k", LockError::Store(store()), StatusCode::LOCKED),
                Code::Unavailable,
            ),
            (Refusal::lease_lost_by(RefusedBy::Lock, "k"), Code::Aborted),
            (Refusal::missing_key(RefusedBy::Lock), Code::InvalidArgument),
            (
                Refusal::invalid_key(RefusedBy::RateLimit, InvalidKey::Empty),
                Code::InvalidArgument,
            ),
            (
                Refusal::rate_limit_error("k", RateLimitError::InvalidSubject(InvalidName::Empty)),
                Code::InvalidArgument,
            ),
            (
                Refusal::rate_limit_error(
                    "k",
                    RateLimitError::CostTooLarge {
                        cost: 9,
                        policy: "p".to_owned(),
                        capacity: 5,
                    },
                ),
                Code::ResourceExhausted,
            ),
            (
                Refusal::lock_error(
                    "k",
                    LockError::InvalidConfig {
                        reason: "x".to_owned(),
                    },
                    StatusCode::LOCKED,
                ),
                Code::Internal,
            ),
            (
                Refusal::concurrency_error(
                    "k",
                    LockError::Timeout {
                        name: "k".to_owned(),
                        waited: Duration::from_secs(1),
                    },
                    StatusCode::SERVICE_UNAVAILABLE,
                    Duration::from_secs(2),
                ),
                Code::Unavailable,
            ),
            (
                Refusal::concurrency_error(
                    "k",
                    LockError::Timeout {
                        name: "k".to_owned(),
                        waited: Duration::from_secs(1),
                    },
                    StatusCode::TOO_MANY_REQUESTS,
                    Duration::from_secs(2),
                ),
                Code::ResourceExhausted,
            ),
            (
                Refusal::idempotency(
                    Reason::InFlight,
                    StatusCode::CONFLICT,
                    Some("k"),
                    None,
                    Some(Duration::from_secs(1)),
                ),
                Code::Aborted,
            ),
            (
                Refusal::idempotency(
                    Reason::KeyReused,
                    StatusCode::UNPROCESSABLE_ENTITY,
                    Some("k"),
                    None,
                    None,
                ),
                Code::FailedPrecondition,
            ),
            (
                Refusal::idempotency(
                    Reason::BodyTooLarge,
                    StatusCode::PAYLOAD_TOO_LARGE,
                    Some("k"),
                    None,
                    None,
                ),
                Code::ResourceExhausted,
            ),
        ];
        for (refusal, code) in cases {
            let status = read(&Grpc::new().make_refusal(&refusal));
            let what = format!("{:?}", refusal.reason());
            assert_eq!(status.code(), code, "{what}");
            assert_eq!(status.message(), refusal.detail(), "{what}");
            let details = status.get_error_details();
            assert_eq!(
                details.retry_info().and_then(|r| r.retry_delay),
                refusal.retry_after(),
                "{what}"
            );
            let info = details.error_info().expect("ErrorInfo");
            assert_eq!(info.domain, "distlock");
            assert_eq!(
                info.reason.to_ascii_lowercase().replace('_', "-"),
                refusal.reason().code()
            );
            assert!(
                !status.details().windows(7).any(|w| w == b"order:1"),
                "{what}: the key is not sent"
            );
        }
    }

    #[test]
    fn hostile_text_is_percent_encoded_and_read_back() {
        let why = InvalidKey::custom("100% \"odd\"\nline\u{e9}");
        let refusal = Refusal::invalid_key(RefusedBy::Lock, why);
        let response = Grpc::new().domain("api.example.com").make_refusal(&refusal);
        let status = read(&response);
        assert_eq!(status.message(), refusal.detail());
        assert_eq!(
            status
                .get_error_details()
                .error_info()
                .map(|i| i.domain.as_str()),
            Some("api.example.com")
        );
    }

    #[test]
    fn grpc_or_http_picks_by_the_request() {
        let hook = Grpc::new().or_http(PlainText);
        let http = hook.make_refusal(&busy());
        assert_eq!(http.status(), StatusCode::LOCKED);
        assert!(http.headers().get("grpc-status").is_none());
        let grpc = read(&hook.make_refusal(&busy().for_grpc(true)));
        assert_eq!(grpc.code(), Code::Aborted);
        assert_eq!(
            GrpcOrHttp::<PlainText>::default()
                .make_refusal(&busy())
                .status(),
            StatusCode::LOCKED
        );
    }

    #[test]
    fn the_layers_recognise_grpc_calls() {
        let is = |content_type: &str| {
            let mut headers = http::HeaderMap::new();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_str(content_type).expect("header"),
            );
            super::super::is_grpc(&headers)
        };
        assert!(is("application/grpc"));
        assert!(is("application/grpc+proto"));
        assert!(is("Application/GRPC;charset=utf-8"));
        assert!(is("application/grpc-web+proto"));
        assert!(!is("application/json"));
        assert!(!is("application/gr"));
        assert!(!super::super::is_grpc(&http::HeaderMap::new()));
    }
}
