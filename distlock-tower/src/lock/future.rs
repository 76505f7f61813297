use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use distlock::{Lease, LeaseHandle, LockBuilder, LockError};
use http::{Request, Response};
use http_body::Body;
use tower::Service;

use super::HeldLock;
use super::body::{self, ResponseBody};
use super::layer::Config;
use crate::readiness::InnerService;
use crate::refusal::{MakeRefusal, Refusal};

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
    pub(crate) fn refused<R: MakeRefusal>(refusal: Refusal, config: &Config<R>) -> Self {
        let response = refuse(refusal, config);
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
pub(crate) async fn run_locked<S, R, ReqBody, ResBody>(
    readied: S,
    request: Request<ReqBody>,
    key: String,
    config: Arc<Config<R>>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    R: MakeRefusal,
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
        Err(refusal) => return Ok(refuse(refusal, &config)),
    };
    let held = HeldLock::new(lease.handle());
    call_under_lease(inner, request, lease, held, |handle| {
        tracing::warn!(lock = %key, fence = handle.fence(), reason = ?handle.lost_reason(), "lease lost while the handler ran");
        refuse(Refusal::lease_lost(&key), &config)
    })
    .await
}

/// Calls the inner service with `request` while `lease` is held (a lock, or a permit of a
/// concurrency limit), with `held` in the request's extensions for the handler.
///
/// The handler (readying included) is raced against the lease's lost signal: if the lease is
/// lost first, the handler is dropped and `on_lost` answers. Otherwise `held` goes into the
/// response's extensions too, and the lease moves into the response body, which releases it
/// once the body is done (or dropped); a response with nothing left to send releases it
/// before the head goes out.
pub(crate) async fn call_under_lease<S, ReqBody, ResBody, H>(
    inner: InnerService<S>,
    mut request: Request<ReqBody>,
    lease: Lease,
    held: H,
    on_lost: impl FnOnce(&LeaseHandle) -> Response<ResponseBody<ResBody>>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: Body<Data = Bytes>,
    H: Clone + Send + Sync + 'static,
{
    let handle = lease.handle();
    request.extensions_mut().insert(held.clone());
    // Readying (if the readiness was given back) and the call both count as the handler.
    let handler = inner.call(request);
    let mut response = tokio::select! {
        // Loss wins a tie: a response finished after the loss was not made under the lease.
        biased;
        () = handle.lost() => return Ok(on_lost(&handle)),
        response = handler => response?,
    };
    // For outer layers and logging: which lease, which fence. The handle outlives the lease
    // (it reports the lease lost once released).
    response.extensions_mut().insert(held);
    if response.body().is_end_stream() {
        // Nothing left to send: release before the head goes out, so a client that sends its
        // next request as soon as it has this response finds the lock free.
        body::release(lease).await;
        return Ok(response.map(ResponseBody::unlocked));
    }
    Ok(response.map(|b| ResponseBody::locked(b, lease)))
}

/// Acquires the lease, or says how to refuse the request.
async fn acquire<R>(config: &Config<R>, key: &str) -> Result<Lease, Refusal> {
    let builder = |wait: Duration| -> LockBuilder {
        let builder = config
            .client
            .lock(key)
            .ttl(config.ttl)
            .wait(wait)
            // A store that fails is answered with 503 at once, not retried for the wait.
            .store_patience(Duration::ZERO)
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
    result.map_err(|err| {
        match &err {
            LockError::Busy { .. } | LockError::Timeout { .. } => {}
            LockError::InvalidName(err) => {
                tracing::debug!(lock = %key, error = %err, "request key is not a valid lock name");
            }
            LockError::Store(err) => {
                tracing::warn!(lock = %key, error = %err, "lock store unavailable");
            }
            err => tracing::error!(lock = %key, error = %err, "cannot take the lock"),
        }
        Refusal::lock_error(key, err, config.busy_status.status_code())
    })
}

/// The response for `refusal`, made by the layer's [`MakeRefusal`].
fn refuse<B, R: MakeRefusal>(refusal: Refusal, config: &Config<R>) -> Response<ResponseBody<B>> {
    tracing::debug!(
        lock = refusal.key(),
        retry_after = refusal.retry_after_secs(),
        status = refusal.status().as_u16(),
        reason = refusal.reason().code(),
        detail = %refusal.detail(),
        "request refused"
    );
    refusal.respond(&config.refusal, ResponseBody::message)
}
