//! The responses the layers make themselves, and how to make them your own.
//!
//! When a layer answers a request instead of the inner service (`429`, `423`/`409`, `503`,
//! `400`, `500`), it describes why in a [`Refusal`]: the [`Reason`], the status it would
//! answer, the `Retry-After` wait, the subject or lock name, the rate-limit [`Decision`] and
//! the runtime's error, if any. A [`MakeRefusal`] turns it into the response. Set one with
//! `.refusal(..)` on any layer's builder:
//!
//! * [`PlainText`], the default: a short `text/plain` sentence, as the layers always sent.
//! * [`ProblemDetails`]: an RFC 9457 `application/problem+json` document.
//! * `Grpc` and `GrpcOrHttp` (feature `tonic`): a gRPC status for gRPC calls; see
//!   [gRPC](#grpc) below.
//! * a closure `Fn(&Refusal) -> Response<B>`, `B` anything that converts into [`Bytes`]
//!   (`String`, `Vec<u8>`, `&'static str`, `Bytes`), or your own type implementing
//!   [`MakeRefusal`]. [`Refusal::default_response`] and [`Refusal::problem_response`] are
//!   there to fall back on for the kinds you do not want to change.
//!
//! A handler that calls the runtime itself can answer its own errors the same way:
//! [`Refusal::from`] a `LockError` or `RateLimitError`, then
//! [`into_response_with`](Refusal::into_response_with) the layers' hook, or, in axum, return
//! [`Rendered<M>`](Rendered) and use `?`.
//!
//! Whatever makes the response, the layer then adds what belongs to its protocol: a
//! `Retry-After` when the refusal has a wait and the response does not set one itself, the
//! `RateLimit-Policy` / `RateLimit` fields of a rate-limit refusal (as the layer is
//! configured), and the [`Refusal`] itself in the response's extensions, so that outer layers
//! and logging can tell why the request was refused. The inner service's error type is never
//! involved: a refusal is always a response.
//!
//! ```
//! use std::time::Duration;
//!
//! use axum::{Router, body::Body, routing::get};
//! use distlock::ratelimit::{Policy, Rate};
//! use distlock_tower::extract::Header;
//! use distlock_tower::rate_limit::RateLimitLayer;
//! use distlock_tower::refusal::{Reason, Refusal};
//! use http::{Request, Response, StatusCode};
//! use tower::ServiceExt;
//!
//! /// Our API answers JSON; only the rate-limit refusal gets a body of its own.
//! fn refuse(refusal: &Refusal) -> Response<String> {
//!     match refusal.reason() {
//!         Reason::TooManyRequests => Response::builder()
//!             .status(StatusCode::TOO_MANY_REQUESTS)
//!             .header("content-type", "application/json")
//!             .body(format!(
//!                 r#"{{"error":"slow down","retry_in":{}}}"#,
//!                 refusal.retry_after_secs().unwrap_or(1)
//!             ))
//!             .unwrap(),
//!         _ => refusal.default_response().map(|body| String::from_utf8_lossy(&body).into_owned()),
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = distlock::Client::in_memory();
//! let limiter = client.rate_limiter(Policy::gcra("api", Rate::per_minute(60)?.burst(1)?)?).build()?;
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::builder(limiter, Header::from_static("x-api-key")).refusal(refuse).build()?);
//!
//! let request = || Request::get("/").header("x-api-key", "k1").body(Body::empty()).unwrap();
//! app.clone().oneshot(request()).await?;
//! let refused = app.oneshot(request()).await?;
//! assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(refused.headers()["content-type"], "application/json");
//! // Added by the layer: the hook did not set them.
//! assert_eq!(refused.headers()["retry-after"], "1");
//! assert!(refused.headers().contains_key("ratelimit"));
//! // And the refusal, for outer layers and logging.
//! let why = refused.extensions().get::<Refusal>().unwrap();
//! assert_eq!(why.decision().map(|d| &*d.policy), Some("api"));
//! # Ok(()) }
//! ```
//!
//! # gRPC
//!
//! With the `tonic` feature, the layers answer gRPC calls in gRPC, so that one budget (one
//! limiter, one lock, one concurrency limit) serves the HTTP and the gRPC face of a service:
//!
//! * `Grpc` answers every refusal with a gRPC status: a trailers-only response (`200`,
//!   `content-type: application/grpc`, no body) whose `grpc-status` is the refusal's code,
//!   `grpc-message` its [`detail`](Refusal::detail), and `grpc-status-details-bin` a
//!   `google.rpc.Status` with a `RetryInfo { retry_delay }` when the refusal has a wait and
//!   an `ErrorInfo` naming the reason. Use it on a layer in front of a tonic server
//!   (`Server::builder().layer(..)`).
//! * `GrpcOrHttp` answers a gRPC call ([`Refusal::is_grpc`]: its `content-type` starts with
//!   `application/grpc`) with `Grpc`, and any other request with an HTTP hook
//!   ([`PlainText`] by default): for one layer in front of both faces.
//!
//! | reason | gRPC code | `RetryInfo` |
//! | --- | --- | --- |
//! | rate limited ([`Reason::TooManyRequests`]) | `RESOURCE_EXHAUSTED` | the limiter's wait |
//! | lock busy ([`Reason::LockBusy`]) | `ABORTED` | the holder's remaining ttl |
//! | concurrency limit full ([`Reason::AtCapacity`]) | `UNAVAILABLE` (`RESOURCE_EXHAUSTED` when the layer answers `429`) | the layer's `retry_after` |
//! | store unavailable ([`Reason::StoreUnavailable`]) | `UNAVAILABLE` | 1 s |
//! | lease lost ([`Reason::LeaseLost`]) | `ABORTED` | 1 s |
//! | the client is shutting down ([`Reason::ShuttingDown`]) | `UNAVAILABLE` | 1 s |
//! | idempotent request in flight ([`Reason::InFlight`]) | `ABORTED` | the layer's wait |
//! | missing, invalid or unusable key, no scope ([`Reason::MissingScope`]) | `INVALID_ARGUMENT` | none |
//! | cost or body too large ([`Reason::CostTooLarge`], [`Reason::BodyTooLarge`]) | `RESOURCE_EXHAUSTED` | none |
//! | idempotency key reused ([`Reason::KeyReused`]), its request's outcome unknown ([`Reason::OutcomeUnknown`]) or its response not kept ([`Reason::ResponseNotKept`]) | `FAILED_PRECONDITION` | none |
//! | [`Reason::Internal`] | `INTERNAL` | none |
//!
//! `Grpc`'s own documentation says why each. The `Retry-After` and rate-limit fields the
//! layer adds are ordinary headers, which a gRPC client reads as the call's metadata.
//!
//! ```
//! # #[cfg(feature = "tonic")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use axum::{body::Body, routing::get};
//! use distlock::ratelimit::{Policy, Rate};
//! use distlock_tower::RateLimitLayer;
//! use distlock_tower::extract::Header;
//! use distlock_tower::refusal::{Grpc, PlainText};
//! use http::{Request, StatusCode};
//! use tonic_types::StatusExt;
//! use tower::ServiceExt;
//!
//! let limiter = distlock::Client::in_memory()
//!     .rate_limiter(Policy::gcra("calls", Rate::per_minute(2)?.burst(2)?)?)
//!     .build()?;
//! // A gRPC service (here tonic's health service) and an HTTP route in one router, behind
//! // one layer: `axum::serve` serves both over HTTP/1.1 and HTTP/2.
//! let (_, health) = tonic_health::server::health_reporter();
//! let app = tonic::service::Routes::new(health)
//!     .into_axum_router()
//!     .route("/status", get(|| async { "ok" }))
//!     .layer(
//!         RateLimitLayer::builder(limiter, Header::from_static("x-api-key"))
//!             .refusal(Grpc::new().or_http(PlainText))
//!             .build()?,
//!     );
//!
//! let http = || Request::get("/status").header("x-api-key", "k1").body(Body::empty()).unwrap();
//! let grpc = || {
//!     Request::post("/grpc.health.v1.Health/Check")
//!         .header("content-type", "application/grpc")
//!         .header("x-api-key", "k1")
//!         .body(Body::empty())
//!         .unwrap()
//! };
//! // The two faces spend one budget of two...
//! assert_eq!(app.clone().oneshot(http()).await?.status(), StatusCode::OK);
//! app.clone().oneshot(grpc()).await?;
//! // ...and each is refused in its own protocol.
//! assert_eq!(app.clone().oneshot(http()).await?.status(), StatusCode::TOO_MANY_REQUESTS);
//! let refused = app.oneshot(grpc()).await?;
//! assert_eq!(refused.status(), StatusCode::OK);
//! let status = tonic::Status::from_header_map(refused.headers()).unwrap();
//! assert_eq!(status.code(), tonic::Code::ResourceExhausted);
//! let wait = status.get_error_details().retry_info().and_then(|r| r.retry_delay).unwrap();
//! assert!(wait <= std::time::Duration::from_secs(30));
//! # Ok(()) }
//! # #[cfg(not(feature = "tonic"))]
//! # fn main() {}
//! ```

#[cfg(feature = "tonic")]
mod grpc;
mod problem;
#[cfg(feature = "axum")]
mod rendered;

use std::borrow::Cow;
use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use distlock::ratelimit::Decision;
use distlock::{LockError, RateLimitError};
use http::{HeaderValue, Response, StatusCode, header};

#[cfg(feature = "tonic")]
pub use grpc::{Grpc, GrpcOrHttp};
pub use problem::ProblemDetails;
#[cfg(feature = "axum")]
pub(crate) use problem::push_json_string;
#[cfg(feature = "axum")]
pub use rendered::Rendered;

use crate::extract::InvalidKey;
use crate::retry_after;

/// What a refusal for [`Reason::ShuttingDown`] tells the client, whichever layer refused.
const SHUTTING_DOWN: &str = "this server is shutting down; try again";

/// Why a layer answered a request itself instead of calling the inner service.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    /// The rate limiter denied the request (`429`); [`Refusal::decision`] says which policy
    /// and for how long.
    TooManyRequests,
    /// Another holder has the request's lock (`423`, or `409` with
    /// [`BusyStatus::Conflict`](crate::lock::BusyStatus::Conflict)), after the layer's wait if
    /// it has one.
    LockBusy,
    /// The request's key already has as many requests in flight as the
    /// [`ConcurrencyLimitLayer`](crate::ConcurrencyLimitLayer) allows, across every replica
    /// (`503`, or `429` with
    /// [`FullStatus::TooManyRequests`](crate::concurrency::FullStatus::TooManyRequests)),
    /// after the layer's wait if it has one.
    AtCapacity,
    /// The key extractor found no key and the layer rejects such requests (`400`).
    MissingKey,
    /// The request carries its key, malformed (`400`), whatever the missing-key setting.
    InvalidKey(InvalidKey),
    /// The key cannot be a lock name or rate-limit subject, e.g. too long once prefixed
    /// (`400`); [`Refusal::error`] has the runtime's error.
    UnusableKey,
    /// The store failed or did not answer in time, and the limiter fails closed or the lock
    /// could not be taken (`503`); [`Refusal::error`] has the runtime's error.
    StoreUnavailable,
    /// The lease was lost while the handler ran (`503`): the handler was dropped.
    LeaseLost,
    /// The request costs more than a rate-limit policy ever allows at once (`413`): no retry
    /// helps, only a smaller request. [`Refusal::error`] has the runtime's
    /// [`RateLimitError::CostTooLarge`].
    CostTooLarge,
    /// An error the layer's configuration should have ruled out (`500`, or the status of
    /// [`distlock::http`]); [`Refusal::error`] has it.
    Internal,
    /// Another request with the same idempotency key is running (`409`), after the
    /// [`IdempotencyLayer`](crate::IdempotencyLayer)'s wait if it has one.
    InFlight,
    /// The idempotency key was used for a request with another method, path or body (`422`).
    KeyReused,
    /// The request body is over the [`IdempotencyLayer`](crate::IdempotencyLayer)'s cap, so it
    /// cannot be fingerprinted (`413`).
    BodyTooLarge,
    /// The [`IdempotencyLayer`](crate::IdempotencyLayer) could not tell who sends the request
    /// (its scope extractor found nothing), so it cannot tell whose key it is (`400`).
    MissingScope,
    /// The idempotency key's first request started and never finished (its process died, its
    /// claim was lost, its handler panicked or its response broke): what it did is unknown,
    /// so it is not run again (`409`, problem type `.../outcome-unknown`). Kept for the
    /// layer's record ttl; retry with a new key once you know what happened.
    OutcomeUnknown,
    /// The idempotency key's first request finished, but its response was larger than the
    /// [`IdempotencyLayer`](crate::IdempotencyLayer) keeps: it is not run again, and there is
    /// nothing to replay (`409`).
    ResponseNotKept,
    /// The layer's client is shutting down ([`distlock::Client::close`] or
    /// [`distlock::Client::shutdown`]): it takes no new lease, so this instance takes no new
    /// request that needs one (`503` with `Retry-After: 1`, for another instance to take).
    /// Requests already running finish under the leases they hold.
    ShuttingDown,
}

impl Reason {
    /// A stable, lower-case name for logs, metrics and problem types: `too-many-requests`,
    /// `lock-busy`, `at-capacity`, `missing-key`, `invalid-key`, `unusable-key`,
    /// `store-unavailable`, `lease-lost`, `cost-too-large`, `internal`, `in-flight`,
    /// `key-reused`, `body-too-large`, `missing-scope`, `outcome-unknown`,
    /// `response-not-kept`, `shutting-down`.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::TooManyRequests => "too-many-requests",
            Self::LockBusy => "lock-busy",
            Self::AtCapacity => "at-capacity",
            Self::MissingKey => "missing-key",
            Self::InvalidKey(_) => "invalid-key",
            Self::UnusableKey => "unusable-key",
            Self::StoreUnavailable => "store-unavailable",
            Self::LeaseLost => "lease-lost",
            Self::CostTooLarge => "cost-too-large",
            Self::Internal => "internal",
            Self::InFlight => "in-flight",
            Self::KeyReused => "key-reused",
            Self::BodyTooLarge => "body-too-large",
            Self::MissingScope => "missing-scope",
            Self::OutcomeUnknown => "outcome-unknown",
            Self::ResponseNotKept => "response-not-kept",
            Self::ShuttingDown => "shutting-down",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// Which layer refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefusedBy {
    /// A [`RateLimitLayer`](crate::RateLimitLayer).
    RateLimit,
    /// A [`LockLayer`](crate::LockLayer).
    Lock,
    /// A [`ConcurrencyLimitLayer`](crate::ConcurrencyLimitLayer).
    ConcurrencyLimit,
    /// An [`IdempotencyLayer`](crate::IdempotencyLayer).
    Idempotency,
}

/// Why a layer answered a request itself, with everything it knows about it: given to the
/// layer's [`MakeRefusal`], and put in the extensions of the response.
///
/// The key (a rate-limit subject, a lock name) is here for your code and your logs. The
/// default responses never send it to the client, since it may be an API key or an address;
/// do the same in a hook of your own unless you know it is harmless.
#[derive(Clone)]
pub struct Refusal {
    reason: Reason,
    refused_by: RefusedBy,
    status: StatusCode,
    retry_after: Option<Duration>,
    key: Option<Arc<str>>,
    decision: Option<Decision>,
    /// The decision's binding policy is one the layer keeps out of what clients see.
    policy_hidden: bool,
    error: Option<Arc<dyn Error + Send + Sync>>,
    grpc: bool,
}

impl fmt::Debug for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Refusal")
            .field("reason", &self.reason)
            .field("refused_by", &self.refused_by)
            .field("status", &self.status)
            .field("retry_after", &self.retry_after)
            .field("key", &self.key)
            .field("decision", &self.decision)
            .field("policy_hidden", &self.policy_hidden)
            .field("error", &self.error.as_ref().map(ToString::to_string))
            .field("grpc", &self.grpc)
            .finish()
    }
}

impl Refusal {
    fn new(refused_by: RefusedBy, reason: Reason, status: StatusCode) -> Self {
        Self {
            reason,
            refused_by,
            status,
            retry_after: None,
            key: None,
            decision: None,
            policy_hidden: false,
            error: None,
            grpc: false,
        }
    }

    fn with_key(mut self, key: &str) -> Self {
        self.key = Some(Arc::from(key));
        self
    }

    fn with_error<E: Error + Send + Sync + 'static>(mut self, error: E) -> Self {
        self.error = Some(Arc::new(error));
        self
    }

    /// A refusal of the idempotency layer: `reason` with `status`, for the request keyed
    /// `key` if it had a usable one, caused by `error` if any.
    pub(crate) fn idempotency(
        reason: Reason,
        status: StatusCode,
        key: Option<&str>,
        error: Option<distlock::IdempotencyError>,
        retry_after: Option<Duration>,
    ) -> Self {
        let mut refusal = Self::new(RefusedBy::Idempotency, reason, status);
        if let Some(key) = key {
            refusal = refusal.with_key(key);
        }
        if let Some(error) = error {
            refusal = refusal.with_error(error);
        }
        refusal.retry_after = retry_after;
        refusal
    }

    /// The request had no key, and the layer rejects such requests.
    pub(crate) fn missing_key(refused_by: RefusedBy) -> Self {
        Self::new(refused_by, Reason::MissingKey, StatusCode::BAD_REQUEST)
    }

    /// The request's key is malformed.
    pub(crate) fn invalid_key(refused_by: RefusedBy, why: InvalidKey) -> Self {
        Self::new(refused_by, Reason::InvalidKey(why), StatusCode::BAD_REQUEST)
    }

    /// The rate limiter denied `subject`; `hidden` says whether the binding policy is one
    /// the layer keeps out of what clients see.
    pub(crate) fn too_many_requests(subject: &str, decision: Decision, hidden: bool) -> Self {
        let mut refusal = Self::new(
            RefusedBy::RateLimit,
            Reason::TooManyRequests,
            StatusCode::TOO_MANY_REQUESTS,
        )
        .with_key(subject);
        refusal.retry_after = Some(decision.retry_after);
        refusal.decision = Some(decision);
        refusal.policy_hidden = hidden;
        refusal
    }

    /// The rate limiter failed for `subject`.
    pub(crate) fn rate_limit_error(subject: &str, err: RateLimitError) -> Self {
        Self::from_rate_limit_error(err).with_key(subject)
    }

    /// The refusal the rate-limit layer makes of a runtime error, for a handler that calls
    /// the limiter itself: status and `Retry-After` are the runtime's mapping
    /// ([`RateLimitError::http_status`]), the reason and the text the layer's. Render it with
    /// [`into_response_with`](Self::into_response_with), or return a
    /// [`Rendered`] from the handler.
    #[must_use]
    pub fn from_rate_limit_error(err: RateLimitError) -> Self {
        let reason = match &err {
            RateLimitError::InvalidSubject(_) => Reason::UnusableKey,
            RateLimitError::Store(_)
            | RateLimitError::Overloaded { .. }
            | RateLimitError::CircuitOpen { .. } => Reason::StoreUnavailable,
            RateLimitError::CostTooLarge { .. } => Reason::CostTooLarge,
            _ => Reason::Internal,
        };
        let mapped = err.http_status();
        let mut refusal =
            Self::new(RefusedBy::RateLimit, reason, status_code(mapped.code)).with_error(err);
        refusal.retry_after = mapped.retry_after;
        refusal
    }

    /// The refusal the lock layer makes of a runtime error, for a handler that takes a lock
    /// (or a semaphore, a read-write lock) itself: status and `Retry-After` are the runtime's
    /// mapping ([`LockError::http_status`], so a busy lock is `423` with the holder's
    /// remaining ttl), the reason and the text the layer's. The lock's name, when the error
    /// has one, is the [`key`](Self::key) (never sent to the client). Render it with
    /// [`into_response_with`](Self::into_response_with), or return a [`Rendered`] from the
    /// handler.
    #[must_use]
    pub fn from_lock_error(err: LockError) -> Self {
        let name = match &err {
            LockError::Busy { name, .. }
            | LockError::Timeout { name, .. }
            | LockError::LeaseLost { name, .. }
            | LockError::MaxHoldReached { name }
            | LockError::PermitsExceeded { name, .. }
            | LockError::ShuttingDown { name } => Some(Arc::from(name.as_str())),
            _ => None,
        };
        let mut refusal = Self::lock_error_by(err, StatusCode::LOCKED);
        refusal.key = name;
        refusal
    }

    /// Taking the lock `name` failed. Status and `Retry-After` are the runtime's mapping
    /// ([`LockError::http_status`]), the one a handler's `IntoResponse` uses, except that a
    /// busy lock answers the layer's `busy` status (`423` or `409`).
    pub(crate) fn lock_error(name: &str, err: LockError, busy: StatusCode) -> Self {
        Self::lock_error_by(err, busy).with_key(name)
    }

    /// [`lock_error`](Self::lock_error) without a key.
    fn lock_error_by(err: LockError, busy: StatusCode) -> Self {
        let mapped = err.http_status();
        let (reason, status) = match &err {
            LockError::Busy { .. } | LockError::Timeout { .. } => (Reason::LockBusy, busy),
            LockError::InvalidName(_) => (Reason::UnusableKey, status_code(mapped.code)),
            LockError::Store(_) => (Reason::StoreUnavailable, status_code(mapped.code)),
            LockError::LeaseLost { .. } => (Reason::LeaseLost, status_code(mapped.code)),
            LockError::ShuttingDown { .. } => (Reason::ShuttingDown, status_code(mapped.code)),
            _ => (Reason::Internal, status_code(mapped.code)),
        };
        let mut refusal = Self::new(RefusedBy::Lock, reason, status).with_error(err);
        refusal.retry_after = mapped.retry_after;
        refusal
    }

    /// Marks the refusal as one of a gRPC call (see [`is_grpc`](Self::is_grpc)), or not.
    ///
    /// The layers set it from the request's `content-type`; a handler that renders a refusal
    /// itself with [`into_response_with`](Self::into_response_with) sets it the same way when
    /// its hook tells the two apart (a `GrpcOrHttp` with the `tonic` feature).
    #[must_use]
    pub fn for_grpc(mut self, grpc: bool) -> Self {
        self.grpc = grpc;
        self
    }

    /// Whether the refused request was a gRPC call: its `content-type` is `application/grpc`
    /// or one of its variants (`application/grpc+proto`, `application/grpc-web`...). A hook
    /// answers such a call with a gRPC status rather than an HTTP error page; `GrpcOrHttp`
    /// (feature `tonic`) does exactly that.
    #[must_use]
    pub fn is_grpc(&self) -> bool {
        self.grpc
    }

    /// Caps the wait this refusal tells (if it tells one) at `cap`.
    pub(crate) fn cap_retry_after(mut self, cap: Duration) -> Self {
        self.retry_after = self.retry_after.map(|wait| wait.min(cap));
        self
    }

    /// The lease that layer `refused_by` held for the request on `name` was lost while the
    /// handler ran.
    pub(crate) fn lease_lost_by(refused_by: RefusedBy, name: &str) -> Self {
        let mut refusal = Self::new(
            refused_by,
            Reason::LeaseLost,
            StatusCode::SERVICE_UNAVAILABLE,
        )
        .with_key(name);
        refusal.retry_after = Some(distlock::http::STORE_RETRY_AFTER);
        refusal
    }

    /// Taking a permit of the concurrency limit on `key` failed: every permit is taken (`full`
    /// is the layer's status for that, `retry_after` its wait), or the runtime failed (its own
    /// mapping, as for a lock).
    pub(crate) fn concurrency_error(
        key: &str,
        err: LockError,
        full: StatusCode,
        retry_after: Duration,
    ) -> Self {
        let mapped = err.http_status();
        let (reason, status, wait) = match &err {
            LockError::Busy { .. } | LockError::Timeout { .. } => {
                (Reason::AtCapacity, full, Some(retry_after))
            }
            LockError::InvalidName(_) => (Reason::UnusableKey, status_code(mapped.code), None),
            LockError::Store(_) => (
                Reason::StoreUnavailable,
                status_code(mapped.code),
                mapped.retry_after,
            ),
            LockError::ShuttingDown { .. } => (
                Reason::ShuttingDown,
                status_code(mapped.code),
                mapped.retry_after,
            ),
            _ => (
                Reason::Internal,
                status_code(mapped.code),
                mapped.retry_after,
            ),
        };
        let mut refusal = Self::new(RefusedBy::ConcurrencyLimit, reason, status)
            .with_key(key)
            .with_error(err);
        refusal.retry_after = wait;
        refusal
    }

    /// Why the layer refused.
    #[must_use]
    pub fn reason(&self) -> &Reason {
        &self.reason
    }

    /// Which layer refused.
    #[must_use]
    pub fn refused_by(&self) -> RefusedBy {
        self.refused_by
    }

    /// The status the layer answers by default: `429`, `423` or `409` (the lock layer's
    /// [`busy_status`](crate::LockLayerBuilder::busy_status)), `503` or `429` for a full concurrency
    /// limit, `400`, `503`, or the runtime's status for an unexpected error.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// How long the client should wait before retrying: the rate limiter's `retry_after`, the
    /// lock holder's remaining ttl, the concurrency limit's
    /// [`retry_after`](crate::ConcurrencyLimitLayerBuilder::retry_after), or 1 s after a store
    /// failure or a lost lease. `None` when
    /// a retry will not help (a bad key) or nothing is known.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// [`retry_after`](Self::retry_after) as the `Retry-After` value: whole seconds, rounded
    /// up, at least 1.
    #[must_use]
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after.map(distlock::http::retry_after_secs)
    }

    /// The request's key when it had a usable one: the rate-limit subject, the lock name, or
    /// the concurrency limit's semaphore name.
    /// Not for the client (see the type's docs).
    #[must_use]
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The rate limiter's decision, for [`Reason::TooManyRequests`]: the binding policy, its
    /// figures, and where the answer came from ([`Decision::origin`]: the store, the deny
    /// cache, the local fallback).
    #[must_use]
    pub fn decision(&self) -> Option<&Decision> {
        self.decision.as_ref()
    }

    /// The name of the rate-limit policy that refused, when the client may learn it: `None`
    /// for other refusals, and for a policy the layer hides
    /// ([`hide_policies`](crate::rate_limit::RateLimitLayerBuilder::hide_policies)).
    /// [`ProblemDetails`] sends it as `policy`; [`decision`](Self::decision) names it either
    /// way, for logs and metrics.
    #[must_use]
    pub fn policy(&self) -> Option<&str> {
        if self.policy_hidden {
            return None;
        }
        self.decision.as_ref().map(|d| &*d.policy)
    }

    /// The runtime's error behind the refusal, if there was one: a
    /// [`distlock::RateLimitError`] or [`distlock::LockError`] (downcast it to read it).
    #[must_use]
    pub fn error(&self) -> Option<&(dyn Error + Send + Sync + 'static)> {
        self.error.as_deref()
    }

    /// One sentence for the client on what happened: the body of the default response and
    /// the `detail` of a problem document. It never contains the key.
    #[must_use]
    pub fn detail(&self) -> Cow<'static, str> {
        if self.refused_by == RefusedBy::ConcurrencyLimit {
            return self.concurrency_detail();
        }
        if self.refused_by == RefusedBy::Idempotency {
            return self.idempotency_detail();
        }
        let rate_limit = self.refused_by == RefusedBy::RateLimit;
        match (&self.reason, rate_limit) {
            (Reason::TooManyRequests, _) => Cow::Owned(format!(
                "too many requests; retry in {} s",
                self.retry_after_secs().unwrap_or(1)
            )),
            (Reason::LockBusy, _) => "locked: another request holds this resource".into(),
            (Reason::MissingKey, true) => "this request has no rate-limit key".into(),
            (Reason::MissingKey, false) => "this request names no lock key".into(),
            (Reason::InvalidKey(why), true) => {
                Cow::Owned(format!("this request's rate-limit key is invalid: {why}"))
            }
            (Reason::InvalidKey(why), false) => {
                Cow::Owned(format!("this request's lock key is invalid: {why}"))
            }
            (Reason::UnusableKey, true) => "this request's rate-limit key is unusable".into(),
            (Reason::UnusableKey, false) => "this request's lock key is invalid".into(),
            (Reason::StoreUnavailable, true) => {
                "rate limiting is unavailable; try again shortly".into()
            }
            (Reason::StoreUnavailable, false) => "lock store unavailable, try again later".into(),
            (Reason::LeaseLost, _) => "the lock was lost while handling this request".into(),
            (Reason::ShuttingDown, _) => SHUTTING_DOWN.into(),
            (Reason::CostTooLarge, _) => {
                "this request costs more than the rate limit ever allows at once".into()
            }
            (Reason::Internal, true) => "rate limit error".into(),
            (Reason::Internal, false) => "lock error".into(),
            (Reason::AtCapacity, _) => "too many requests in flight; try again shortly".into(),
            (
                Reason::InFlight
                | Reason::KeyReused
                | Reason::BodyTooLarge
                | Reason::MissingScope
                | Reason::OutcomeUnknown
                | Reason::ResponseNotKept,
                _,
            ) => "request refused".into(),
        }
    }

    /// [`detail`](Self::detail) for a refusal of the idempotency layer.
    fn idempotency_detail(&self) -> Cow<'static, str> {
        match &self.reason {
            Reason::InFlight => {
                "a request with this idempotency key is being processed; retry later".into()
            }
            Reason::KeyReused => "this idempotency key was used for a different request".into(),
            Reason::BodyTooLarge => {
                "the request body is too large for an idempotent request".into()
            }
            Reason::MissingKey => "this request needs an Idempotency-Key header".into(),
            Reason::InvalidKey(why) => {
                Cow::Owned(format!("this request's idempotency key is invalid: {why}"))
            }
            Reason::UnusableKey => "this request's idempotency key is invalid".into(),
            Reason::StoreUnavailable => "idempotency store unavailable, try again later".into(),
            Reason::ShuttingDown => SHUTTING_DOWN.into(),
            Reason::MissingScope => {
                "this request does not say who sends it, so its idempotency key cannot be used"
                    .into()
            }
            Reason::OutcomeUnknown => "a request with this idempotency key started and did not \
                finish: its outcome is unknown, so it is not run again; check its effect, then \
                use a new key"
                .into(),
            Reason::ResponseNotKept => "a request with this idempotency key finished, but its \
                response was too large to keep: it is not run again"
                .into(),
            Reason::LeaseLost
            | Reason::TooManyRequests
            | Reason::LockBusy
            | Reason::AtCapacity
            | Reason::CostTooLarge
            | Reason::Internal => "idempotency error".into(),
        }
    }

    /// [`detail`](Self::detail) for a refusal of the concurrency limit.
    fn concurrency_detail(&self) -> Cow<'static, str> {
        match &self.reason {
            Reason::AtCapacity => "too many requests in flight; try again shortly".into(),
            Reason::MissingKey => "this request has no concurrency-limit key".into(),
            Reason::InvalidKey(why) => Cow::Owned(format!(
                "this request's concurrency-limit key is invalid: {why}"
            )),
            Reason::UnusableKey => "this request's concurrency-limit key is invalid".into(),
            Reason::StoreUnavailable => {
                "concurrency limit store unavailable, try again later".into()
            }
            Reason::LeaseLost => {
                "the request's place in the concurrency limit was lost while handling it".into()
            }
            Reason::ShuttingDown => SHUTTING_DOWN.into(),
            Reason::TooManyRequests
            | Reason::LockBusy
            | Reason::CostTooLarge
            | Reason::Internal
            | Reason::InFlight
            | Reason::KeyReused
            | Reason::BodyTooLarge
            | Reason::MissingScope
            | Reason::OutcomeUnknown
            | Reason::ResponseNotKept => "concurrency limit error".into(),
        }
    }

    /// The response the layer sends by default ([`PlainText`]): [`status`](Self::status),
    /// [`detail`](Self::detail) as `text/plain`, and `Retry-After` when there is a wait.
    #[must_use]
    pub fn default_response(&self) -> Response<Bytes> {
        let mut text = self.detail().into_owned();
        text.push('\n');
        self.response(
            HeaderValue::from_static("text/plain; charset=utf-8"),
            Bytes::from(text),
        )
    }

    /// The refusal as an RFC 9457 problem document, as [`ProblemDetails::new`] makes it.
    #[must_use]
    pub fn problem_response(&self) -> Response<Bytes> {
        ProblemDetails::new().make_refusal(self)
    }

    /// A response with the refusal's status and `Retry-After`, and this body.
    fn response(&self, content_type: HeaderValue, body: Bytes) -> Response<Bytes> {
        let mut response = Response::new(body);
        *response.status_mut() = self.status;
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, content_type);
        if let Some(wait) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, retry_after::header(wait));
        }
        response
    }

    /// The response `make` gives this refusal, exactly as a layer with that hook sends it:
    /// made by `make`, then given the `Retry-After` it lacks, with the refusal in its
    /// extensions. A `500` is logged at ERROR with its reason (once: the layers call this
    /// too).
    ///
    /// For a handler that calls the runtime itself and should answer as the layers do; in
    /// axum, [`Rendered`] does it in the return type.
    ///
    /// ```
    /// use std::time::Duration;
    /// use distlock::LockError;
    /// use distlock_tower::refusal::{ProblemDetails, Refusal};
    ///
    /// let err = LockError::Busy { name: "order:42".into(), retry_after: Duration::from_secs(3) };
    /// let response = Refusal::from(err).into_response_with(&ProblemDetails::new());
    /// assert_eq!(response.status(), 423);
    /// assert_eq!(response.headers()["content-type"], "application/problem+json");
    /// assert_eq!(response.headers()["retry-after"], "3");
    /// ```
    #[must_use]
    pub fn into_response_with<M: MakeRefusal>(self, make: &M) -> Response<Bytes> {
        self.respond(make, Into::into)
    }

    /// [`into_response_with`](Self::into_response_with), with the body in the layer's type.
    pub(crate) fn respond<M: MakeRefusal, B>(
        self,
        make: &M,
        body: impl FnOnce(Bytes) -> B,
    ) -> Response<B> {
        if self.status == StatusCode::INTERNAL_SERVER_ERROR {
            // What went wrong is for the operator: the client gets a fixed sentence.
            tracing::error!(
                refused_by = ?self.refused_by,
                key = self.key().map(|k| tracing::field::display(distlock::logging::redacted(k))),
                reason = self.reason.code(),
                error = self.error.as_ref().map(tracing::field::display),
                "answering 500: {}",
                self.detail()
            );
        }
        let response = make.make_refusal(&self);
        let mut response = response.map(|b| body(b.into()));
        if let Some(wait) = self.retry_after
            && !response.headers().contains_key(header::RETRY_AFTER)
        {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, retry_after::header(wait));
        }
        response.extensions_mut().insert(self);
        response
    }
}

/// [`Refusal::from_lock_error`].
impl From<LockError> for Refusal {
    fn from(err: LockError) -> Self {
        Self::from_lock_error(err)
    }
}

/// [`Refusal::from_rate_limit_error`].
impl From<RateLimitError> for Refusal {
    fn from(err: RateLimitError) -> Self {
        Self::from_rate_limit_error(err)
    }
}

/// Whether a request with these headers is a gRPC call: its `content-type` starts with
/// `application/grpc` (gRPC over HTTP/2 says `application/grpc` followed by nothing, `+` and a
/// message format, or `;` and parameters; gRPC-Web's types start the same way).
pub(crate) fn is_grpc(headers: &http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.as_bytes().get(..16))
        .is_some_and(|start| start.eq_ignore_ascii_case(b"application/grpc"))
}

/// A status code of the runtime's mapping, which only uses valid ones.
fn status_code(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// Makes the response of a [`Refusal`]: the hook behind both layers' `.refusal(..)`.
///
/// Implemented for closures `Fn(&Refusal) -> Response<B>` where `B` converts into [`Bytes`],
/// for [`PlainText`] (the default) and for [`ProblemDetails`]. The layer adds a missing
/// `Retry-After`, the rate-limit fields and the refusal itself to whatever it returns (see the
/// [module docs](self)). It is called on the request's task and must not block; it is shared
/// by every clone of the layer's services, so it must be cheap to clone.
pub trait MakeRefusal: Clone + Send + Sync + 'static {
    /// The body of the responses it makes.
    type Body: Into<Bytes>;

    /// The response for `refusal`.
    fn make_refusal(&self, refusal: &Refusal) -> Response<Self::Body>;
}

impl<F, B> MakeRefusal for F
where
    F: Fn(&Refusal) -> Response<B> + Clone + Send + Sync + 'static,
    B: Into<Bytes>,
{
    type Body = B;

    fn make_refusal(&self, refusal: &Refusal) -> Response<B> {
        self(refusal)
    }
}

/// The default [`MakeRefusal`]: [`Refusal::default_response`], a short `text/plain`
/// sentence with the refusal's status and `Retry-After`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlainText;

impl MakeRefusal for PlainText {
    type Body = Bytes;

    fn make_refusal(&self, refusal: &Refusal) -> Response<Bytes> {
        refusal.default_response()
    }
}

#[cfg(test)]
mod tests {
    use distlock::ratelimit::{Policy, Rate};
    use distlock::{InvalidName, StoreError};

    use super::*;

    /// A denial by the policy `api` (1 per second, burst 1), about a second to wait.
    async fn denied() -> Decision {
        let rate = Rate::per_second(1)
            .and_then(|r| r.burst(1))
            .expect("valid rate");
        let limiter = distlock::Client::in_memory()
            .rate_limiter(Policy::gcra("api", rate).expect("valid policy"))
            .build()
            .expect("valid limiter");
        limiter.check("s").await.expect("in memory");
        let decision = limiter.check("s").await.expect("in memory");
        assert!(!decision.allowed);
        decision
    }

    fn body(response: &Response<Bytes>) -> &str {
        std::str::from_utf8(response.body()).expect("UTF-8")
    }

    /// The default responses, kind by kind, are the texts, statuses and `Retry-After` values
    /// the layers sent before responses could be customised.
    #[tokio::test]
    async fn default_responses_are_unchanged() {
        let store = || StoreError::Unreachable {
            message: "refused".to_owned(),
            cause: None,
        };
        let table: Vec<(Refusal, u16, Option<&str>, &str)> = vec![
            (
                Refusal::too_many_requests("1.2.3.4", denied().await, false),
                429,
                Some("1"),
                "too many requests; retry in 1 s\n",
            ),
            (
                Refusal::missing_key(RefusedBy::RateLimit),
                400,
                None,
                "this request has no rate-limit key\n",
            ),
            (
                Refusal::invalid_key(RefusedBy::RateLimit, InvalidKey::Repeated),
                400,
                None,
                "this request's rate-limit key is invalid: the key is given more than once\n",
            ),
            (
                Refusal::rate_limit_error("k", RateLimitError::InvalidSubject(InvalidName::Empty)),
                400,
                None,
                "this request's rate-limit key is unusable\n",
            ),
            (
                Refusal::rate_limit_error("k", RateLimitError::Store(store())),
                503,
                Some("1"),
                "rate limiting is unavailable; try again shortly\n",
            ),
            (
                Refusal::rate_limit_error("k", RateLimitError::Overloaded { in_flight: 1 }),
                503,
                Some("1"),
                "rate limiting is unavailable; try again shortly\n",
            ),
            (
                Refusal::lock_error(
                    "order:1",
                    LockError::Busy {
                        name: "order:1".to_owned(),
                        retry_after: Duration::from_millis(9001),
                    },
                    StatusCode::LOCKED,
                ),
                423,
                Some("10"),
                "locked: another request holds this resource\n",
            ),
            (
                Refusal::lock_error(
                    "order:1",
                    LockError::Busy {
                        name: "order:1".to_owned(),
                        retry_after: Duration::from_secs(3),
                    },
                    StatusCode::CONFLICT,
                ),
                409,
                Some("3"),
                "locked: another request holds this resource\n",
            ),
            (
                Refusal::missing_key(RefusedBy::Lock),
                400,
                None,
                "this request names no lock key\n",
            ),
            (
                Refusal::invalid_key(RefusedBy::Lock, InvalidKey::Empty),
                400,
                None,
                "this request's lock key is invalid: the key is empty\n",
            ),
            (
                Refusal::lock_error(
                    "k",
                    LockError::InvalidName(InvalidName::Empty),
                    StatusCode::LOCKED,
                ),
                400,
                None,
                "this request's lock key is invalid\n",
            ),
            (
                Refusal::lock_error("k", LockError::Store(store()), StatusCode::LOCKED),
                503,
                Some("1"),
                "lock store unavailable, try again later\n",
            ),
            (
                Refusal::lease_lost_by(RefusedBy::Lock, "k"),
                503,
                Some("1"),
                "the lock was lost while handling this request\n",
            ),
            (
                Refusal::lock_error(
                    "k",
                    LockError::InvalidConfig {
                        reason: "x".to_owned(),
                    },
                    StatusCode::LOCKED,
                ),
                500,
                None,
                "lock error\n",
            ),
        ];
        for (refusal, status, retry_after, text) in table {
            let response = PlainText.make_refusal(&refusal);
            let what = format!("{:?} by {:?}", refusal.reason(), refusal.refused_by());
            assert_eq!(response.status().as_u16(), status, "{what}");
            assert_eq!(
                response
                    .headers()
                    .get(header::RETRY_AFTER)
                    .map(|v| v.to_str().expect("ASCII")),
                retry_after,
                "{what}"
            );
            assert_eq!(
                response.headers()[header::CONTENT_TYPE],
                "text/plain; charset=utf-8",
                "{what}"
            );
            assert_eq!(body(&response), text, "{what}");
            assert!(
                !body(&response).contains("order:1"),
                "{what}: the key is not sent"
            );
        }
    }

    #[test]
    fn concurrency_refusals_map_the_runtimes_errors() {
        let busy = LockError::Busy {
            name: "exports".to_owned(),
            retry_after: Duration::from_secs(30),
        };
        let full = Refusal::concurrency_error(
            "exports",
            busy,
            StatusCode::TOO_MANY_REQUESTS,
            Duration::from_millis(1500),
        );
        assert_eq!(full.reason(), &Reason::AtCapacity);
        assert_eq!(full.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            full.retry_after_secs(),
            Some(2),
            "the layer's wait, not the ttl"
        );
        let down = Refusal::concurrency_error(
            "exports",
            LockError::Store(StoreError::Timeout {
                after: Duration::from_secs(1),
            }),
            StatusCode::SERVICE_UNAVAILABLE,
            Duration::from_secs(1),
        );
        assert_eq!(down.reason(), &Reason::StoreUnavailable);
        assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body(&down.default_response()),
            "concurrency limit store unavailable, try again later\n"
        );
        let bad = Refusal::concurrency_error(
            "",
            LockError::InvalidName(InvalidName::Empty),
            StatusCode::SERVICE_UNAVAILABLE,
            Duration::from_secs(1),
        );
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
        assert_eq!(bad.retry_after(), None);
        let lost = Refusal::lease_lost_by(RefusedBy::ConcurrencyLimit, "exports");
        assert_eq!(lost.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(body(&lost.default_response()).contains("concurrency limit"));
    }

    #[tokio::test]
    async fn a_refusal_carries_the_details_and_the_error() {
        let decision = denied().await;
        let refusal = Refusal::too_many_requests("1.2.3.4", decision.clone(), false);
        assert_eq!(refusal.key(), Some("1.2.3.4"));
        assert_eq!(refusal.retry_after(), Some(decision.retry_after));
        assert_eq!(refusal.retry_after_secs(), Some(1));
        assert_eq!(refusal.decision().map(|d| &*d.policy), Some("api"));
        assert!(refusal.error().is_none());
        assert_eq!(refusal.reason().code(), "too-many-requests");

        let refusal = Refusal::lock_error(
            "order:1",
            LockError::Store(StoreError::Timeout {
                after: Duration::from_millis(5),
            }),
            StatusCode::LOCKED,
        );
        let err = refusal
            .error()
            .and_then(|e| e.downcast_ref::<LockError>())
            .expect("the runtime's error");
        assert!(matches!(err, LockError::Store(_)));
        assert!(format!("{refusal:?}").contains("did not answer"));
    }

    #[test]
    fn respond_adds_a_missing_retry_after_and_the_refusal() {
        let refusal = Refusal::lease_lost_by(RefusedBy::Lock, "k");
        let bare = |r: &Refusal| {
            let mut response = Response::new("gone");
            *response.status_mut() = r.status();
            response
        };
        let response = refusal.clone().respond(&bare, |b| b);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        assert_eq!(
            response
                .extensions()
                .get::<Refusal>()
                .map(|r| r.reason().clone()),
            Some(Reason::LeaseLost)
        );
        // One the hook set is kept.
        let own = |r: &Refusal| {
            Response::builder()
                .status(r.status())
                .header(header::RETRY_AFTER, "60")
                .body(String::new())
                .expect("response")
        };
        let response = refusal.respond(&own, |b| b);
        assert_eq!(response.headers()[header::RETRY_AFTER], "60");
    }

    /// Every runtime error, rendered through [`Refusal::into_response_with`] with the default
    /// hook, answers exactly what the runtime's own `IntoResponse` answers: a handler that
    /// switches to [`Rendered`] changes nothing for its clients until it picks another hook.
    #[cfg(feature = "axum")]
    #[test]
    fn rendering_a_runtime_error_matches_its_own_into_response() {
        use axum::response::IntoResponse;
        use distlock::{InvalidPolicy, LossReason};

        fn parts(status: StatusCode, headers: &http::HeaderMap, body: &[u8]) -> String {
            let header = |name| {
                headers
                    .get(name)
                    .map(|v| v.to_str().expect("ASCII").to_owned())
            };
            format!(
                "{status} {:?} {:?} {}",
                header(header::CONTENT_TYPE),
                header(header::RETRY_AFTER),
                String::from_utf8_lossy(body)
            )
        }
        async fn own(response: axum::response::Response) -> String {
            let status = response.status();
            let headers = response.headers().clone();
            let body = axum::body::to_bytes(response.into_body(), 1 << 16)
                .await
                .expect("body");
            parts(status, &headers, &body)
        }
        fn rendered(refusal: Refusal) -> String {
            let response = refusal.into_response_with(&PlainText);
            parts(response.status(), response.headers(), response.body())
        }

        let name = || "order:42".to_owned();
        let store = || StoreError::Timeout {
            after: Duration::from_millis(50),
        };
        let lock_errors: Vec<fn() -> LockError> = vec![
            || LockError::Busy {
                name: "order:42".to_owned(),
                retry_after: Duration::from_millis(2500),
            },
            || LockError::Timeout {
                name: "order:42".to_owned(),
                waited: Duration::from_secs(5),
            },
            || LockError::LeaseLost {
                name: "order:42".to_owned(),
                reason: LossReason::Expired,
            },
            || {
                LockError::Store(StoreError::Timeout {
                    after: Duration::from_millis(50),
                })
            },
            || LockError::InvalidName(InvalidName::Empty),
            || LockError::MaxHoldReached {
                name: "order:42".to_owned(),
            },
            || LockError::InvalidConfig {
                reason: "at_most is shorter than at_least".to_owned(),
            },
            || LockError::NoDefaultClient,
            || LockError::PermitsExceeded {
                name: "exports".to_owned(),
                asked: 3,
                permits: 2,
            },
            || LockError::UnsupportedStore {
                reason: "not on a quorum",
            },
            || LockError::ShuttingDown {
                name: "order:42".to_owned(),
            },
        ];
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        for make in lock_errors {
            let want = runtime.block_on(own(make().into_response()));
            assert_eq!(rendered(Refusal::from(make())), want);
        }
        let rate_errors: Vec<Box<dyn Fn() -> RateLimitError>> = vec![
            Box::new(move || RateLimitError::Store(store())),
            Box::new(|| RateLimitError::Overloaded { in_flight: 4096 }),
            Box::new(|| RateLimitError::CircuitOpen {
                retry_in: Duration::from_millis(2500),
            }),
            Box::new(|| RateLimitError::InvalidSubject(InvalidName::Empty)),
            Box::new(move || RateLimitError::CostTooLarge {
                cost: 9,
                policy: name(),
                capacity: 5,
            }),
            Box::new(|| RateLimitError::InvalidPolicy(InvalidPolicy::NoPolicies)),
            Box::new(|| RateLimitError::UnsupportedStore {
                reason: "not on a quorum",
            }),
        ];
        for make in rate_errors {
            let want = runtime.block_on(own(make().into_response()));
            assert_eq!(rendered(Refusal::from(make())), want);
        }
        // The lock's name is the refusal's key, for logs; it is in no body.
        let busy = Refusal::from(LockError::Busy {
            name: name(),
            retry_after: Duration::from_secs(1),
        });
        assert_eq!(busy.key(), Some("order:42"));
        assert_eq!(busy.reason(), &Reason::LockBusy);
        let json = busy.into_response_with(&ProblemDetails::new());
        assert!(!json.body().windows(8).any(|w| w == b"order:42"));
    }
}
