use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use distlock::RateLimitError;
use distlock::ratelimit::Decision;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body::Body;
use tokio::time::Instant;
use tower::Service;

use super::ResponseBody;
use super::headers::{self, describe};
use super::layer::{Config, Limiter};
use crate::extract::{Extracted, MissingKey};
use crate::readiness::InnerService;

type BoxedFuture<B, E> = Pin<Box<dyn Future<Output = Result<Response<ResponseBody<B>>, E>> + Send>>;

/// Response future of [`RateLimit`](super::RateLimit).
///
/// Boxed: it awaits the limiter's check, whose future type cannot be named, and one
/// allocation per request is small next to a store round trip. Opaque, so that what it does
/// inside can change without breaking anyone.
pub struct ResponseFuture<B, E> {
    inner: BoxedFuture<B, E>,
}

impl<B, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<B, E> ResponseFuture<B, E> {
    pub(crate) fn new<F>(future: F) -> Self
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

/// Checks the request (waiting if configured), then calls the inner service or answers
/// for it.
///
/// `readied` is the inner service that the layer's `poll_ready` readied; it is given back
/// (see [`InnerService`]) before the request sleeps in wait mode.
pub(crate) async fn run<S, ReqBody, ResBody>(
    readied: S,
    request: Request<ReqBody>,
    subject: Extracted,
    config: Arc<Config>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: Body<Data = Bytes>,
{
    let mut inner = InnerService::Ready(readied);
    let subject = match subject {
        Extracted::Key(subject) => subject,
        Extracted::Absent => {
            return match config.missing_key {
                MissingKey::Allow => Ok(inner.call(request).await?.map(ResponseBody::inner)),
                MissingKey::Reject => Ok(message(
                    StatusCode::BAD_REQUEST,
                    "this request has no rate-limit key\n",
                )),
            };
        }
        // Never unmetered, whatever `MissingKey` says: a client must not escape its limit by
        // sending its key header twice.
        Extracted::Invalid(why) => {
            tracing::debug!(reason = %why, "distlock-tower: invalid rate-limit key; answering 400");
            return Ok(message(
                StatusCode::BAD_REQUEST,
                format!("this request's rate-limit key is invalid: {why}\n"),
            ));
        }
    };
    let matched = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(axum::extract::MatchedPath::as_str);
    let limiter = config.limiter_for(matched);
    let decision = match check(limiter, &subject, &config, &mut inner).await {
        Ok(decision) => decision,
        Err(refusal) => return Ok(refusal),
    };
    let mut response = inner.call(request).await?.map(ResponseBody::inner);
    describe(
        response.headers_mut(),
        &decision,
        &limiter.policy_field,
        config.headers,
    );
    Ok(response)
}

/// The allowed decision, or the response refusing the request. Waits (and checks again)
/// while the wait fits in the configured maximum, having given back the inner service's
/// readiness first.
async fn check<S: Clone, B>(
    limiter: &Limiter,
    subject: &str,
    config: &Config,
    inner: &mut InnerService<S>,
) -> Result<Decision, Response<ResponseBody<B>>> {
    let started = Instant::now();
    loop {
        match limiter.limiter.check_n(subject, config.cost).await {
            Ok(decision) if decision.allowed => return Ok(decision),
            Ok(decision) => {
                if started.elapsed().saturating_add(decision.retry_after) <= config.max_wait {
                    // Nothing is consumed while waiting: dropping this future is free. Nor is
                    // anything of the inner service held (a concurrency permit, say).
                    inner.release_readiness();
                    tokio::time::sleep(decision.retry_after).await;
                    continue;
                }
                return Err(too_many(&decision, limiter, config));
            }
            Err(RateLimitError::InvalidSubject(err)) => {
                tracing::debug!(error = %err, "distlock-tower: unusable rate-limit key");
                return Err(message(
                    StatusCode::BAD_REQUEST,
                    "this request's rate-limit key is unusable\n",
                ));
            }
            Err(err) => {
                // The limiter fails closed: the store could not answer within its deadline.
                tracing::warn!(error = %err, "distlock-tower: rate-limit store unavailable; answering 503");
                let mut response = message(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "rate limiting is unavailable; try again shortly\n",
                );
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(1));
                return Err(response);
            }
        }
    }
}

/// `429 Too Many Requests` with `Retry-After` and the rate-limit fields.
fn too_many<B>(
    decision: &Decision,
    limiter: &Limiter,
    config: &Config,
) -> Response<ResponseBody<B>> {
    let mut response = message(
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "too many requests; retry in {} s\n",
            headers::ceil_secs(decision.retry_after).max(1)
        ),
    );
    let headers = response.headers_mut();
    headers.insert(
        header::RETRY_AFTER,
        headers::retry_after(decision.retry_after),
    );
    describe(headers, decision, &limiter.policy_field, config.headers);
    response
}

fn message<B>(status: StatusCode, text: impl Into<Bytes>) -> Response<ResponseBody<B>> {
    let mut response = Response::new(ResponseBody::message(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
