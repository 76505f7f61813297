use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use tower::Service;

use super::ResponseBody;
use super::future::{self, ResponseFuture};
use super::layer::Config;
use crate::extract::{ExtractKey, Extracted};
use crate::refusal::{MakeRefusal, PlainText};

/// Middleware that checks each request against a rate limiter under the subject its key
/// extractor finds. Built by [`RateLimitLayer`](super::RateLimitLayer).
///
/// Cheap to clone (axum clones it per connection): the settings and the limiter's deny cache
/// are shared, the key extractor is cloned, and every clone counts against the same store.
/// Readiness is the inner service's; it is called only once the request is allowed. A
/// request that waits in the limiter ([`wait`](super::RateLimitLayer::wait)) first gives
/// that readiness back, so it holds no capacity of the inner service (a `ConcurrencyLimit`
/// permit, a `Buffer` slot) while it sleeps, and readies the service again once allowed.
#[derive(Clone, Debug)]
pub struct RateLimit<S, K, R = PlainText> {
    inner: S,
    config: Arc<Config<R>>,
    extract: K,
}

impl<S, K, R> RateLimit<S, K, R> {
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

impl<S, K, R, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, K, R>
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
        let subject = self.extract.extract_key(&request);
        let hint = match subject {
            Extracted::Absent => self.extract.absent_hint(),
            _ => None,
        };
        // The inner service is called later, in the future, once the request is allowed:
        // take the clone that `poll_ready` readied and leave a fresh clone in its place (which
        // holds no readiness, so the next `poll_ready` on this instance never waits on a
        // reservation held by this request).
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::new(future::run(
            inner,
            request,
            subject,
            hint,
            Arc::clone(&self.config),
        ))
    }
}
