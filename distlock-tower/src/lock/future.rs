use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use distlock::{Lease, LockBuilder, LockError};
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body::Body;
use tower::Service;

use super::HeldLock;
use super::body::{self, ResponseBody};
use super::layer::Config;
use crate::extract::InvalidKey;
use crate::readiness::InnerService;

/// `Retry-After` of a `503` (store unavailable, lease lost).
const STORE_RETRY_AFTER: Duration = Duration::from_secs(1);

type BoxedFuture<B, E> = Pin<Box<dyn Future<Output = Result<Response<ResponseBody<B>>, E>> + Send>>;

/// Response future of [`Lock`](super::Lock).
///
/// Boxed: it awaits the runtime's lock acquisition, whose future type cannot be named, and
/// one allocation per request is small next to a store round trip. Opaque, so that what it
/// does inside can change without breaking anyone.
pub struct ResponseFuture<B, E> {
    inner: BoxedFuture<B, E>,
}

impl<B, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<B, E> ResponseFuture<B, E>
where
    B: Body<Data = Bytes> + Send + 'static,
    E: Send + 'static,
{
    /// The inner service's response, with no lock (a request without a key, allowed through).
    pub(crate) fn unlocked<F>(future: F) -> Self
    where
        F: Future<Output = Result<Response<B>, E>> + Send + 'static,
    {
        Self::locked(async move { Ok(future.await?.map(ResponseBody::unlocked)) })
    }

    /// A refusal decided in `call`, without calling the inner service.
    pub(crate) fn refused(refusal: &Refusal, config: &Config) -> Self {
        let response = refusal.response(config);
        Self::locked(async move { Ok(response) })
    }

    pub(crate) fn locked<F>(future: F) -> Self
    where
        F: Future<Output = Result<Response<ResponseBody<B>>, E>> + Send + 'static,
    {
        Self {
            inner: Box::pin(future),
        }
    }
}

impl<B, E> Future for ResponseFuture<B, E> {
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

/// Takes the lock for `key`, then runs the inner service under it.
///
/// `readied` is the inner service that the layer's `poll_ready` readied. When the acquisition
/// may wait (the layer has a `wait`), its readiness is given back first (see
/// [`InnerService`]) and the service is readied again under the lock.
///
/// The handler (readying included) is raced against the lease's lost signal; the lease then
/// moves into the response body, which releases it once the body is done (or dropped).
pub(crate) async fn run_locked<S, ReqBody, ResBody>(
    readied: S,
    mut request: Request<ReqBody>,
    key: String,
    config: Arc<Config>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: Body<Data = Bytes>,
{
    let mut inner = InnerService::Ready(readied);
    if !config.wait.is_zero() {
        // The lock may be busy for up to `wait`: hold nothing of the inner service meanwhile,
        // or a `ConcurrencyLimit` under this layer would serve no other key until it is free.
        inner.release_readiness();
    }
    let lease = match acquire(&config, &key).await {
        Ok(lease) => lease,
        Err(refusal) => return Ok(refusal.response(&config)),
    };
    let handle = lease.handle();
    request
        .extensions_mut()
        .insert(HeldLock::new(handle.clone()));
    // Readying (if the readiness was given back) and the call both count as the handler.
    let handler = inner.call(request);
    let response = tokio::select! {
        // Loss wins a tie: a response finished after the loss was not made under the lock.
        biased;
        () = handle.lost() => {
            tracing::warn!(lock = %key, fence = handle.fence(), reason = ?handle.lost_reason(), "distlock-tower: lease lost while the handler ran; answering 503");
            return Ok(Refusal::Lost.response(&config));
        }
        response = handler => response?,
    };
    if response.body().is_end_stream() {
        // Nothing left to send: release before the head goes out, so a client that sends its
        // next request as soon as it has this response finds the lock free.
        body::release(lease).await;
        return Ok(response.map(ResponseBody::unlocked));
    }
    Ok(response.map(|b| ResponseBody::locked(b, lease)))
}

/// Acquires the lease, or says how to refuse the request.
async fn acquire(config: &Config, key: &str) -> Result<Lease, Refusal> {
    let builder = |wait: Duration| -> LockBuilder {
        let builder = config
            .client
            .lock(key)
            .ttl(config.ttl)
            .wait(wait)
            .watchdog(config.watchdog);
        match config.max_hold {
            Some(max_hold) => builder.max_hold(max_hold),
            None => builder,
        }
    };
    let first = builder(config.wait).acquire().await;
    let result = match first {
        // A timed-out wait does not say how long the holder has left; one more try does,
        // and takes the lock if it has just come free.
        Err(LockError::Timeout { .. }) => builder(Duration::ZERO).acquire().await,
        other => other,
    };
    result.map_err(|err| Refusal::from_error(key, err))
}

/// Why a request is answered by the layer instead of the inner service.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Held by another request, free again within this long.
    Busy(Duration),
    /// The key extractor found no key.
    NoKey,
    /// The key extractor found a key the request carries, malformed.
    MalformedKey(InvalidKey),
    /// The key cannot be a lock name (empty, too long): the store refused it.
    UnusableName,
    /// The store failed or did not answer in time.
    StoreUnavailable,
    /// The lease was lost while the handler ran.
    Lost,
    /// A layer misconfiguration the builder did not catch.
    Internal,
}

impl Refusal {
    fn from_error(key: &str, err: LockError) -> Self {
        match err {
            LockError::Busy { retry_after, .. } => {
                tracing::debug!(lock = %key, ?retry_after, "distlock-tower: lock busy");
                Self::Busy(retry_after)
            }
            LockError::InvalidName(err) => {
                tracing::debug!(error = %err, "distlock-tower: request key is not a valid lock name");
                Self::UnusableName
            }
            LockError::Store(err) => {
                tracing::warn!(lock = %key, error = %err, "distlock-tower: lock store unavailable; answering 503");
                Self::StoreUnavailable
            }
            err => {
                tracing::error!(lock = %key, error = %err, "distlock-tower: cannot take the lock");
                Self::Internal
            }
        }
    }

    pub(crate) fn response<B>(&self, config: &Config) -> Response<ResponseBody<B>> {
        let (status, text) = match self {
            Self::Busy(_) => (
                config.busy_status.status_code(),
                Bytes::from_static(b"locked: another request holds this resource\n"),
            ),
            Self::NoKey => (
                StatusCode::BAD_REQUEST,
                Bytes::from_static(b"this request names no lock key\n"),
            ),
            Self::MalformedKey(why) => (
                StatusCode::BAD_REQUEST,
                Bytes::from(format!("this request's lock key is invalid: {why}\n")),
            ),
            Self::UnusableName => (
                StatusCode::BAD_REQUEST,
                Bytes::from_static(b"this request's lock key is invalid\n"),
            ),
            Self::StoreUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                Bytes::from_static(b"lock store unavailable, try again later\n"),
            ),
            Self::Lost => (
                StatusCode::SERVICE_UNAVAILABLE,
                Bytes::from_static(b"the lock was lost while handling this request\n"),
            ),
            Self::Internal => (
                StatusCode::INTERNAL_SERVER_ERROR,
                Bytes::from_static(b"lock error\n"),
            ),
        };
        let mut response = Response::new(ResponseBody::message(text));
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        let retry_after = match self {
            // The holder's remaining ttl, as the store reported it: the longest the lock can
            // stay busy unless the holder renews it.
            Self::Busy(retry_after) => Some(*retry_after),
            // A store that failed or was too slow usually answers again within moments; a
            // lost lease is free again, or held by whoever took it over (a retry then gets
            // that holder's 423 and its ttl). One second, as the rate-limit layer's 503.
            Self::StoreUnavailable | Self::Lost => Some(STORE_RETRY_AFTER),
            Self::NoKey | Self::MalformedKey(_) | Self::UnusableName | Self::Internal => None,
        };
        if let Some(retry_after) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, crate::retry_after::header(retry_after));
        }
        response
    }
}
