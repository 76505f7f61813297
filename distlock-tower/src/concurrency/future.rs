use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use distlock::{Lease, LockError, SemaphoreBuilder};
use http::{Request, Response};
use http_body::Body;
use tower::Service;

use super::HeldPermit;
use super::ResponseBody;
use super::layer::Config;
use crate::lock::future::call_under_lease;
use crate::readiness::InnerService;
use crate::refusal::{MakeRefusal, Refusal, RefusedBy};

/// Takes a permit for `key`, then runs the inner service under it (see
/// [`call_under_lease`]; `readied` is handled as by the lock layer).
pub(crate) async fn run_limited<S, R, ReqBody, ResBody>(
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
        // Waiting for a permit: hold nothing of the inner service meanwhile.
        inner.release_readiness();
    }
    let lease = match acquire(&config, &key).await {
        Ok(lease) => lease,
        Err(refusal) => return Ok(refuse(refusal, &config)),
    };
    let held = HeldPermit::new(lease.handle());
    call_under_lease(inner, request, lease, held, |handle| {
        tracing::warn!(semaphore = %key, fence = handle.fence(), reason = ?handle.lost_reason(), "permit lost while the handler ran");
        refuse(
            Refusal::lease_lost_by(RefusedBy::ConcurrencyLimit, &key),
            &config,
        )
    })
    .await
}

/// Takes a permit, or says how to refuse the request.
async fn acquire<R>(config: &Config<R>, key: &str) -> Result<Lease, Refusal> {
    let builder = |wait: Duration| -> SemaphoreBuilder {
        let builder = config
            .client
            .semaphore(key, config.limit)
            .ttl(config.ttl)
            .wait(wait)
            // A store that fails is answered with 503 at once, not retried for the wait.
            .store_patience(Duration::ZERO);
        match config.max_hold {
            Some(max_hold) => builder.max_hold(max_hold),
            None => builder,
        }
    };
    builder(config.wait).acquire().await.map_err(|err| {
        match &err {
            LockError::Busy { .. } | LockError::Timeout { .. } => {}
            LockError::InvalidName(err) => {
                tracing::debug!(semaphore = %key, error = %err, "request key is not a valid semaphore name");
            }
            LockError::Store(err) => {
                tracing::warn!(semaphore = %key, error = %err, "concurrency limit store unavailable");
            }
            err => tracing::error!(semaphore = %key, error = %err, "cannot take a permit"),
        }
        Refusal::concurrency_error(
            key,
            err,
            config.full_status.status_code(),
            config.retry_after,
        )
    })
}

/// The response for `refusal`, made by the layer's [`MakeRefusal`].
pub(crate) fn refuse<B, R: MakeRefusal>(
    refusal: Refusal,
    config: &Config<R>,
) -> Response<ResponseBody<B>> {
    tracing::debug!(
        semaphore = refusal.key(),
        retry_after = refusal.retry_after_secs(),
        status = refusal.status().as_u16(),
        reason = refusal.reason().code(),
        detail = %refusal.detail(),
        "request refused"
    );
    refusal.respond(&config.refusal, ResponseBody::message)
}
