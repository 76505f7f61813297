//! How the runtime's errors answer an HTTP request: a status code and a `Retry-After`.
//!
//! A handler that calls the runtime API itself (`client.lock(..).acquire()`,
//! `limiter.check(..)`) should answer its client the way `distlock-tower`'s layers do, so that
//! a client sees one behaviour whether the layer or the handler took the lock. This module is
//! that one mapping: [`LockError::http_status`] and [`RateLimitError::http_status`], which the
//! layers use for every error the runtime returns them, [`FencedError::http_status`] for a
//! handler's fenced writes, and, with the `axum` feature, `IntoResponse` for the three error
//! types, built on the same mapping.
//!
//! | error | status | `Retry-After` |
//! |---|---|---|
//! | [`LockError::Busy`] | `423 Locked` | the holder's remaining ttl |
//! | [`LockError::Timeout`] | `423 Locked` | none (the wait does not say how long the holder has left) |
//! | [`LockError::LeaseLost`] | `503 Service Unavailable` | 1 s |
//! | [`LockError::ShuttingDown`] (this instance is draining) | `503 Service Unavailable` | 1 s |
//! | [`LockError::Store`], [`RateLimitError::Store`], [`RateLimitError::Overloaded`] | `503 Service Unavailable` | 1 s |
//! | [`RateLimitError::CircuitOpen`] | `503 Service Unavailable` | until the breaker's next probe, at least 1 s |
//! | [`RateLimitError::Limited`] (a [`#[rate_limit]`](crate::rate_limit) call refused) | `429 Too Many Requests` | the error's `retry_after` |
//! | [`RateLimitError::NoUnits`] (a `check_up_to` of no units: the caller's mistake, as below) | `500 Internal Server Error` | none |
//! | [`RateLimitError::NotForAnyOf`] (a refund, penalty or `check_up_to` on an any-of limiter: the caller's mistake, as below) | `500 Internal Server Error` | none |
//! | [`LockError::InvalidName`], [`RateLimitError::InvalidSubject`] | `400 Bad Request` | none |
//! | [`RateLimitError::CostTooLarge`] | `413 Content Too Large` | none |
//! | [`FencedError::Stale`], [`FencedError::Conflict`] | `409 Conflict` | none |
//! | [`FencedError::Store`], a PostgreSQL connection failure | `503 Service Unavailable` | 1 s |
//! | [`FencedError::InvalidName`] | `400 Bad Request` | none |
//! | [`LockError::InvalidConfig`], [`LockError::MaxHoldReached`], [`LockError::NoDefaultClient`], [`LockError::PermitsExceeded`], [`LockError::UnsupportedStore`], [`RateLimitError::InvalidPolicy`], [`RateLimitError::NoDefaultClient`], [`RateLimitError::UnsupportedStore`], [`FencedError::InvalidInput`], [`FencedError::UnsupportedStore`], a PostgreSQL statement's error | `500 Internal Server Error` | none |
//!
//! The choices, and why:
//!
//! * **A timed-out wait is `423`, not `503`.** The lock is still held by someone else: that is
//!   contention, which a client resolves by retrying, not an outage that should page anyone.
//!   Only [`Busy`](LockError::Busy) knows the holder's remaining ttl; to send it after a
//!   wait, try once more without waiting when the wait times out, as the lock layer and
//!   `#[distributed_lock]` do (so a macro's timed-out wait is `Busy`, with `Retry-After`).
//! * **A cost that can never pass is `413`.** Retrying the same request never helps; the
//!   client must send a smaller one (fewer items in a batch), which is what `413` says. A
//!   `400` would claim the request is malformed.
//! * **Every store failure is `503` with `Retry-After: 1`.** A store that failed or was too
//!   slow usually answers again within moments; a lost lease is free again, or held by
//!   whoever took it over (a retry then gets that holder's `423` and its ttl).
//! * **A client shutting down is `503` with `Retry-After: 1`.** This instance is draining
//!   ([`Client::shutdown`](crate::Client::shutdown)); another behind the same balancer takes
//!   the retry.
//! * **A stale fenced write is `409`**, without `Retry-After`: the request's lease ran out and
//!   a newer holder has written since, so the work it did is void. The same request sent
//!   again takes the lock anew and may well succeed; the client decides, as it does for any
//!   conflict. A failed condition of an [`Update`](crate::fenced::Update) is a conflict too.
//! * **A configuration mistake is `500`**, without `Retry-After`: no retry will fix it. The
//!   body says only "lock error" or "rate limit error", so `IntoResponse` logs every `500`
//!   once at ERROR with the error itself (what was misconfigured, e.g. a job's `at_most`
//!   shorter than its `at_least`).
//!
//! A denied rate-limit check is not an error (it is an `Ok` decision); answer it `429` with
//! [`retry_after_secs`]`(decision.retry_after)`, as the rate-limit layer does. A
//! [`#[rate_limit]`](crate::rate_limit) function turns the same denial into
//! [`RateLimitError::Limited`], which maps to that answer.
//!
//! ```
//! use std::time::Duration;
//! use distlock::LockError;
//!
//! let busy = LockError::Busy { name: "order:42".into(), retry_after: Duration::from_millis(1500) };
//! let status = busy.http_status();
//! assert_eq!(status.code, 423);
//! assert_eq!(status.retry_after_secs(), Some(2)); // whole seconds, rounded up
//! ```
//!
//! With the `axum` feature, a handler can return the errors as they are:
//!
//! ```
//! # #[cfg(feature = "axum")] {
//! use distlock::{Client, LockError};
//!
//! async fn settle(client: Client) -> Result<String, LockError> {
//!     let lease = client.lock("order:42").acquire().await?; // busy: 423 with Retry-After
//!     let fence = lease.fence().await?; // lost before it was minted: 503
//!     lease.release().await?;
//!     Ok(format!("settled under fence {fence}"))
//! }
//! # let _ = settle;
//! # }
//! ```

use std::time::Duration;

use crate::error::{LockError, RateLimitError};
use crate::fenced::FencedError;

/// `Retry-After` of a `503`: a store failure, an overloaded limiter, a lost lease.
pub const STORE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The answer an error gives an HTTP request: a status code and, when a retry can help, how
/// long to wait before it.
///
/// The code is a plain `u16` so that this mapping needs no HTTP crate: the runtime and the
/// tower layers share it whether or not axum is in the build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpStatus {
    /// The status code: 400, 413, 423, 500 or 503 (see the [module docs](self)).
    pub code: u16,
    /// How long the client should wait before it retries, for `Retry-After`; `None` when no
    /// retry will help or nothing is known.
    pub retry_after: Option<Duration>,
}

impl HttpStatus {
    const fn new(code: u16, retry_after: Option<Duration>) -> Self {
        Self { code, retry_after }
    }

    /// [`retry_after`](Self::retry_after) as the `Retry-After` value: whole seconds, rounded
    /// up, at least 1 (see [`retry_after_secs`]).
    #[must_use]
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after.map(retry_after_secs)
    }
}

/// A wait as the value of `Retry-After`: whole seconds, rounded up, and never 0, since a
/// client told "0" retries at once and is refused again. Saturates instead of overflowing.
///
/// ```
/// use std::time::Duration;
/// use distlock::http::retry_after_secs;
///
/// assert_eq!(retry_after_secs(Duration::ZERO), 1);
/// assert_eq!(retry_after_secs(Duration::from_millis(10)), 1);
/// assert_eq!(retry_after_secs(Duration::from_millis(29_001)), 30);
/// ```
#[must_use]
pub fn retry_after_secs(wait: Duration) -> u64 {
    let whole = wait
        .as_secs()
        .saturating_add(u64::from(wait.subsec_nanos() > 0));
    whole.max(1)
}

impl LockError {
    /// How this error answers an HTTP request; see the [`http`](crate::http) module for the
    /// table and the reasons.
    #[must_use]
    pub fn http_status(&self) -> HttpStatus {
        match self {
            Self::Busy { retry_after, .. } => HttpStatus::new(423, Some(*retry_after)),
            Self::Timeout { .. } => HttpStatus::new(423, None),
            Self::LeaseLost { .. } | Self::Store(_) | Self::ShuttingDown { .. } => {
                HttpStatus::new(503, Some(STORE_RETRY_AFTER))
            }
            Self::InvalidName(_) => HttpStatus::new(400, None),
            Self::MaxHoldReached { .. }
            | Self::InvalidConfig { .. }
            | Self::NoDefaultClient
            | Self::PermitsExceeded { .. }
            | Self::UnsupportedStore { .. } => HttpStatus::new(500, None),
        }
    }
}

impl RateLimitError {
    /// How this error answers an HTTP request; see the [`http`](crate::http) module for the
    /// table and the reasons.
    #[must_use]
    pub fn http_status(&self) -> HttpStatus {
        match self {
            Self::Store(_) | Self::Overloaded { .. } => {
                HttpStatus::new(503, Some(STORE_RETRY_AFTER))
            }
            Self::CircuitOpen { retry_in } => {
                HttpStatus::new(503, Some((*retry_in).max(STORE_RETRY_AFTER)))
            }
            Self::Limited { retry_after, .. } => HttpStatus::new(429, Some(*retry_after)),
            Self::InvalidSubject(_) => HttpStatus::new(400, None),
            Self::CostTooLarge { .. } => HttpStatus::new(413, None),
            Self::InvalidPolicy(_)
            | Self::UnsupportedStore { .. }
            | Self::NoDefaultClient
            | Self::NoUnits
            | Self::NotForAnyOf { .. } => HttpStatus::new(500, None),
        }
    }
}

impl FencedError {
    /// How this error answers an HTTP request; see the [`http`](crate::http) module for the
    /// table and the reasons.
    #[must_use]
    pub fn http_status(&self) -> HttpStatus {
        match self {
            Self::Stale { .. } | Self::Conflict { .. } => HttpStatus::new(409, None),
            Self::Store(_) => HttpStatus::new(503, Some(STORE_RETRY_AFTER)),
            Self::InvalidName(_) => HttpStatus::new(400, None),
            Self::UnsupportedStore { .. } | Self::InvalidInput { .. } => HttpStatus::new(500, None),
            // No SQLSTATE: the connection failed, not the statement.
            #[cfg(feature = "postgres")]
            Self::Postgres(err) if err.code().is_none() => {
                HttpStatus::new(503, Some(STORE_RETRY_AFTER))
            }
            #[cfg(feature = "postgres")]
            Self::Postgres(_) => HttpStatus::new(500, None),
        }
    }
}

#[cfg(feature = "axum")]
mod into_response {
    //! `IntoResponse` for the error types. The body is a short fixed text per kind, never the
    //! error's `Display`: that names locks and subjects and quotes the store's own words,
    //! which are for logs, not for clients. So a `500` (a configuration mistake, which no
    //! retry fixes) is logged here, once, at ERROR with the error itself: the response alone
    //! would leave the operator nothing to go on.

    use ::http::{HeaderValue, StatusCode, header};
    use axum_core::response::{IntoResponse, Response};

    use super::HttpStatus;
    use crate::error::{LockError, RateLimitError};
    use crate::fenced::FencedError;

    fn respond(status: HttpStatus, text: &'static str, error: &dyn std::error::Error) -> Response {
        let code = StatusCode::from_u16(status.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if code == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = %error, "answering 500: {}", text.trim_end());
        }
        let mut response = (code, text).into_response();
        if let Some(secs) = status.retry_after_secs() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }

    /// Answers as the lock layer does: `423` with `Retry-After` when busy, `503` with
    /// `Retry-After: 1` when the store failed or the lease was lost, `400` for a name that
    /// cannot be a lock, `500` for a configuration mistake (see [`crate::http`]).
    impl IntoResponse for LockError {
        fn into_response(self) -> Response {
            let text = match &self {
                Self::Busy { .. } | Self::Timeout { .. } => {
                    "locked: another request holds this resource\n"
                }
                Self::LeaseLost { .. } => "the lock was lost while handling this request\n",
                Self::Store(_) => "lock store unavailable, try again later\n",
                Self::ShuttingDown { .. } => "this server is shutting down; try again\n",
                Self::InvalidName(_) => "this request's lock key is invalid\n",
                _ => "lock error\n",
            };
            respond(self.http_status(), text, &self)
        }
    }

    /// Answers as the rate-limit layer does: `503` with `Retry-After: 1` when the store cannot
    /// answer (failing closed), `400` for a subject that cannot be a key, `413` for a cost
    /// that can never pass, `500` for a configuration mistake (see [`crate::http`]).
    impl IntoResponse for RateLimitError {
        fn into_response(self) -> Response {
            let text = match &self {
                Self::Store(_) | Self::Overloaded { .. } | Self::CircuitOpen { .. } => {
                    "rate limiting is unavailable; try again shortly\n"
                }
                Self::InvalidSubject(_) => "this request's rate-limit key is unusable\n",
                Self::CostTooLarge { .. } => {
                    "this request costs more than the rate limit ever allows at once\n"
                }
                Self::Limited { .. } => "too many requests; try again later\n",
                _ => "rate limit error\n",
            };
            respond(self.http_status(), text, &self)
        }
    }

    /// Answers `409 Conflict` for a stale write (a newer holder has written: this request's
    /// work is void) or a failed condition, `503` with `Retry-After: 1` when the store or
    /// PostgreSQL's connection failed, `400` for an unusable name, `500` for a mistake in the
    /// code or configuration (see [`crate::http`]).
    impl IntoResponse for FencedError {
        fn into_response(self) -> Response {
            let text = match &self {
                Self::Stale { .. } => {
                    "conflict: a newer holder has written this resource; this request's lease ran out\n"
                }
                Self::Conflict { .. } => "conflict: the resource changed; nothing was written\n",
                Self::InvalidName(_) => "this request's resource name is invalid\n",
                _ if self.http_status().code == 503 => "storage unavailable, try again later\n",
                _ => "fenced write error\n",
            };
            respond(self.http_status(), text, &self)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{InvalidName, InvalidPolicy, LossReason, StoreError};

    fn store() -> StoreError {
        StoreError::Timeout {
            after: Duration::from_millis(50),
        }
    }

    /// Each error of `table` maps to its status code and `Retry-After` seconds.
    fn assert_table<E: std::fmt::Display>(
        table: impl IntoIterator<Item = (E, u16, Option<u64>)>,
        status: impl Fn(&E) -> HttpStatus,
    ) {
        for (err, code, secs) in table {
            let status = status(&err);
            assert_eq!(
                (status.code, status.retry_after_secs()),
                (code, secs),
                "{err}"
            );
        }
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_never_zero() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_nanos(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(30)), 30);
        assert_eq!(retry_after_secs(Duration::from_nanos(29_000_000_001)), 30);
        assert_eq!(retry_after_secs(Duration::MAX), u64::MAX);
    }

    #[test]
    fn lock_errors_map_as_the_table_says() {
        let name = || "order:42".to_owned();
        let table = [
            (
                LockError::Busy {
                    name: name(),
                    retry_after: Duration::from_millis(2500),
                },
                423,
                Some(3),
            ),
            (
                LockError::Timeout {
                    name: name(),
                    waited: Duration::from_secs(5),
                },
                423,
                None,
            ),
            (
                LockError::LeaseLost {
                    name: name(),
                    reason: LossReason::Expired,
                },
                503,
                Some(1),
            ),
            (LockError::Store(store()), 503, Some(1)),
            (LockError::InvalidName(InvalidName::Empty), 400, None),
            (LockError::MaxHoldReached { name: name() }, 500, None),
            (
                LockError::InvalidConfig {
                    reason: "ttl".to_owned(),
                },
                500,
                None,
            ),
            (LockError::NoDefaultClient, 500, None),
        ];
        assert_table(table, |err| err.http_status());
    }

    #[test]
    fn rate_limit_errors_map_as_the_table_says() {
        let table = [
            (RateLimitError::Store(store()), 503, Some(1)),
            (RateLimitError::Overloaded { in_flight: 4096 }, 503, Some(1)),
            (
                RateLimitError::InvalidSubject(InvalidName::TooLong { len: 600, max: 512 }),
                400,
                None,
            ),
            (
                RateLimitError::CostTooLarge {
                    cost: 9,
                    policy: "api".to_owned(),
                    capacity: 5,
                },
                413,
                None,
            ),
            (
                RateLimitError::InvalidPolicy(InvalidPolicy::NoPolicies),
                500,
                None,
            ),
            (
                RateLimitError::Limited {
                    policy: "api".to_owned(),
                    retry_after: Duration::from_millis(2100),
                },
                429,
                Some(3),
            ),
            (RateLimitError::NoDefaultClient, 500, None),
        ];
        assert_table(table, |err| err.http_status());
    }

    #[test]
    fn fenced_errors_map_as_the_table_says() {
        let table = [
            (
                FencedError::Stale {
                    resource: "invoice:42".to_owned(),
                    last: 9,
                    offered: 7,
                },
                409,
                None,
            ),
            (
                FencedError::Conflict {
                    resource: "invoice:42".to_owned(),
                    key: "status".to_owned(),
                },
                409,
                None,
            ),
            (FencedError::Store(store()), 503, Some(1)),
            (FencedError::InvalidName(InvalidName::Empty), 400, None),
            (
                FencedError::InvalidInput {
                    reason: "ttl".to_owned(),
                },
                500,
                None,
            ),
            (
                FencedError::UnsupportedStore { reason: "a quorum" },
                500,
                None,
            ),
        ];
        assert_table(table, |err| err.http_status());
    }

    /// Through real axum handlers: a handler returning the runtime's errors answers with the
    /// mapped status, `Retry-After` and a short text that does not echo the lock's name.
    #[cfg(feature = "axum")]
    #[tokio::test]
    async fn axum_handlers_answer_with_the_mapping() {
        use axum::body::Body;
        use axum::handler::Handler;
        use axum::http::{Request, StatusCode};

        async fn call<H, T>(handler: H) -> (StatusCode, Option<String>, String)
        where
            H: Handler<T, ()>,
        {
            let request = Request::get("/").body(Body::empty()).expect("request");
            let response = handler.call(request, ()).await;
            let status = response.status();
            let retry_after = response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().expect("ASCII").to_owned());
            let body = axum::body::to_bytes(response.into_body(), 1 << 16)
                .await
                .expect("body");
            (
                status,
                retry_after,
                String::from_utf8_lossy(&body).into_owned(),
            )
        }

        let client = crate::client::Client::in_memory();
        let held = client.lock("order:42").acquire().await.expect("free");

        // The handler takes the lock through the runtime API; it is held elsewhere.
        let busy = {
            let client = client.clone();
            move || async move {
                let lease = client.lock("order:42").acquire().await?;
                Ok::<_, LockError>(lease.fence().await?.to_string())
            }
        };
        let (status, retry_after, body) = call(busy).await;
        assert_eq!(status, StatusCode::LOCKED);
        let secs: u64 = retry_after.expect("Retry-After").parse().expect("seconds");
        assert!((1..=30).contains(&secs), "the holder's ttl: {secs}");
        assert!(body.starts_with("locked"), "{body}");
        assert!(!body.contains("order:42"), "the name is not echoed: {body}");
        held.release().await.expect("release");

        let too_long = {
            let client = client.clone();
            move || async move {
                let lease = client
                    .lock("x".repeat(crate::keys::MAX_NAME_LEN + 1))
                    .acquire()
                    .await?;
                Ok::<_, LockError>(lease.fence().await?.to_string())
            }
        };
        let (status, retry_after, _) = call(too_long).await;
        assert_eq!((status, retry_after), (StatusCode::BAD_REQUEST, None));

        let store_down = || async { Err::<String, _>(LockError::Store(store())) };
        let (status, retry_after, body) = call(store_down).await;
        assert_eq!(
            (status, retry_after.as_deref()),
            (StatusCode::SERVICE_UNAVAILABLE, Some("1"))
        );
        assert!(
            !body.contains("Redis"),
            "store details stay in the logs: {body}"
        );

        let limited = || async {
            Err::<String, _>(RateLimitError::Limited {
                policy: "api".to_owned(),
                retry_after: Duration::from_millis(1500),
            })
        };
        let (status, retry_after, body) = call(limited).await;
        assert_eq!(
            (status, retry_after.as_deref()),
            (StatusCode::TOO_MANY_REQUESTS, Some("2"))
        );
        assert!(body.starts_with("too many requests"), "{body}");

        let rate_limited_store_down = || async { Err::<String, _>(RateLimitError::Store(store())) };
        let (status, retry_after, _) = call(rate_limited_store_down).await;
        assert_eq!(
            (status, retry_after.as_deref()),
            (StatusCode::SERVICE_UNAVAILABLE, Some("1"))
        );

        let limiter = client
            .rate_limiter(
                crate::ratelimit::Policy::gcra(
                    "api",
                    crate::ratelimit::Rate::per_second(1)
                        .and_then(|r| r.burst(2))
                        .expect("rate"),
                )
                .expect("policy"),
            )
            .build()
            .expect("valid limiter");
        let too_costly = move || async move {
            let decision = limiter.check_n("user:7", 3).await?;
            Ok::<_, RateLimitError>(decision.remaining.to_string())
        };
        let (status, retry_after, _) = call(too_costly).await;
        assert_eq!((status, retry_after), (StatusCode::PAYLOAD_TOO_LARGE, None));

        // A real stale write: the resource has accepted a newer holder's fence.
        let invoice = client
            .fenced("invoice:42")
            .expect("the memory store fences");
        let first = client.lock("invoice:42").acquire().await.expect("free");
        let stale = first.fence().await.expect("minted while held");
        first.release().await.expect("release");
        let next = client.lock("invoice:42").acquire().await.expect("free");
        invoice
            .set(
                "status",
                "refunded",
                next.fence().await.expect("minted while held"),
            )
            .await
            .expect("the newer holder writes");
        let late_write = move || async move {
            invoice.set("status", "paid", stale).await?;
            Ok::<_, FencedError>("written")
        };
        let (status, retry_after, body) = call(late_write).await;
        assert_eq!((status, retry_after), (StatusCode::CONFLICT, None));
        assert!(body.starts_with("conflict"), "{body}");
        assert!(!body.contains("invoice"), "the name is not echoed: {body}");
        next.release().await.expect("release");
    }

    /// Every 500 is logged once at ERROR with the error itself (here a job whose `at_most` is
    /// shorter than its `at_least`, answered by a handler that returns the runtime's error);
    /// the answers that are not 500 add no ERROR line.
    #[cfg(feature = "axum")]
    #[tokio::test]
    async fn a_500_is_logged_once_at_error_with_its_reason() {
        use std::io::Write;
        use std::sync::{Arc, Mutex};

        use axum_core::response::IntoResponse;
        use tracing::subscriber::NoSubscriber;

        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl Write for Buffer {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().expect("buffer").extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }

        // A second dispatcher makes every call site ask ours too, whatever other tests'
        // threads cached about it (tokio-rs/tracing#3611).
        let _pin = tracing::Dispatch::new(NoSubscriber::default());
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        tracing::callsite::rebuild_interest_cache();
        let logged = || String::from_utf8(buffer.0.lock().expect("buffer").clone()).expect("utf-8");

        let client = crate::client::Client::in_memory();
        let err = client
            .job("nightly")
            .at_least(Duration::from_secs(60))
            .at_most(Duration::from_secs(1))
            .run(|_| async {})
            .await
            .expect_err("at_most < at_least is refused");
        assert!(matches!(err, LockError::InvalidConfig { .. }), "{err}");
        let reason = err.to_string();
        let response = err.into_response();
        assert_eq!(response.status(), 500);
        let text = logged();
        let errors: Vec<&str> = text.lines().filter(|l| l.contains("ERROR")).collect();
        assert_eq!(errors.len(), 1, "{text}");
        assert!(errors[0].contains("answering 500"), "{text}");
        assert!(
            errors[0].contains(&reason),
            "the reason: {reason} in {text}"
        );

        let policy = RateLimitError::InvalidPolicy(InvalidPolicy::NoPolicies);
        let reason = policy.to_string();
        assert_eq!(policy.into_response().status(), 500);
        let text = logged();
        assert_eq!(
            text.lines().filter(|l| l.contains("ERROR")).count(),
            2,
            "{text}"
        );
        assert!(text.contains(&reason), "{text}");

        // Not 500s: no ERROR.
        let busy = LockError::Busy {
            name: "order:42".to_owned(),
            retry_after: Duration::from_secs(1),
        };
        assert_eq!(busy.into_response().status(), 423);
        assert_eq!(RateLimitError::Store(store()).into_response().status(), 503);
        let text = logged();
        assert_eq!(
            text.lines().filter(|l| l.contains("ERROR")).count(),
            2,
            "{text}"
        );
    }
}
