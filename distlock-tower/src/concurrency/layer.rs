use std::sync::Arc;
use std::time::Duration;

use distlock::adaptive::AdaptiveLimit;
use distlock::{Client, MAX_PERMITS};

use super::ConcurrencyLimit;
use crate::config_error::ConfigError;
use crate::lease::{LeaseConfig, LeaseOptions};
use crate::refusal::PlainText;

/// The status of a request refused because its key has every permit taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FullStatus {
    /// `503 Service Unavailable`: the service is at capacity. The default, as load shedders
    /// answer.
    #[default]
    ServiceUnavailable,
    /// `429 Too Many Requests`, for a limit per client (keyed by its address or API key).
    TooManyRequests,
}

impl FullStatus {
    pub(crate) fn status_code(self) -> http::StatusCode {
        match self {
            Self::ServiceUnavailable => http::StatusCode::SERVICE_UNAVAILABLE,
            Self::TooManyRequests => http::StatusCode::TOO_MANY_REQUESTS,
        }
    }
}

/// The settings every service of one layer shares.
pub(crate) type Config<K, R> = LeaseConfig<K, Limiting, R>;

/// What only the concurrency limit takes, besides the options it shares with the lock layer.
#[derive(Clone, Debug)]
pub(crate) struct Limiting {
    pub(crate) limit: u32,
    /// A limit that follows latency, shared by every replica, instead of `limit`.
    pub(crate) adaptive: Option<AdaptiveLimit>,
    pub(crate) full_status: FullStatus,
    pub(crate) retry_after: Duration,
}

impl Limiting {
    /// The permits of a key's semaphore now.
    pub(crate) fn permits(&self) -> u32 {
        self.adaptive
            .as_ref()
            .map_or(self.limit, AdaptiveLimit::current)
    }
}

/// Applies the [`ConcurrencyLimit`] middleware: at most `limit` requests per key in flight at
/// once, across every replica; each holds a permit until its response body has been sent.
///
/// [`new`](Self::new) gives the defaults: permits with a 30 s ttl renewed while held, no
/// waiting (`503` with `Retry-After: 1` at once when full), no maximum hold, `400` for a
/// request without a key. Anything else is set on the [`builder`](Self::builder). Both check
/// the settings at once and return a [`ConfigError`] for a limit or a ttl the semaphore could
/// never take, or a client whose store cannot count permits (a Redlock quorum): nothing here
/// panics.
///
/// ```
/// # fn main() -> Result<(), distlock_tower::ConfigError> {
/// use std::time::Duration;
/// use axum::{Router, routing::get};
/// use distlock_tower::client_ip::ClientIp;
/// use distlock_tower::concurrency::{ConcurrencyLimitLayer, FullStatus};
///
/// // At most 4 requests in flight per client address, across every replica; others wait up
/// // to 2 s for a place, then get 429.
/// let client = distlock::Client::in_memory(); // Client::connect("redis://...") in production
/// let layer = ConcurrencyLimitLayer::builder(client, ClientIp::peer(), 4)
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_secs(2))
///     .full_status(FullStatus::TooManyRequests)
///     .build()?;
/// let app: Router = Router::new().route("/report", get(|| async { "report" })).layer(layer);
/// # Ok(()) }
/// ```
#[must_use = "a layer does nothing until it wraps a service"]
pub struct ConcurrencyLimitLayer<K, R = PlainText> {
    pub(crate) config: Arc<Config<K, R>>,
}

impl_layer!(ConcurrencyLimitLayer => ConcurrencyLimit);

impl<K> ConcurrencyLimitLayer<K> {
    /// At most `limit` requests in flight per key that `extract` finds (see
    /// [`extract`](crate::extract)), counted through `client` by every replica alike, with
    /// the default settings.
    ///
    /// # Errors
    /// As [`build`](ConcurrencyLimitLayerBuilder::build): a limit of 0 or above
    /// [`MAX_PERMITS`], or a store that cannot count permits.
    pub fn new(client: Client, extract: K, limit: u32) -> Result<Self, ConfigError> {
        Self::builder(client, extract, limit).build()
    }

    /// A layer limiting as [`new`](Self::new) does, with settings of your own: set them on
    /// the builder, then [`build`](ConcurrencyLimitLayerBuilder::build) it.
    pub fn builder(client: Client, extract: K, limit: u32) -> ConcurrencyLimitLayerBuilder<K> {
        let limiting = Limiting {
            limit,
            adaptive: None,
            full_status: FullStatus::default(),
            retry_after: distlock::http::STORE_RETRY_AFTER,
        };
        ConcurrencyLimitLayerBuilder {
            config: LeaseOptions::defaults(client, extract, limiting),
        }
    }
}

/// The settings of a [`ConcurrencyLimitLayer`], checked together by [`build`](Self::build).
/// Made by [`ConcurrencyLimitLayer::builder`]; consuming, as the runtime's builders.
#[must_use = "a builder does nothing until it is built"]
pub struct ConcurrencyLimitLayerBuilder<K, R = PlainText> {
    config: Config<K, R>,
}

impl<K, R> ConcurrencyLimitLayerBuilder<K, R> {
    lease_option_setters!(ConcurrencyLimitLayerBuilder, "permit");

    /// The status of a request refused because every permit of its key is taken: `503`
    /// (default) or `429`.
    pub fn full_status(mut self, status: FullStatus) -> Self {
        self.config.options.kind.full_status = status;
        self
    }

    /// Lets the limit follow latency, shared by every replica: `limit` (see
    /// [`distlock::adaptive`]) replaces the fixed one as every key's number of permits. The
    /// layer tells it each request's latency (from the permit to the response head) and each
    /// request it held back, and lets it vote once per window. With a per-client key, each
    /// client gets the whole (shared) limit; protecting one backend, use a
    /// [`Constant`](crate::extract::Constant) key.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use distlock_tower::concurrency::ConcurrencyLimitLayer;
    /// use distlock_tower::extract::Constant;
    ///
    /// let client = distlock::Client::in_memory(); // Client::connect("redis://...") in production
    /// let limit = client
    ///     .adaptive_limit("search-backend")
    ///     .initial(32)
    ///     .bounds(4, 512)
    ///     .window(Duration::from_millis(500))
    ///     .build()?;
    /// let layer = ConcurrencyLimitLayer::builder(client, Constant::from_static("search"), 32)
    ///     .adaptive(limit)
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok(()) }
    /// ```
    pub fn adaptive(mut self, limit: AdaptiveLimit) -> Self {
        self.config.options.kind.adaptive = Some(limit);
        self
    }

    /// The `Retry-After` of a request refused because every permit is taken (default 1 s,
    /// sent in whole seconds, at least 1): when one frees depends on when some request in
    /// flight ends, which the layer does not know.
    pub fn retry_after(mut self, wait: Duration) -> Self {
        self.config.options.kind.retry_after = wait;
        self
    }

    /// The layer, or the first setting it could not work with:
    /// [`ConfigError::LimitOutOfRange`] for a limit of 0 (every request refused) or above
    /// [`MAX_PERMITS`], [`ConfigError::TtlOutOfRange`], [`ConfigError::ZeroMaxHold`], or
    /// [`ConfigError::UnsupportedStore`] for a client on a Redlock quorum, whose
    /// majorities of independent primaries do not bound how many hold at once.
    pub fn build(self) -> Result<ConcurrencyLimitLayer<K, R>, ConfigError> {
        let limit = self.config.options.kind.limit;
        if limit == 0 || limit > MAX_PERMITS {
            return Err(ConfigError::LimitOutOfRange {
                limit,
                max: MAX_PERMITS,
            });
        }
        self.config.options.check()?;
        check_store(&self.config.options.client)?;
        Ok(ConcurrencyLimitLayer {
            config: Arc::new(self.config),
        })
    }
}

/// Refuses a store that keeps no holder sets, so cannot serve a semaphore (a Redlock quorum
/// without a counting store): the runtime would refuse every permit of such a client at
/// `acquire`, so every request would be a `500`.
fn check_store(client: &Client) -> Result<(), ConfigError> {
    client.supports(distlock::Capability::HolderSets)?;
    Ok(())
}

impl_builder_debug!(ConcurrencyLimitLayerBuilder);

#[cfg(test)]
mod tests {
    use super::*;

    fn builder(limit: u32) -> ConcurrencyLimitLayerBuilder<crate::extract::PathSegment> {
        ConcurrencyLimitLayer::builder(Client::in_memory(), crate::extract::PathSegment(0), limit)
    }

    #[test]
    fn out_of_range_settings_are_typed_errors() {
        for limit in [0, MAX_PERMITS + 1, u32::MAX] {
            assert_eq!(
                builder(limit).build().err(),
                Some(ConfigError::LimitOutOfRange {
                    limit,
                    max: MAX_PERMITS
                })
            );
            assert!(
                ConcurrencyLimitLayer::new(
                    Client::in_memory(),
                    crate::extract::PathSegment(0),
                    limit
                )
                .is_err(),
                "the obvious call refuses {limit} too"
            );
        }
        for limit in [1, MAX_PERMITS] {
            assert!(builder(limit).build().is_ok());
        }
        assert!(matches!(
            builder(1).ttl(Duration::ZERO).build(),
            Err(ConfigError::TtlOutOfRange { .. })
        ));
        assert!(matches!(
            builder(1).max_hold(Duration::ZERO).build(),
            Err(ConfigError::ZeroMaxHold)
        ));
    }
}
