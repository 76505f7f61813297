//! Middleware that rate limits requests by a key (the client's IP address, an API key, a
//! route), across every replica that shares the store.
//!
//! [`RateLimitLayer`] takes a [`RateLimiter`](distlock::ratelimit::RateLimiter) and a key
//! extractor ([`extract`](crate::extract), or [`ClientIp`](crate::client_ip::ClientIp)). For
//! each request it reads the subject, checks it (one round trip, or none while the limiter's
//! deny cache knows the subject is over its limit), and either calls the inner service or
//! answers `429 Too Many Requests` itself.
//!
//! # Example
//!
//! ```
//! use axum::{Router, body::Body, routing::get};
//! use distlock::ratelimit::{Policy, Rate};
//! use distlock_tower::extract::Header;
//! use distlock_tower::rate_limit::RateLimitLayer;
//! use http::{Request, StatusCode};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // `Client::connect("redis://...")` in production; in memory here.
//! let client = distlock::Client::in_memory();
//! let limiter = client.rate_limiter(Policy::gcra("api", Rate::per_minute(60)?.burst(2)?)?).build()?;
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(limiter, Header::from_static("x-api-key")));
//!
//! let request = || Request::get("/").header("x-api-key", "k1").body(Body::empty()).unwrap();
//! let ok = app.clone().oneshot(request()).await?;
//! assert_eq!(ok.status(), StatusCode::OK);
//! // 60 per 60 s, 2 at once.
//! assert_eq!(ok.headers()["ratelimit-policy"], r#""api";q=60;w=60;distlock-burst=2"#);
//! assert_eq!(ok.headers()["ratelimit"], r#""api";r=1;t=1"#);
//!
//! app.clone().oneshot(request()).await?;
//! let refused = app.oneshot(request()).await?;
//! assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(refused.headers()["retry-after"], "1");
//! # Ok(()) }
//! ```
//!
//! Behind a load balancer, key by [`ClientIp::trusting`](crate::client_ip::ClientIp::trusting)
//! and serve with `into_make_service_with_connect_info::<SocketAddr>()`.
//!
//! # Responses
//!
//! The inner service's error type passes through untouched (axum needs infallible
//! services); everything the layer decides is a response, by default with a short
//! `text/plain` body. [`refusal`](RateLimitLayerBuilder::refusal) makes those responses your own (a
//! closure, or RFC 9457 JSON with [`ProblemDetails`](crate::refusal::ProblemDetails)); see
//! [`refusal`](crate::refusal).
//!
//! | situation | response |
//! |---|---|
//! | allowed | the inner service's response, plus `RateLimit-Policy` and `RateLimit` |
//! | denied | `429 Too Many Requests`, `Retry-After` (whole seconds, rounded up, at least 1), `RateLimit-Policy`, `RateLimit` |
//! | denied, but allowed within [`wait`](RateLimitLayerBuilder::wait) | waits (holding nothing of the inner service), then as allowed |
//! | store unavailable, limiter fails closed (the default) | `503 Service Unavailable`, `Retry-After: 1`, within the limiter's deadline |
//! | store unavailable, limiter fails open | the inner service's response, without `RateLimit` fields |
//! | store unavailable, local fallback | as allowed or denied, decided in this process |
//! | no key in the request ([`Extracted::Absent`](crate::extract::Extracted::Absent)) | `400 Bad Request`, or unmetered ([`MissingKey`]) |
//! | an invalid key (key header sent twice, over-long, empty, not text: [`Extracted::Invalid`](crate::extract::Extracted::Invalid)) | `400 Bad Request`, whatever the [`MissingKey`] setting |
//! | a key the limiter cannot use as a subject | `400 Bad Request` |
//! | shadow-mode limiter | always the inner service's response; the fields still tell |
//!
//! The fields follow draft-ietf-httpapi-ratelimit-headers-11. `RateLimit-Policy:
//! "api";q=100;w=60` lists each policy's real sustained rate as a quota `q` per window `w`
//! (whole seconds, the shortest that holds whole periods: `5 per 100ms` is `q=50;w=1`), and,
//! when fewer than `q` may go back to back (a burst below the count, a period under a
//! second), how many may, as `distlock-burst`: `100/s burst 1` is
//! `"api";q=100;w=1;distlock-burst=1` (see [`headers::advertise`]). `RateLimit:
//! "api";r=42;t=17` says how many may go right now (`r`) and in how many seconds, rounded up,
//! the policy is full again (`t`).
//! [`legacy_headers`](RateLimitLayerBuilder::legacy_headers) adds `X-RateLimit-Limit`,
//! `X-RateLimit-Remaining` and `X-RateLimit-Reset`.
//!
//! Every response the layer lets through, and its own `429`, carries the layer's [`Check`]
//! (the subject and the limiter's [`Decision`](distlock::ratelimit::Decision), which says
//! which policy decided and whether the store, the deny cache or the outage policy answered)
//! in its extensions, collected in [`Checks`] for outer layers and logging. A response the
//! layer made itself carries its [`Refusal`](crate::refusal::Refusal) too.
//!
//! Every refusal is logged as a `debug` event with the subject, the policy and the
//! `Retry-After`; a request without a key too, with a hint when the extractor knows the
//! likely cause (a server started without `ConnectInfo`, for [`ClientIp`](crate::client_ip::ClientIp)).
//!
//! # Stacked layers
//!
//! Layers compose: with an outer layer per client IP and an inner one per API key, each
//! judges the request and adds its members to `RateLimit-Policy` and `RateLimit`, after those
//! already there, so a response lists every policy that judged it: an allowed request and a
//! `429` from the inner layer show both, a `429` from the outer layer only the outer one (the
//! inner layer never saw the request). The single-valued `X-RateLimit-*` fields show the
//! layer with the fewest requests left. The outer layer counts a request the inner one then
//! refuses.
//!
//! # Per-route policies
//!
//! Either one layer on the router with a table keyed by axum's matched route
//! (`RateLimitLayerBuilder::route`, feature `axum`), or one layer per route (`MethodRouter::layer`).

mod body;
mod checks;
mod exempt;
mod future;
pub mod headers;
mod layer;
mod service;
mod settle;

/// What a request without a key gets: the one type shared by every layer of this crate.
pub use crate::extract::MissingKey;
pub use body::ResponseBody;
pub use checks::{Check, Checks};
pub use exempt::{Exemption, RequestHead};
pub use future::ResponseFuture;
pub use layer::{RateLimitLayer, RateLimitLayerBuilder};
pub use service::RateLimit;
pub use settle::Settlement;
