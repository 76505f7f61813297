//! Middleware that runs each request under a distributed lock: one request per key at a time,
//! across every replica that shares the store.
//!
//! [`LockLayer`] takes a [`Client`](distlock::Client) and a key extractor
//! ([`extract`](crate::extract)). For each request it reads the key, acquires the lock of that
//! name through the client, calls the inner service with a [`HeldLock`] in the request's
//! extensions, and keeps the lock until the response body has been sent.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//!
//! use axum::{Router, body::Body, routing::post};
//! use distlock_tower::extract::{PathSegment, Prefixed};
//! use distlock_tower::lock::{HeldLock, LockLayer};
//! use http::{Request, StatusCode};
//! use tower::ServiceExt;
//!
//! async fn settle(lock: HeldLock) -> Result<String, distlock::LockError> {
//!     // Minted on first use, while the lock is held (a `fenced` layer mints with the grant).
//!     Ok(format!("settled {} under fence {}", lock.name(), lock.fence().await?))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), distlock_tower::ConfigError> {
//! // `Client::connect("redis://...")` in production; in memory here.
//! let client = distlock::Client::in_memory();
//! let layer = LockLayer::builder(client, Prefixed::new("order:", PathSegment(1)))
//!     .ttl(Duration::from_secs(10))
//!     .build()?;
//! let app = Router::new()
//!     .route("/orders/{id}/settle", post(settle))
//!     .route_layer(layer);
//!
//! let request = || Request::post("/orders/42/settle").body(Body::empty()).unwrap();
//!
//! // The first response's body has not been read yet, so its request still holds the lock.
//! let first = app.clone().oneshot(request()).await.unwrap();
//! assert_eq!(first.status(), StatusCode::OK);
//!
//! let second = app.clone().oneshot(request()).await.unwrap();
//! assert_eq!(second.status(), StatusCode::LOCKED);
//! assert_eq!(second.headers()["retry-after"], "10");
//!
//! // Reading the body to its end releases the lock.
//! let body = axum::body::to_bytes(first.into_body(), 1024).await.unwrap();
//! assert!(body.starts_with(b"settled http/order:42 under fence "));
//! let third = app.oneshot(request()).await.unwrap();
//! assert_eq!(third.status(), StatusCode::OK);
//! # Ok(()) }
//! ```
//!
//! # How long the lock is held
//!
//! From before the inner service is called until the response body has ended: the response
//! body ([`ResponseBody`]) owns the lease, and a streamed response keeps the lock until its
//! last chunk. The lock is released *before* the last chunk (or the end of the body) is handed
//! to the server, so a client that has read the whole response finds the lock free for its
//! next request. A response whose body the server drops early (the client went away) releases
//! it in the background at once. Meanwhile the watchdog renews the lease every ttl/3; if the
//! process dies, the lock frees up after its ttl.
//!
//! The lock name is the key in the layer's name space, `http/<key>` by default
//! ([`namespace`](LockLayerBuilder::namespace)), so that no request can name a lock the
//! application or the runtime takes for itself (an election, a job lock, an idempotency
//! claim): a layer keyed `order:42` excludes `client.lock("http/order:42")` and
//! `#[distributed_lock(key = "http/order:{id}")]` with `id = 42` on the same store, so
//! middleware and background jobs can guard the same resource. A lease is held at most
//! [`DEFAULT_MAX_HOLD`](crate::DEFAULT_MAX_HOLD) (5 minutes) unless the builder's `max_hold`
//! says otherwise, so a client that stops reading a streamed body cannot keep it.
//! The handler is not inside a `LockBuilder::run`, so `distlock::current_lease()` does not see
//! the lock; use [`HeldLock`].
//!
//! # Responses of the layer itself
//!
//! The inner service's error type passes through untouched; everything the layer decides is
//! a response, by default with a short `text/plain` body.
//! [`refusal`](LockLayerBuilder::refusal) makes those responses your own (a closure, or RFC 9457
//! JSON with [`ProblemDetails`](crate::refusal::ProblemDetails)); see
//! [`refusal`](crate::refusal). The statuses and `Retry-After` values are those of
//! `distlock::http`, so a handler that takes a lock through the runtime API and returns
//! [`Rendered<M>`](crate::refusal::Rendered) (with the layer's hook `M`) from its `LockError`
//! answers a client exactly as the layer does.
//!
//! | situation | response |
//! |---|---|
//! | the lock is held by another holder | `423 Locked` (or `409 Conflict`, [`BusyStatus`]) with `Retry-After`: the holder's remaining ttl in whole seconds, rounded up, at least 1, whoever took the lock (this layer, `client.lock(..)`, the macro) and with whatever ttl; or the longest of this layer's latest 16 holds when shorter |
//! | ... and [`wait`](LockLayerBuilder::wait) is set | waits up to that long (holding nothing of the inner service), one waiter served per release, then as above |
//! | the request has no key ([`Extracted::Absent`](crate::extract::Extracted::Absent)) | `400 Bad Request`, or the inner service unlocked ([`MissingKey`]) |
//! | an invalid key (key header sent twice, over-long, empty, not text, a control character: [`Extracted::Invalid`](crate::extract::Extracted::Invalid)) | `400 Bad Request`, whatever the [`MissingKey`] setting |
//! | the key cannot be a lock name (longer than [`distlock::MAX_NAME_LEN`]) | `400 Bad Request` |
//! | the store is down or too slow | `503 Service Unavailable`, `Retry-After: 1`, after at most the client's response timeout |
//! | the lease was lost while the handler ran | `503 Service Unavailable`, `Retry-After: 1` (see below) |
//!
//! A response made under the lock carries the [`HeldLock`] in its extensions (name, fence),
//! and one the layer made itself its [`Refusal`](crate::refusal::Refusal), for outer layers
//! and logging. Every refusal is logged as a `debug` event with the lock name (redacted, see
//! [`distlock::logging`]) and the `Retry-After`, and so is a request without a key.
//!
//! # When the lease is lost
//!
//! A lease is lost when the store no longer holds it for us (it expired while the process was
//! paused, was deleted, or renewals failed until its safety deadline). The layer races the
//! handler against that signal: if the lease is lost first, the handler's future is dropped at
//! its next await point and the request is answered `503`, as `LockBuilder::run` drops its
//! body. A handler that must not be cut short between two steps should spawn that work and
//! check [`lock.ensure_held()`](distlock::LeaseHandle::ensure_held) (or pass
//! [`lock.fence()`](distlock::LeaseHandle::fence) to the resource) before each step.
//!
//! Once the handler has returned, the layer cannot take back a response that is already on
//! its way: a streamed body goes on to its end even if the lease is lost meanwhile. Code that
//! produces the stream can watch [`lock.lost()`](distlock::LeaseHandle::lost) (it resolves
//! when the lease ends for any reason, including the normal release after the body) and end
//! the stream early.

pub(crate) mod body;
pub(crate) mod future;
mod held;
mod layer;
mod service;

/// What a request without a key gets: the one type shared by every layer of this crate.
pub use crate::extract::MissingKey;
pub use body::ResponseBody;
pub use future::ResponseFuture;
pub use held::{HeldLock, MissingHeldLock};
pub use layer::{BusyStatus, LockLayer, LockLayerBuilder};
pub use service::Lock;
