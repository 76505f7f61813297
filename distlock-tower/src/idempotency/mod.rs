//! Middleware for idempotency keys (the IETF draft "The Idempotency-Key HTTP Header Field"):
//! a client sends a unique key with a request that is not idempotent by itself (a payment, an
//! order), and may send it again when it did not get the answer; the request runs **once**,
//! across every replica that shares the store, and every repeat gets the first response back.
//!
//! [`IdempotencyLayer`] takes a [`Client`](distlock::Client), a namespace and a **scope**:
//! who sends each request ([`scope`](IdempotencyLayerBuilder::scope), e.g. the account your
//! authentication found), since a key is the caller's own; or, said by name,
//! [`scope_global`](IdempotencyLayerBuilder::scope_global). For a request of one of its
//! [`methods`](IdempotencyLayerBuilder::methods) (`POST` and `PATCH` by default) it reads the
//! `Idempotency-Key` header, fingerprints the request (SHA-256 of its caller, method, path
//! with query, and body), and asks the runtime ([`distlock::idempotency`]):
//!
//! | situation | response |
//! |---|---|
//! | the key is new (for this caller) | the inner service runs under a claim on the key (a lock, renewed while it runs); its response is read, stored, then sent |
//! | the key's response is stored, same fingerprint | the stored response: status, [stored headers](IdempotencyLayerBuilder::stored_headers) and body, with `Idempotent-Replayed: true` |
//! | the key's response is stored, another fingerprint | `422 Unprocessable Content` |
//! | another request with the key is running | after the [`wait`](IdempotencyLayerBuilder::wait) (default none), the stored response if it finished meanwhile, else `409 Conflict` with `Retry-After: 1` |
//! | the key's request started and never finished (its process died, its claim was lost, its handler panicked) | `409 Conflict`, reason `outcome-unknown`: not run again (until the [record ttl](IdempotencyLayerBuilder::record_ttl)) |
//! | the key's request finished with a response over [`max_response_body`](IdempotencyLayerBuilder::max_response_body) | `409 Conflict`, reason `response-not-kept`: not run again |
//! | the request has no key | `400 Bad Request`, or the inner service as it is ([`MissingKey`](crate::extract::MissingKey)) |
//! | the key is given twice, empty, shorter than [`min_key_len`](IdempotencyLayerBuilder::min_key_len), over 256 bytes, not visible ASCII, or a malformed quoted string | `400 Bad Request`, whatever the missing-key setting |
//! | the scope extractor finds no caller | `400 Bad Request`, reason `missing-scope` |
//! | the request body is over [`max_request_body`](IdempotencyLayerBuilder::max_request_body) (1 MiB) | `413 Content Too Large` |
//! | the store fails | `503 Service Unavailable` with `Retry-After: 1` |
//!
//! With [`ProblemDetails`](crate::refusal::ProblemDetails) refusals, each answer the layer
//! makes has its own problem type (`.../outcome-unknown`, `.../key-reused`...).
//!
//! ```
//! use std::time::Duration;
//!
//! use axum::{Router, body::Body, routing::post};
//! use distlock_tower::IdempotencyLayer;
//! use distlock_tower::extract::Header;
//! use http::{Request, StatusCode};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = distlock::Client::in_memory(); // Client::connect("redis://...") in production
//! let layer = IdempotencyLayer::builder(client, "orders")
//!     // Whose keys: here a header your gateway sets after authentication.
//!     .scope(Header::from_static("x-account"))
//!     .wait(Duration::from_secs(5)) // a repeat that comes while the first runs waits for it
//!     .record_ttl(Duration::from_secs(24 * 3600))
//!     .build()?;
//! let app = Router::new()
//!     .route("/orders", post(|| async { (StatusCode::CREATED, "order 1 placed") }))
//!     .layer(layer);
//!
//! let order = |account: &str, body: &'static str| {
//!     Request::post("/orders")
//!         .header("x-account", account)
//!         .header("idempotency-key", "\"a1b2\"")
//!         .body(Body::from(body))
//!         .unwrap()
//! };
//! let first = app.clone().oneshot(order("acme", "2 seats")).await?;
//! assert_eq!(first.status(), StatusCode::CREATED);
//!
//! let again = app.clone().oneshot(order("acme", "2 seats")).await?;
//! assert_eq!(again.status(), StatusCode::CREATED);
//! assert_eq!(again.headers()["idempotent-replayed"], "true");
//! assert_eq!(axum::body::to_bytes(again.into_body(), 1024).await?, "order 1 placed");
//!
//! // The same key for another request: refused.
//! let other = app.clone().oneshot(order("acme", "3 seats")).await?;
//! assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY);
//! // Another caller's "a1b2" is another key: it runs.
//! let theirs = app.oneshot(order("globex", "2 seats")).await?;
//! assert!(theirs.headers().get("idempotent-replayed").is_none());
//! # Ok(()) }
//! ```
//!
//! # What is decided
//!
//! * **Keys are the caller's.** The scope goes into the record's name (hashed) and into the
//!   fingerprint: two callers that send the same key and body each get their own run, and
//!   neither can read, block or probe the other's record. A layer that says neither
//!   [`scope`](IdempotencyLayerBuilder::scope) nor
//!   [`scope_global`](IdempotencyLayerBuilder::scope_global) is refused at
//!   [`build`](IdempotencyLayerBuilder::build) ([`ConfigError::NoScope`](crate::ConfigError::NoScope)).
//! * **A request whose handler began is never run again by a retry.** Once the key is
//!   claimed, the request runs in a task of its own: a client that goes away, a load
//!   balancer's timeout or an outer `TimeoutLayer` does not cut it short, and its response
//!   is stored when the handler returns (the body read whole, up to the cap), whether or not
//!   anyone is still there to read it. A request cut short anyway (the process dies, the
//!   claim is lost, the handler panics or its body fails, [`max_run`](IdempotencyLayerBuilder::max_run)
//!   passes) leaves an "outcome unknown" record: its retries get `409` with reason
//!   `outcome-unknown` until the record ttl ends, never a second run.
//!   [`rerun_interrupted`](IdempotencyLayerBuilder::rerun_interrupted) lets them run again
//!   instead, for handlers that are safe to run twice.
//! * **A lost claim stops the handler**, as the lock layer does: its future is dropped, and
//!   the request answered `409 outcome-unknown`. The handler finds the claim in its request's
//!   extensions as [`HeldClaim`] (its fence, to pass to the resource it writes, so that a
//!   claim lost while the handler was paused cannot write after its successor).
//! * **Server errors are not stored** (`5xx`): the handler said it failed, and a retry after
//!   a transient failure should run again. The key is freed at once.
//!   [`store_server_errors(true)`](IdempotencyLayerBuilder::store_server_errors) stores them
//!   like any other response. `4xx` responses are stored.
//! * **A response body over the cap** ([`max_response_body`](IdempotencyLayerBuilder::max_response_body),
//!   1 MiB) is sent as it is but **not stored**: its key's later requests get `409`
//!   (`response-not-kept`). Raise the cap for routes with large answers.
//! * **The marker** is `Idempotent-Replayed: true` on every replay (never on a first
//!   response). Replays carry the stored status, the stored headers in their order, and the
//!   body byte for byte; trailers are not stored. Headers that carry credentials
//!   (`set-cookie`, `authorization`...) cannot be stored.
//! * **The fingerprint** covers the scope, the method, the path with its query and the
//!   body, not the headers; the request's trailers are dropped (the body is read whole
//!   first, up to [`MAX_REQUEST_BODY`]).
//! * **Keys** are the header's value, or the string inside it when quoted (`"..."`, the
//!   draft's structured-field form): both forms name the same key. Records live in the
//!   namespace given to the builder: give each API its own. Logs show keys redacted
//!   ([`distlock::logging`]).
//! * **Stores**: a single primary, Sentinel, a Cluster (the record and the claim share a hash
//!   tag) and memory. A client whose locks go to a Redlock quorum is refused at
//!   [`build`](IdempotencyLayerBuilder::build) with
//!   [`ConfigError::UnsupportedStore`](crate::ConfigError::UnsupportedStore).

mod body;
mod layer;
mod service;

pub use self::body::IdempotentBody;
pub use self::layer::{
    DEFAULT_HEADER, DEFAULT_MAX_REQUEST_BODY, DEFAULT_MAX_RESPONSE_BODY, DEFAULT_MAX_RUN,
    DEFAULT_RECORD_TTL, DEFAULT_STORED_HEADERS, IdempotencyLayer, IdempotencyLayerBuilder,
    MAX_REQUEST_BODY, REFUSED_STORED_HEADERS, REPLAYED_HEADER,
};
pub use self::service::{Idempotent, ResponseFuture};

define_held! {
    /// The claim a request with an idempotency key runs under, for its handler: its fence,
    /// name and lost signal.
    ///
    /// [`Idempotent`] puts it in the request's extensions; in axum, take it as an argument
    /// (`claim: HeldClaim`; feature `axum`). It dereferences to
    /// [`LeaseHandle`](distlock::LeaseHandle). Pass its [`fence`](distlock::LeaseHandle::fence)
    /// to what the handler writes (a fenced resource, a row guarded by
    /// `distlock::fenced`), so that a claim lost while its handler was paused cannot write
    /// after the request that claimed the key next. The layer stops the handler when the
    /// claim is lost; it cannot release the claim: the layer does that once the response is
    /// stored.
    ///
    /// ```
    /// use distlock_tower::idempotency::HeldClaim;
    ///
    /// async fn charge(claim: HeldClaim) -> String {
    ///     match claim.fence().await {
    ///         Ok(fence) => format!("charged under fence {fence}"),
    ///         Err(lost) => format!("not charged: {lost}"),
    ///     }
    /// }
    /// # let _ = axum::routing::post::<_, _, ()>(charge);
    /// ```
    HeldClaim,
    MissingHeldClaim,
    "this request holds no idempotency claim: is the route behind an IdempotencyLayer?"
}
