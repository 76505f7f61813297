//! Middleware for idempotency keys (the IETF draft "The Idempotency-Key HTTP Header Field"):
//! a client sends a unique key with a request that is not idempotent by itself (a payment, an
//! order), and may send it again when it did not get the answer; the request runs **once**,
//! across every replica that shares the store, and every repeat gets the first response back.
//!
//! [`IdempotencyLayer`] takes a [`Client`](distlock::Client) and a namespace. For a request of
//! one of its [`methods`](IdempotencyLayerBuilder::methods) (`POST` and `PATCH` by default) it
//! reads the `Idempotency-Key` header, fingerprints the request (SHA-256 of its method, path
//! with query, and body), and asks the runtime ([`distlock::idempotency`]):
//!
//! | situation | response |
//! |---|---|
//! | the key is new | the inner service runs under a claim on the key (a lock, renewed while it runs); its response is stored as it is sent, then the key is freed |
//! | the key's response is stored, same fingerprint | the stored response: status, [stored headers](IdempotencyLayerBuilder::stored_headers) and body, with `Idempotent-Replayed: true` |
//! | the key's response is stored, another fingerprint | `422 Unprocessable Content` |
//! | another request with the key is running | after the [`wait`](IdempotencyLayerBuilder::wait) (default none), the stored response if it finished meanwhile, else `409 Conflict` with `Retry-After: 1` |
//! | the request has no key | `400 Bad Request`, or the inner service as it is ([`MissingKey`](crate::extract::MissingKey)) |
//! | the key is given twice, empty, over 256 bytes, not visible ASCII, or a malformed quoted string | `400 Bad Request`, whatever the missing-key setting |
//! | the request body is over [`max_request_body`](IdempotencyLayerBuilder::max_request_body) (1 MiB) | `413 Content Too Large` |
//! | the store fails | `503 Service Unavailable` with `Retry-After: 1` |
//!
//! ```
//! use std::time::Duration;
//!
//! use axum::{Router, body::Body, routing::post};
//! use distlock_tower::IdempotencyLayer;
//! use http::{Request, StatusCode};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = distlock::Client::in_memory(); // Client::connect("redis://...") in production
//! let layer = IdempotencyLayer::builder(client, "orders")
//!     .wait(Duration::from_secs(5)) // a repeat that comes while the first runs waits for it
//!     .record_ttl(Duration::from_secs(24 * 3600))
//!     .build()?;
//! let app = Router::new()
//!     .route("/orders", post(|| async { (StatusCode::CREATED, "order 1 placed") }))
//!     .layer(layer);
//!
//! let order = |body: &'static str| {
//!     Request::post("/orders").header("idempotency-key", "\"a1b2\"").body(Body::from(body)).unwrap()
//! };
//! let first = app.clone().oneshot(order("2 seats")).await?;
//! assert_eq!(first.status(), StatusCode::CREATED);
//! axum::body::to_bytes(first.into_body(), 1024).await?; // stored as it is sent
//!
//! let again = app.clone().oneshot(order("2 seats")).await?;
//! assert_eq!(again.status(), StatusCode::CREATED);
//! assert_eq!(again.headers()["idempotent-replayed"], "true");
//! assert_eq!(axum::body::to_bytes(again.into_body(), 1024).await?, "order 1 placed");
//!
//! // The same key for another request: refused.
//! let other = app.oneshot(order("3 seats")).await?;
//! assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY);
//! # Ok(()) }
//! ```
//!
//! # What is decided
//!
//! * **Only finished responses are stored.** A response is stored when its body has been
//!   sent to its end (before its last chunk is handed on, so a client that read it whole
//!   finds it stored). A request whose client goes away, whose handler panics, or whose body
//!   fails frees its key without storing anything: the next request with the key runs.
//! * **Server errors are not stored** (`5xx`): the draft leaves it to the server, and a
//!   retry after a transient failure should run again. The key is freed at once.
//!   [`store_server_errors(true)`](IdempotencyLayerBuilder::store_server_errors) stores them
//!   like any other response. `4xx` responses are stored.
//! * **A response body over the cap** ([`max_response_body`](IdempotencyLayerBuilder::max_response_body),
//!   1 MiB) is sent as it is but **not stored**: its key is freed before the chunk that
//!   crosses the cap goes out, so a repeat runs the request again. Raise the cap for routes with large answers, or make them idempotent
//!   another way.
//! * **The marker** is `Idempotent-Replayed: true` on every replay (never on a first
//!   response). Replays carry the stored status, the stored headers in their order, and the
//!   body byte for byte; trailers are not stored.
//! * **The fingerprint** covers the method, the path with its query and the body, not the
//!   headers; the request's trailers are dropped (the body is read whole first).
//! * **Keys** are the header's value, or the string inside it when quoted (`"..."`, the
//!   draft's structured-field form): both forms name the same key. Records live in the
//!   namespace given to the builder: give each API its own.
//! * **Stores**: a single primary, Sentinel, a Cluster (the record and the claim share a hash
//!   tag) and memory. A client whose locks go to a Redlock quorum is refused at
//!   [`build`](IdempotencyLayerBuilder::build) with
//!   [`ConfigError::UnsupportedStore`](crate::ConfigError::UnsupportedStore).

mod body;
mod layer;
mod service;

pub use self::body::IdempotentBody;
pub use self::layer::{
    DEFAULT_HEADER, DEFAULT_MAX_REQUEST_BODY, DEFAULT_MAX_RESPONSE_BODY, DEFAULT_RECORD_TTL,
    DEFAULT_STORED_HEADERS, IdempotencyLayer, IdempotencyLayerBuilder, REPLAYED_HEADER,
};
pub use self::service::{Idempotent, ResponseFuture};
