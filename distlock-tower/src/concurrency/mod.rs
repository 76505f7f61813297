//! Middleware that lets at most N requests per key be in flight at once, across every replica
//! that shares the store: the distributed counterpart of tower's `ConcurrencyLimitLayer`.
//!
//! [`ConcurrencyLimitLayer`] takes a [`Client`](distlock::Client), a key extractor
//! ([`extract`](crate::extract)) and the limit. For each request it takes a permit of the
//! semaphore named by the key (`client.semaphore(key, limit)`), calls the inner service with
//! a [`HeldPermit`] in the request's extensions, and keeps the permit until the response body
//! has been sent. Every permit is a lease: renewed while the request runs, and given back
//! within its ttl if the replica dies, so a crashed replica never shrinks the limit for long.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//!
//! use axum::{Router, body::Body, routing::post};
//! use distlock_tower::concurrency::ConcurrencyLimitLayer;
//! use distlock_tower::extract::Constant;
//! use http::{Request, StatusCode};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), distlock_tower::ConfigError> {
//! // `Client::connect("redis://...")` in production; in memory here.
//! let client = distlock::Client::in_memory();
//! // At most 2 exports at once, whichever replica serves them.
//! let app = Router::new()
//!     .route("/export", post(|| async { "exported" }))
//!     .route_layer(ConcurrencyLimitLayer::new(client, Constant::from_static("exports"), 2)?);
//!
//! let request = || Request::post("/export").body(Body::empty()).unwrap();
//! // Two responses whose bodies have not been read yet: their requests still hold permits.
//! let first = app.clone().oneshot(request()).await.unwrap();
//! let second = app.clone().oneshot(request()).await.unwrap();
//! let third = app.clone().oneshot(request()).await.unwrap();
//! assert_eq!(third.status(), StatusCode::SERVICE_UNAVAILABLE);
//! assert_eq!(third.headers()["retry-after"], "1");
//!
//! // Reading a body to its end gives its permit back.
//! axum::body::to_bytes(first.into_body(), 1024).await.unwrap();
//! assert_eq!(app.oneshot(request()).await.unwrap().status(), StatusCode::OK);
//! # drop(second);
//! # Ok(()) }
//! ```
//!
//! # How long a permit is held
//!
//! As the lock layer holds its lock: from before the inner service is called until the
//! response body has ended (streaming bodies included), released before the last chunk is
//! handed to the server. A request whose client goes away (its response future or body is
//! dropped) gives its permit back at once, in the background. With a [`wait`], a request
//! waits for a permit holding nothing of the inner service, and is woken when one is given
//! back.
//!
//! # Responses of the layer itself
//!
//! | situation | response |
//! |---|---|
//! | every permit of the key is taken (after the [`wait`], if any) | `503 Service Unavailable` (or `429 Too Many Requests`, [`FullStatus`]) with `Retry-After` ([`retry_after`], default 1 s: a permit frees when some request ends, which the layer cannot know) |
//! | the request has no key | `400 Bad Request`, or the inner service unlimited ([`MissingKey`](crate::extract::MissingKey)) |
//! | an invalid key (see [`Extracted::Invalid`](crate::extract::Extracted::Invalid)) | `400 Bad Request`, whatever the missing-key setting |
//! | the store is down or too slow | `503 Service Unavailable`, `Retry-After: 1` |
//! | the permit was lost while the handler ran | `503 Service Unavailable`, `Retry-After: 1` (the handler is dropped) |
//!
//! The answers can be yours with [`refusal`](ConcurrencyLimitLayerBuilder::refusal), as on the other
//! layers; the [`Refusal`](crate::refusal::Refusal) has [`Reason::AtCapacity`] and
//! [`RefusedBy::ConcurrencyLimit`].
//!
//! The limit counts requests of every replica that uses the same store, prefix and key,
//! together with any `client.semaphore(key, ..)` of the runtime API on that name.
//!
//! [`wait`]: ConcurrencyLimitLayerBuilder::wait
//! [`retry_after`]: ConcurrencyLimitLayerBuilder::retry_after
//! [`Reason::AtCapacity`]: crate::refusal::Reason::AtCapacity
//! [`RefusedBy::ConcurrencyLimit`]: crate::refusal::RefusedBy::ConcurrencyLimit

mod held;
mod layer;
mod service;

pub use held::{HeldPermit, MissingHeldPermit};
pub use layer::{ConcurrencyLimitLayer, ConcurrencyLimitLayerBuilder, FullStatus};
pub use service::ConcurrencyLimit;

/// The response body: the inner service's, owning the permit until it has been sent (the
/// same type as the lock layer's).
pub use crate::lock::ResponseBody;
/// The response future (the same type as the lock layer's).
pub use crate::lock::ResponseFuture;
