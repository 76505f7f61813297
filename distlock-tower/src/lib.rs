//! Tower layers for `distlock`, for axum routers and any other tower stack over `http` types.
//!
//! * [`rate_limit`]: [`RateLimitLayer`] checks each request against a distributed rate
//!   limiter under its key, answering `429` with `Retry-After` and the IETF `RateLimit`
//!   fields when it is over.
//! * [`lock`]: [`LockLayer`] runs each request under a distributed lock named by its key,
//!   held until the response body has been sent; handlers read the lease through [`HeldLock`].
//! * [`concurrency`]: [`ConcurrencyLimitLayer`] lets at most N requests per key be in flight
//!   across every replica (a distributed semaphore), each holding its permit until its
//!   response body has been sent.
//! * [`idempotency`]: [`IdempotencyLayer`] runs a request with an `Idempotency-Key` once,
//!   across every replica, and replays its stored response to the key's repeats.
//! * [`extract`]: which key a request belongs to ([`ExtractKey`] and the provided extractors),
//!   shared by every layer of this crate; [`client_ip`] adds the client's IP address, behind
//!   trusted proxies too.
//! * [`console`] (feature `axum`): an operator's console, a JSON API and an HTML page: who
//!   holds which lock and since when, a subject's rate-limit state, breakers and store
//!   health, with force-unlock and reset behind an authorization hook you supply.
//! * [`refusal`]: the responses the layers make themselves (`429`, `423`, `503`, `400`), and
//!   how to make them your own, RFC 9457 problem documents included.
//!
//! # Example: a rate limit per authenticated user
//!
//! An authentication layer finds the user and puts it in the request's extensions; the rate
//! limiter, inside it, keys each request by that user. Layers added with `Router::layer` run
//! outside in: the last one added sees the request first.
//!
//! ```
//! use axum::{Router, body::Body, extract::Request, middleware::{self, Next}, routing::get};
//! use axum::response::{IntoResponse, Response};
//! use distlock::ratelimit::{Policy, Rate};
//! use distlock_tower::RateLimitLayer;
//! use http::StatusCode;
//! use tower::ServiceExt;
//!
//! /// Who sent the request, as the authentication layer found it.
//! #[derive(Clone)]
//! struct UserId(String);
//!
//! /// A stand-in for real authentication: `Authorization: Bearer <user>`.
//! async fn authenticate(mut request: Request, next: Next) -> Response {
//!     let user = request
//!         .headers()
//!         .get("authorization")
//!         .and_then(|value| value.to_str().ok())
//!         .and_then(|value| value.strip_prefix("Bearer "))
//!         .map(|user| UserId(user.to_owned()));
//!     let Some(user) = user else {
//!         return StatusCode::UNAUTHORIZED.into_response();
//!     };
//!     request.extensions_mut().insert(user);
//!     next.run(request).await
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // `Client::connect("redis://...")` in production, shared by every replica.
//! let client = distlock::Client::in_memory();
//! let per_user = client.rate_limiter(Policy::gcra("per-user", Rate::per_minute(60)?.burst(2)?)?).build()?;
//!
//! // The key: the user the authentication layer found. Absent (so `400`) only if that layer
//! // did not run, which is a wiring mistake the tests below would catch.
//! let user_key = |request: &Request| {
//!     request.extensions().get::<UserId>().map(|user| format!("user:{}", user.0))
//! };
//!
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(per_user, user_key))
//!     .layer(middleware::from_fn(authenticate));
//!
//! let as_user = |user: &str| {
//!     Request::get("/").header("authorization", format!("Bearer {user}")).body(Body::empty())
//! };
//! for _ in 0..2 {
//!     assert_eq!(app.clone().oneshot(as_user("alice")?).await?.status(), StatusCode::OK);
//! }
//! let refused = app.clone().oneshot(as_user("alice")?).await?;
//! assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(refused.headers()["retry-after"], "1");
//!
//! // Another user has a budget of their own; an anonymous request never reaches the limiter.
//! assert_eq!(app.clone().oneshot(as_user("bob")?).await?.status(), StatusCode::OK);
//! let anonymous = Request::get("/").body(Body::empty())?;
//! assert_eq!(app.oneshot(anonymous).await?.status(), StatusCode::UNAUTHORIZED);
//! # Ok(()) }
//! ```
//!
//! # Responses, errors and what outer layers see
//!
//! The layers answer with responses, never errors: `Service::Error` is the inner service's,
//! so an axum router (whose services are infallible) needs no `HandleErrorLayer` for them, and
//! a store that cannot answer becomes a `503` (or, for the rate limiter, whatever its outage
//! policy says). A layer's own answers are made by its [`MakeRefusal`] (see [`refusal`]) and
//! carry their [`Refusal`] in the response's extensions; responses the rate limiter let
//! through carry its [`Checks`](rate_limit::Checks) (subject, policy, and whether the store,
//! the deny cache or the outage policy decided), and those made under a lock the
//! [`HeldLock`]. Every refusal is a `debug` event of target `distlock_tower`.
//!
//! A handler that calls the runtime API itself answers its errors as the layers answer
//! theirs by returning [`Rendered<M>`](refusal::Rendered) (feature `axum`), `M` being the
//! layers' [`MakeRefusal`]: `Result<T, Rendered<ProblemDetails>>` and `?` on a
//! `distlock::LockError` or `distlock::RateLimitError` give the same status, `Retry-After`
//! and problem document as the layer would. Outside axum,
//! [`Refusal::from`](Refusal::from_lock_error) and
//! [`into_response_with`](Refusal::into_response_with) do the same. (Returning the runtime's
//! errors as they are also works: they implement `IntoResponse` with the default plain-text
//! answer; see `distlock::http`.) Every `500`, from a layer, a [`Rendered`](refusal::Rendered)
//! or the runtime's `IntoResponse`, is logged once at ERROR with its reason.
//!
//! # Features
//!
//! * `axum` (default): the axum-specific parts: the [`MatchedPath`](extract::MatchedPath)
//!   extractor and per-route limiters ([`RateLimitLayerBuilder::route`]), axum's `ConnectInfo` as
//!   [`ClientIp`](client_ip::ClientIp)'s peer address, the [`HeldLock`] extractor, and
//!   `IntoResponse` for distlock's errors. Without it the crate depends on `http` and `tower`
//!   only, as tower-http does, and works in any tower stack over `http` types.
//! * `tonic`: the layers answer gRPC calls with gRPC statuses (`refusal::Grpc`,
//!   `refusal::GrpcOrHttp`; see [gRPC](refusal#grpc)), in front of a tonic server or beside
//!   HTTP routes in one router.
//!
//! # Configuration mistakes
//!
//! No setting panics, whether it comes from your code or from a configuration file. Each
//! layer (and [`ClientIp`](client_ip::ClientIp)) has a constructor with the defaults, which
//! cannot fail (`LockLayer::new`, `RateLimitLayer::new`, `ClientIp::peer`), and a consuming
//! builder whose setters only store: its one `build()` checks every setting at once and
//! returns a [`ConfigError`] for the first it cannot work with (a ttl out of range, a cost no
//! policy allows, a concurrency limit of 0 or on a store that cannot count permits, a prefix
//! longer than its address), as the runtime's `client.rate_limiter(policy).build()` does.
//!
//! ```
//! use std::time::Duration;
//! use distlock_tower::{ConfigError, LockLayer};
//! use distlock_tower::extract::Header;
//!
//! // A ttl read from a configuration file: 5 ms is below distlock::MIN_TTL.
//! let from_config = Duration::from_millis(5);
//! let built = LockLayer::builder(distlock::Client::in_memory(), Header::from_static("x-job"))
//!     .ttl(from_config)
//!     .build();
//! assert!(matches!(built, Err(ConfigError::TtlOutOfRange { .. })));
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[macro_use]
mod macros;

pub mod client_ip;
pub mod concurrency;
#[cfg(feature = "serde")]
pub mod config;
mod config_error;
#[cfg(feature = "axum")]
pub mod console;
pub mod extract;
#[cfg(feature = "axum")]
pub mod health;
mod holds;
pub mod idempotency;
mod lease;
pub mod lock;
pub mod rate_limit;
mod readiness;
pub mod refusal;
mod retry_after;
#[cfg(feature = "rls")]
#[cfg_attr(docsrs, doc(cfg(feature = "rls")))]
pub mod rls;
mod settings;
mod wrapped;

// The README's example is compiled with the doctests, so that it cannot drift from the API
// (it is not the crate's documentation: its links point at docs.rs). It uses axum.
#[cfg(all(doctest, feature = "axum"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub use concurrency::{ConcurrencyLimitLayer, ConcurrencyLimitLayerBuilder};
pub use config_error::ConfigError;
pub use extract::{ExtractKey, Extracted, MissingKey};
pub use idempotency::{IdempotencyLayer, IdempotencyLayerBuilder};
pub use lease::{DEFAULT_MAX_HOLD, DEFAULT_NAMESPACE};
pub use lock::{HeldLock, LockLayer, LockLayerBuilder};
pub use rate_limit::{RateLimitLayer, RateLimitLayerBuilder};
pub use refusal::{MakeRefusal, Refusal};
