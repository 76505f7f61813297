use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use tower::Service;

use super::future::run_limited;
use super::layer::Config;
use super::{ResponseBody, ResponseFuture};
use crate::extract::{ExtractKey, Extracted, MissingKey};
use crate::refusal::{MakeRefusal, PlainText, Refusal, RefusedBy};

/// Middleware that lets at most N requests per key be in flight across every replica, each
/// holding a permit until its response body has been sent. Built by
/// [`ConcurrencyLimitLayer`](super::ConcurrencyLimitLayer).
///
/// Readiness is the inner service's; the inner service is called only once a permit is held.
/// With a [`wait`](super::ConcurrencyLimitLayer::wait), a request gives that readiness back
/// while it waits for a permit, and readies the service again once it holds one.
#[derive(Clone, Debug)]
pub struct ConcurrencyLimit<S, K, R = PlainText> {
    inner: S,
    config: Arc<Config<R>>,
    extract: K,
}

impl<S, K, R> ConcurrencyLimit<S, K, R> {
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

impl<S, K, R, ReqBody, ResBody> Service<Request<ReqBody>> for ConcurrencyLimit<S, K, R>
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
        let refused = |refusal: Refusal, config: &Config<R>| {
            let response = super::future::refuse(refusal, config);
            ResponseFuture::locked(async move { Ok(response) })
        };
        let key = match self.extract.extract_key(&request) {
            Extracted::Key(key) => key,
            Extracted::Absent => {
                let hint = self.extract.absent_hint();
                return match self.config.missing_key {
                    MissingKey::Allow => {
                        tracing::debug!(
                            hint,
                            "request without a concurrency-limit key; running it unlimited"
                        );
                        ResponseFuture::unlocked(self.inner.call(request))
                    }
                    MissingKey::Reject => {
                        tracing::debug!(
                            hint,
                            "request without a concurrency-limit key; answering 400"
                        );
                        refused(
                            Refusal::missing_key(RefusedBy::ConcurrencyLimit),
                            &self.config,
                        )
                    }
                };
            }
            // Never unlimited, whatever `MissingKey` says.
            Extracted::Invalid(why) => {
                return refused(
                    Refusal::invalid_key(RefusedBy::ConcurrencyLimit, why),
                    &self.config,
                );
            }
        };
        // As the lock layer: the readied service goes with the request, a fresh clone stays.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::locked(run_limited(inner, request, key, Arc::clone(&self.config)))
    }
}
