use std::sync::Arc;

use distlock::{Lease, LeaseHandle, LockError};

use super::HeldPermit;
use super::layer::{Config, Limiting};
use super::{ResponseBody, ResponseFuture};
use crate::extract::MissingKey;
use crate::lease::{LeaseKind, LeaseOptions};
use crate::refusal::{PlainText, Refusal, RefusedBy};

/// Middleware that lets at most N requests per key be in flight across every replica, each
/// holding a permit until its response body has been sent. Built by
/// [`ConcurrencyLimitLayer`](super::ConcurrencyLimitLayer).
///
/// Readiness is the inner service's; the inner service is called only once a permit is held.
/// With a [`wait`](super::ConcurrencyLimitLayerBuilder::wait), a request gives that readiness
/// back while it waits for a permit, and readies the service again once it holds one.
pub struct ConcurrencyLimit<S, K, R = PlainText> {
    pub(crate) inner: S,
    pub(crate) config: Arc<Config<K, R>>,
}

impl_service!(ConcurrencyLimit, crate::lease::call);

impl LeaseKind for Limiting {
    type Held = HeldPermit;

    const REFUSED_BY: RefusedBy = RefusedBy::ConcurrencyLimit;

    async fn acquire<K: Sync>(
        options: &LeaseOptions<K, Self>,
        key: &str,
    ) -> Result<Lease, Refusal> {
        let semaphore = options.client.semaphore(key, options.kind.permits());
        let semaphore = semaphore.options(options.lease.clone());
        let acquired = semaphore.acquire().await;
        if let Some(adaptive) = &options.kind.adaptive
            && matches!(
                acquired,
                Err(LockError::Busy { .. } | LockError::Timeout { .. })
            )
        {
            // The limit held a request back: it was binding.
            adaptive.held_back();
            adaptive.tick_if_due();
        }
        acquired.map_err(|err| {
            match &err {
                LockError::InvalidName(err) => {
                    tracing::debug!(semaphore = %distlock::logging::redacted(key), error = %err, "request key is not a valid semaphore name");
                }
                LockError::Store(err) => {
                    tracing::warn!(semaphore = %distlock::logging::redacted(key), error = %err, "concurrency limit store unavailable");
                }
                // A full limit is the layer's everyday answer; anything else is a `500`,
                // which the refusal logs at ERROR once.
                _ => {}
            }
            Refusal::concurrency_error(
                key,
                err,
                options.kind.full_status.status_code(),
                options.kind.retry_after,
            )
        })
    }

    fn held(handle: LeaseHandle) -> HeldPermit {
        HeldPermit::new(handle)
    }

    fn log_without_key(hint: Option<&'static str>, behaviour: MissingKey) {
        match behaviour {
            MissingKey::Allow => tracing::debug!(
                hint,
                "request without a concurrency-limit key; running it unlimited"
            ),
            MissingKey::Reject => tracing::debug!(
                hint,
                "request without a concurrency-limit key; answering 400"
            ),
        }
    }

    fn log_lost(key: &str, handle: &LeaseHandle) {
        tracing::warn!(semaphore = %distlock::logging::redacted(key), fence = handle.minted_fence(), reason = ?handle.lost_reason(), "permit lost while the handler ran");
    }

    fn observed<K>(options: &LeaseOptions<K, Self>, latency: std::time::Duration) {
        if let Some(adaptive) = &options.kind.adaptive {
            adaptive.record(latency);
            adaptive.tick_if_due();
        }
    }

    fn log_refused(refusal: &Refusal) {
        tracing::debug!(
            semaphore = refusal.key().map(|k| tracing::field::display(distlock::logging::redacted(k))),
            retry_after = refusal.retry_after_secs(),
            status = refusal.status().as_u16(),
            reason = refusal.reason().code(),
            detail = %refusal.detail(),
            "request refused"
        );
    }
}
