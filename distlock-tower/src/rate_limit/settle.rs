//! Costs settled after the response ([`RateLimitLayerBuilder::settle`]): a request is charged
//! its cost up front, and once its response body has been sent (or dropped) the layer's
//! settle function says what it really cost; the difference is refunded or charged.
//!
//! [`RateLimitLayerBuilder::settle`]: super::RateLimitLayerBuilder::settle

use std::sync::Arc;
use std::time::Duration;

use distlock::ratelimit::RateLimiter;
use http::StatusCode;
use tokio::time::Instant;

/// What a passed request's response turned out to be, for the layer's settle function
/// ([`RateLimitLayerBuilder::settle`](super::RateLimitLayerBuilder::settle)), which returns
/// what the request really costs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settlement {
    /// The response's status.
    pub status: StatusCode,
    /// The bytes of response body sent (data frames polled by the server).
    pub body_bytes: u64,
    /// From the check's grant until the body ended or was dropped.
    pub elapsed: Duration,
    /// What the request was charged up front (the layer's cost, or `cost_by`'s).
    pub charged: u32,
    /// Whether the body was sent to its end; `false` when it was dropped first (the client
    /// went away) or failed.
    pub completed: bool,
}

/// The settle function of a layer.
pub(crate) type SettleFn = Arc<dyn Fn(&Settlement) -> u32 + Send + Sync>;

/// What a response was charged, and what settles it.
pub(crate) struct Charge {
    pub(crate) limiter: RateLimiter,
    pub(crate) subject: String,
    pub(crate) settle: SettleFn,
    pub(crate) status: StatusCode,
    pub(crate) charged: u32,
    pub(crate) started: Instant,
}

/// The pending settlement of one response; settles once, when the body ends, fails or is
/// dropped.
pub(crate) struct Settler {
    charge: Charge,
    bytes: u64,
    done: bool,
}

impl Settler {
    pub(crate) fn new(charge: Charge) -> Self {
        Self {
            charge,
            bytes: 0,
            done: false,
        }
    }

    /// Counts body bytes sent.
    pub(crate) fn sent(&mut self, bytes: usize) {
        self.bytes = self.bytes.saturating_add(bytes as u64);
    }

    /// Settles now (once): asks the settle function, then refunds or charges the difference
    /// in the background, so the response is never held up by it.
    pub(crate) fn finish(&mut self, completed: bool) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let settlement = Settlement {
            status: self.charge.status,
            body_bytes: self.bytes,
            elapsed: self.charge.started.elapsed(),
            charged: self.charge.charged,
            completed,
        };
        let cost = (self.charge.settle)(&settlement);
        if cost == self.charge.charged {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                subject = %distlock::logging::redacted(&self.charge.subject),
                "rate-limit settlement dropped outside a Tokio runtime; the up-front cost stands"
            );
            return;
        };
        let limiter = self.charge.limiter.clone();
        let subject = std::mem::take(&mut self.charge.subject);
        let charged = self.charge.charged;
        runtime.spawn(async move {
            let settled = if cost < charged {
                limiter.refund(&subject, charged - cost).await
            } else {
                limiter.penalize(&subject, cost - charged).await
            };
            match settled {
                Ok(_) => tracing::debug!(subject = %distlock::logging::redacted(&subject), charged, cost, "rate-limit cost settled"),
                Err(err) => tracing::warn!(
                    subject = %distlock::logging::redacted(&subject),
                    charged,
                    cost,
                    error = %err,
                    "could not settle a rate-limit cost; the up-front cost stands"
                ),
            }
        });
    }
}

impl Drop for Settler {
    /// A body dropped before its end (the client went away) settles as not completed.
    fn drop(&mut self) {
        self.finish(false);
    }
}
