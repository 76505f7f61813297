use std::sync::Arc;
use std::time::Duration;

use distlock::{Lease, LeaseHandle, LockError};

use super::layer::{Config, Locking};
use super::{HeldLock, ResponseBody, ResponseFuture};
use crate::extract::MissingKey;
use crate::lease::{LeaseKind, LeaseOptions};
use crate::refusal::{PlainText, Refusal, RefusedBy};

/// Middleware that runs each request under a distributed lock named by the request's key,
/// held until the response body has been sent. Built by [`LockLayer`](super::LockLayer).
///
/// Cheap to clone: the settings are shared. Readiness is the inner service's; the inner
/// service is called only once the lock is held. With a
/// [`wait`](super::LockLayerBuilder::wait), a request gives that readiness back before it
/// asks for the lock (so it holds no `ConcurrencyLimit` permit or `Buffer` slot while it
/// waits) and readies the service again once it holds the lock.
///
/// See the [module docs](super) for an example.
pub struct Lock<S, K, R = PlainText> {
    pub(crate) inner: S,
    pub(crate) config: Arc<Config<K, R>>,
}

impl_service!(Lock, crate::lease::call);

impl LeaseKind for Locking {
    type Held = HeldLock;

    const REFUSED_BY: RefusedBy = RefusedBy::Lock;

    async fn acquire<K: Sync>(
        options: &LeaseOptions<K, Self>,
        key: &str,
    ) -> Result<Lease, Refusal> {
        let lock = |wait: Duration| {
            options
                .client
                .lock(key)
                .options(options.lease_waiting(wait))
        };
        let result = match lock(options.lease.get_wait()).acquire().await {
            // A timed-out wait does not say how long the holder has left; one more try does,
            // and takes the lock if it has just come free.
            Err(LockError::Timeout { .. }) => lock(Duration::ZERO).acquire().await,
            other => other,
        };
        result.map_err(|err| {
            let busy = matches!(err, LockError::Busy { .. } | LockError::Timeout { .. });
            match &err {
                LockError::InvalidName(err) => {
                    tracing::debug!(lock = %distlock::logging::redacted(key), error = %err, "request key is not a valid lock name");
                }
                LockError::Store(err) => {
                    tracing::warn!(lock = %distlock::logging::redacted(key), error = %err, "lock store unavailable");
                }
                // Contention is the layer's everyday answer; anything else is a `500`, which
                // the refusal logs at ERROR once.
                _ => {}
            }
            let refusal = Refusal::lock_error(key, err, options.kind.busy_status.status_code());
            // The holder's remaining ttl bounds the wait, but a watchdog renews it long before
            // a short request ends: once this layer's requests have held their locks, tell
            // the longest of their latest holds instead when it is shorter.
            match options.holds.longest() {
                Some(longest) if busy => refusal.cap_retry_after(longest),
                _ => refusal,
            }
        })
    }

    fn held(handle: LeaseHandle) -> HeldLock {
        HeldLock::new(handle)
    }

    fn log_without_key(hint: Option<&'static str>, behaviour: MissingKey) {
        match behaviour {
            MissingKey::Allow => {
                tracing::debug!(hint, "request without a lock key; running it unlocked");
            }
            MissingKey::Reject => {
                tracing::debug!(hint, "request without a lock key; answering 400");
            }
        }
    }

    fn log_lost(key: &str, handle: &LeaseHandle) {
        tracing::warn!(lock = %distlock::logging::redacted(key), fence = handle.minted_fence(), reason = ?handle.lost_reason(), "lease lost while the handler ran");
    }

    fn log_refused(refusal: &Refusal) {
        tracing::debug!(
            lock = refusal.key().map(|k| tracing::field::display(distlock::logging::redacted(k))),
            retry_after = refusal.retry_after_secs(),
            status = refusal.status().as_u16(),
            reason = refusal.reason().code(),
            detail = %refusal.detail(),
            "request refused"
        );
    }
}
