use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use tower::Service;

use super::future;
use super::layer::Config;
use super::{ResponseBody, ResponseFuture};
use crate::extract::{ExtractKey, Extracted, MissingKey};
use crate::refusal::{MakeRefusal, PlainText, Refusal, RefusedBy};

/// Middleware that runs each request under a distributed lock named by the request's key,
/// held until the response body has been sent. Built by [`LockLayer`](super::LockLayer).
///
/// Cheap to clone: the settings are shared, the key extractor is cloned. Readiness is the
/// inner service's; the inner service is called only once the lock is held. With a
/// [`wait`](super::LockLayer::wait), a request gives that readiness back before it asks for
/// the lock (so it holds no `ConcurrencyLimit` permit or `Buffer` slot while it waits) and
/// readies the service again once it holds the lock.
///
/// See the [module docs](super) for an example.
#[derive(Clone, Debug)]
pub struct Lock<S, K, R = PlainText> {
    inner: S,
    config: Arc<Config<R>>,
    extract: K,
}

impl<S, K, R> Lock<S, K, R> {
    pub(crate) fn new(inner: S, config: Arc<Config<R>>, extract: K) -> Self {
        Self {
            inner,
            config,
            extract,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, K, R, ReqBody, ResBody> Service<Request<ReqBody>> for Lock<S, K, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    K: ExtractKey<ReqBody>,
    R: MakeRefusal,
    ReqBody: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let key = match self.extract.extract_key(&request) {
            Extracted::Key(key) => key,
            Extracted::Absent => {
                let hint = self.extract.absent_hint();
                return match self.config.missing_key {
                    MissingKey::Allow => {
                        tracing::debug!(hint, "request without a lock key; running it unlocked");
                        ResponseFuture::unlocked(self.inner.call(request))
                    }
                    MissingKey::Reject => {
                        tracing::debug!(hint, "request without a lock key; answering 400");
                        ResponseFuture::refused(Refusal::missing_key(RefusedBy::Lock), &self.config)
                    }
                };
            }
            // Never unlocked, whatever `MissingKey` says: a request must not escape the lock
            // by sending its key header twice.
            Extracted::Invalid(why) => {
                return ResponseFuture::refused(
                    Refusal::invalid_key(RefusedBy::Lock, why),
                    &self.config,
                );
            }
        };
        // The inner service is called only after the lock is taken, in the future: take the
        // clone that `poll_ready` readied and leave a fresh clone in its place (which holds no
        // readiness, so the next `poll_ready` on this instance never waits on a reservation
        // held by this request).
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::locked(future::run_locked(
            inner,
            request,
            key,
            Arc::clone(&self.config),
        ))
    }
}
