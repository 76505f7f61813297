use std::sync::Arc;
use std::time::Duration;

use distlock::{Client, MAX_PERMITS, MAX_TTL, MIN_TTL};
use tower::Layer;

use super::ConcurrencyLimit;
use crate::config_error::ConfigError;
use crate::extract::MissingKey;
use crate::refusal::{MakeRefusal, PlainText};

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
#[derive(Clone, Debug)]
pub(crate) struct Config<R> {
    pub(crate) client: Client,
    pub(crate) limit: u32,
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) full_status: FullStatus,
    pub(crate) retry_after: Duration,
    pub(crate) missing_key: MissingKey,
    /// Makes the responses the layer answers itself.
    pub(crate) refusal: R,
}

/// Applies the [`ConcurrencyLimit`] middleware: at most `limit` requests per key in flight at
/// once, across every replica; each holds a permit until its response body has been sent.
///
/// Defaults: permits with a 30 s ttl renewed while held, no waiting (`503` with
/// `Retry-After: 1` at once when full), no maximum hold, `400` for a request without a key.
///
/// ```
/// use std::time::Duration;
/// use axum::{Router, routing::get};
/// use distlock_tower::client_ip::ClientIp;
/// use distlock_tower::concurrency::{ConcurrencyLimitLayer, FullStatus};
///
/// // At most 4 requests in flight per client address, across every replica; others wait up
/// // to 2 s for a place, then get 429.
/// let client = distlock::Client::in_memory(); // Client::connect("redis://...") in production
/// let app: Router = Router::new().route("/report", get(|| async { "report" })).layer(
///     ConcurrencyLimitLayer::new(client, ClientIp::peer(), 4)
///         .ttl(Duration::from_secs(10))
///         .wait(Duration::from_secs(2))
///         .full_status(FullStatus::TooManyRequests),
/// );
/// ```
#[derive(Clone, Debug)]
#[must_use = "a layer does nothing until it wraps a service"]
pub struct ConcurrencyLimitLayer<K, R = PlainText> {
    config: Config<R>,
    extract: K,
}

impl<K> ConcurrencyLimitLayer<K> {
    /// At most `limit` requests in flight per key that `extract` finds (see
    /// [`extract`](crate::extract)), counted through `client` by every replica alike.
    ///
    /// # Panics
    /// If `limit` is 0 or above [`MAX_PERMITS`], or if `client`'s store cannot count holders
    /// (a Redlock quorum: see [`Capability::HolderSets`](distlock::Capability::HolderSets));
    /// [`try_new`](Self::try_new) returns the error instead.
    pub fn new(client: Client, extract: K, limit: u32) -> Self {
        Self::try_new(client, extract, limit)
            .unwrap_or_else(|err| panic!("ConcurrencyLimitLayer::new: {err}"))
    }

    /// [`new`](Self::new), or [`ConfigError::LimitOutOfRange`] for a limit of 0 or above
    /// [`MAX_PERMITS`], or [`ConfigError::UnsupportedStore`] when `client`'s store cannot
    /// count holders: refused here, where the router is built, rather than on every request.
    ///
    /// ```
    /// use distlock_tower::{ConcurrencyLimitLayer, ConfigError};
    /// use distlock_tower::extract::Constant;
    ///
    /// let client = distlock::Client::in_memory(); // a quorum client would be refused here
    /// let layer = ConcurrencyLimitLayer::try_new(client, Constant::new("exports"), 2);
    /// assert!(layer.is_ok());
    /// ```
    pub fn try_new(client: Client, extract: K, limit: u32) -> Result<Self, ConfigError> {
        if limit == 0 || limit > MAX_PERMITS {
            return Err(ConfigError::LimitOutOfRange {
                limit,
                max: MAX_PERMITS,
            });
        }
        client.supports(distlock::Capability::HolderSets)?;
        Ok(Self {
            config: Config {
                client,
                limit,
                ttl: distlock::DEFAULT_TTL,
                wait: Duration::ZERO,
                max_hold: None,
                full_status: FullStatus::default(),
                retry_after: distlock::http::STORE_RETRY_AFTER,
                missing_key: MissingKey::default(),
                refusal: PlainText,
            },
            extract,
        })
    }
}

impl<K, R> ConcurrencyLimitLayer<K, R> {
    /// Makes the responses the layer answers itself with `make`, as on the other layers (see
    /// [`refusal`](crate::refusal)).
    pub fn refusal<M: MakeRefusal>(self, make: M) -> ConcurrencyLimitLayer<K, M> {
        let Config {
            client,
            limit,
            ttl,
            wait,
            max_hold,
            full_status,
            retry_after,
            missing_key,
            refusal: _,
        } = self.config;
        ConcurrencyLimitLayer {
            config: Config {
                client,
                limit,
                ttl,
                wait,
                max_hold,
                full_status,
                retry_after,
                missing_key,
                refusal: make,
            },
            extract: self.extract,
        }
    }

    /// The permit's time to live in the store (default 30 s), renewed every ttl/3 while the
    /// request and its response body last: how long a replica that crashes mid-request keeps
    /// its permits.
    ///
    /// # Panics
    /// If `ttl` is outside [`MIN_TTL`]`..=`[`MAX_TTL`]; [`try_ttl`](Self::try_ttl) returns
    /// the error instead.
    pub fn ttl(self, ttl: Duration) -> Self {
        self.try_ttl(ttl)
            .unwrap_or_else(|err| panic!("ConcurrencyLimitLayer::ttl: {err}"))
    }

    /// [`ttl`](Self::ttl), or [`ConfigError::TtlOutOfRange`].
    pub fn try_ttl(mut self, ttl: Duration) -> Result<Self, ConfigError> {
        if !(MIN_TTL..=MAX_TTL).contains(&ttl) {
            return Err(ConfigError::TtlOutOfRange {
                ttl,
                min: MIN_TTL,
                max: MAX_TTL,
            });
        }
        self.config.ttl = ttl;
        Ok(self)
    }

    /// Waits up to `wait` for a permit before refusing the request (default zero: refuse at
    /// once), holding nothing of the inner service meanwhile; a request that gives its permit
    /// back wakes the waiters. `Duration::MAX` waits for ever.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.config.wait = wait;
        self
    }

    /// Stops renewing a permit once its request has held it this long, so a stuck handler
    /// or a very slow reader cannot keep a place for ever.
    ///
    /// # Panics
    /// If `max_hold` is zero; [`try_max_hold`](Self::try_max_hold) returns the error instead.
    pub fn max_hold(self, max_hold: Duration) -> Self {
        self.try_max_hold(max_hold)
            .unwrap_or_else(|err| panic!("ConcurrencyLimitLayer::max_hold: {err}"))
    }

    /// [`max_hold`](Self::max_hold), or [`ConfigError::ZeroMaxHold`].
    pub fn try_max_hold(mut self, max_hold: Duration) -> Result<Self, ConfigError> {
        if max_hold.is_zero() {
            return Err(ConfigError::ZeroMaxHold);
        }
        self.config.max_hold = Some(max_hold);
        Ok(self)
    }

    /// The status of a request refused because every permit of its key is taken: `503`
    /// (default) or `429`.
    pub fn full_status(mut self, status: FullStatus) -> Self {
        self.config.full_status = status;
        self
    }

    /// The `Retry-After` of a request refused because every permit is taken (default 1 s,
    /// sent in whole seconds, at least 1): when one frees depends on when some request in
    /// flight ends, which the layer does not know.
    pub fn retry_after(mut self, wait: Duration) -> Self {
        self.config.retry_after = wait;
        self
    }

    /// What a request without a key gets (default [`MissingKey::Reject`]: `400`); a request
    /// whose key is invalid is answered `400` whatever this says.
    pub fn on_missing_key(mut self, behaviour: MissingKey) -> Self {
        self.config.missing_key = behaviour;
        self
    }
}

impl<S, K: Clone, R: Clone> Layer<S> for ConcurrencyLimitLayer<K, R> {
    type Service = ConcurrencyLimit<S, K, R>;

    fn layer(&self, inner: S) -> Self::Service {
        ConcurrencyLimit::new(inner, Arc::new(self.config.clone()), self.extract.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(
        limit: u32,
    ) -> Result<ConcurrencyLimitLayer<crate::extract::PathSegment>, ConfigError> {
        ConcurrencyLimitLayer::try_new(Client::in_memory(), crate::extract::PathSegment(0), limit)
    }

    #[test]
    fn out_of_range_settings_are_typed_errors() {
        for limit in [0, MAX_PERMITS + 1, u32::MAX] {
            assert_eq!(
                layer(limit).err(),
                Some(ConfigError::LimitOutOfRange {
                    limit,
                    max: MAX_PERMITS
                })
            );
        }
        for limit in [1, MAX_PERMITS] {
            assert!(layer(limit).is_ok());
        }
        let ok = || layer(1).expect("valid");
        assert!(matches!(
            ok().try_ttl(Duration::ZERO),
            Err(ConfigError::TtlOutOfRange { .. })
        ));
        assert!(matches!(
            ok().try_max_hold(Duration::ZERO),
            Err(ConfigError::ZeroMaxHold)
        ));
        assert!(
            std::panic::catch_unwind(|| {
                ConcurrencyLimitLayer::new(Client::in_memory(), crate::extract::PathSegment(0), 0)
            })
            .is_err()
        );
    }
}
