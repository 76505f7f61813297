//! [`Rendered`]: a handler's own distlock error, answered as the layers answer theirs.

use distlock::{LockError, RateLimitError};

use super::{MakeRefusal, PlainText, Refusal};

/// A runtime error a handler returns, answered as the layers answer: the same status,
/// `Retry-After` and body, made by the same [`MakeRefusal`] (`M`).
///
/// A handler that takes a lock or checks a limiter itself returns `Result<T, Rendered<M>>`
/// and uses `?`: [`LockError`] and [`RateLimitError`] convert into it. With the layers set
/// to [`ProblemDetails`](super::ProblemDetails), `Rendered<ProblemDetails>` answers
/// `application/problem+json` too, where returning the runtime's error as it is would answer
/// `text/plain`. A hook that is not `Default` (a closure, `ProblemDetails` with a
/// `type_base`) goes in with [`Rendered::new`].
///
/// ```
/// use std::time::Duration;
///
/// use axum::{Router, body::Body, extract::State, routing::post};
/// use distlock::Client;
/// use distlock_tower::refusal::{ProblemDetails, Rendered};
/// use http::{Request, StatusCode};
/// use tower::ServiceExt;
///
/// /// Takes the lock through the runtime: busy answers 423 as a problem document.
/// async fn settle(State(client): State<Client>) -> Result<String, Rendered<ProblemDetails>> {
///     let lease = client.lock("order:42").acquire().await?;
///     Ok(format!("settled under fence {}", lease.fence().await?))
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = Client::in_memory();
/// let app = Router::new().route("/settle", post(settle)).with_state(client.clone());
///
/// let holder = client.lock("order:42").ttl(Duration::from_secs(10)).acquire().await?;
/// let request = Request::post("/settle").body(Body::empty())?;
/// let response = app.oneshot(request).await?;
/// assert_eq!(response.status(), StatusCode::LOCKED);
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// assert_eq!(response.headers()["retry-after"], "10");
/// # drop(holder);
/// # Ok(()) }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
#[derive(Clone, Debug)]
pub struct Rendered<M = PlainText> {
    refusal: Refusal,
    make: M,
}

impl<M> Rendered<M> {
    /// `error` (a [`LockError`], a [`RateLimitError`] or a [`Refusal`]), to be answered by
    /// `make`.
    pub fn new(error: impl Into<Refusal>, make: M) -> Self {
        Self {
            refusal: error.into(),
            make,
        }
    }

    /// What will be answered.
    #[must_use]
    pub fn refusal(&self) -> &Refusal {
        &self.refusal
    }
}

impl<M: Default> From<LockError> for Rendered<M> {
    fn from(err: LockError) -> Self {
        Self::new(err, M::default())
    }
}

impl<M: Default> From<RateLimitError> for Rendered<M> {
    fn from(err: RateLimitError) -> Self {
        Self::new(err, M::default())
    }
}

impl<M: Default> From<Refusal> for Rendered<M> {
    fn from(refusal: Refusal) -> Self {
        Self::new(refusal, M::default())
    }
}

/// [`Refusal::into_response_with`], with an axum body.
impl<M: MakeRefusal> axum::response::IntoResponse for Rendered<M> {
    fn into_response(self) -> axum::response::Response {
        self.refusal
            .into_response_with(&self.make)
            .map(axum::body::Body::from)
    }
}
