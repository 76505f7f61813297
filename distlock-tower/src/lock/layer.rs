use std::sync::Arc;
use std::time::Duration;

use distlock::{Client, MAX_TTL, MIN_TTL};
use tower::Layer;

use super::Lock;
use crate::config_error::ConfigError;
use crate::extract::MissingKey;
use crate::refusal::{MakeRefusal, PlainText};

/// The status of a request refused because another request holds its lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum BusyStatus {
    /// `423 Locked` (WebDAV, RFC 4918): the resource is locked. The default.
    #[default]
    Locked,
    /// `409 Conflict`, for clients that only know the core status codes.
    Conflict,
}

impl BusyStatus {
    pub(crate) fn status_code(self) -> http::StatusCode {
        match self {
            Self::Locked => http::StatusCode::LOCKED,
            Self::Conflict => http::StatusCode::CONFLICT,
        }
    }
}

/// The settings every service of one layer shares.
#[derive(Clone, Debug)]
pub(crate) struct Config<R> {
    pub(crate) client: Client,
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    pub(crate) watchdog: bool,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) busy_status: BusyStatus,
    pub(crate) missing_key: MissingKey,
    /// Makes the responses the layer answers itself.
    pub(crate) refusal: R,
}

/// Applies the [`Lock`] middleware: each request takes a lock named by its key, held until
/// its response body has been sent.
///
/// Defaults: ttl 30 s renewed by the watchdog while held, no waiting (`423 Locked` at once
/// when busy), no maximum hold, `400 Bad Request` for a request without a key (and always
/// for a request whose key is invalid).
///
/// ```
/// use std::time::Duration;
/// use axum::{Router, routing::post};
/// use distlock_tower::extract::{Header, Prefixed};
/// use distlock_tower::lock::{BusyStatus, HeldLock, LockLayer};
///
/// async fn import(lock: HeldLock) -> String {
///     format!("importing under fence {}", lock.fence())
/// }
///
/// // One import per tenant at a time, across every replica; others wait up to 5 s, then get
/// // 409 Conflict with Retry-After.
/// let client = distlock::Client::in_memory(); // Client::connect("redis://...") in production
/// let app: Router = Router::new().route("/import", post(import)).route_layer(
///     LockLayer::new(client, Prefixed::new("import:", Header::from_static("x-tenant")))
///         .ttl(Duration::from_secs(15))
///         .wait(Duration::from_secs(5))
///         .max_hold(Duration::from_secs(600))
///         .busy_status(BusyStatus::Conflict),
/// );
/// ```
///
/// `R` makes the responses the layer answers itself (`423`, `503`, `400`): [`PlainText`]
/// unless you set another with [`refusal`](Self::refusal). The [module docs](super) show the
/// responses.
#[derive(Clone, Debug)]
#[must_use = "a layer does nothing until it wraps a service"]
pub struct LockLayer<K, R = PlainText> {
    config: Config<R>,
    extract: K,
}

impl<K> LockLayer<K> {
    /// Locks each request on the key `extract` finds in it (see
    /// [`extract`](crate::extract)), through `client`.
    ///
    /// The key is the lock name as it is: a layer keyed `order:42` and
    /// `client.lock("order:42")` elsewhere (or `#[distributed_lock(key = "order:{id}")]`)
    /// exclude each other. Use [`Prefixed`](crate::extract::Prefixed) to keep names apart.
    pub fn new(client: Client, extract: K) -> Self {
        Self {
            config: Config {
                client,
                ttl: distlock::DEFAULT_TTL,
                wait: Duration::ZERO,
                watchdog: true,
                max_hold: None,
                busy_status: BusyStatus::default(),
                missing_key: MissingKey::default(),
                refusal: PlainText,
            },
            extract,
        }
    }
}

impl<K, R> LockLayer<K, R> {
    /// Makes the responses the layer answers itself with `make`: a closure
    /// `Fn(&Refusal) -> Response<B>`, [`ProblemDetails`](crate::refusal::ProblemDetails) for
    /// RFC 9457 JSON, or your own [`MakeRefusal`]. The default, [`PlainText`], answers a short
    /// `text/plain` sentence.
    ///
    /// Whatever `make` returns, the layer adds `Retry-After` if it is missing and the
    /// [`Refusal`](crate::refusal::Refusal) to the response's extensions; see
    /// [`refusal`](crate::refusal).
    pub fn refusal<M: MakeRefusal>(self, make: M) -> LockLayer<K, M> {
        let Config {
            client,
            ttl,
            wait,
            watchdog,
            max_hold,
            busy_status,
            missing_key,
            refusal: _,
        } = self.config;
        LockLayer {
            config: Config {
                client,
                ttl,
                wait,
                watchdog,
                max_hold,
                busy_status,
                missing_key,
                refusal: make,
            },
            extract: self.extract,
        }
    }

    /// The lease's time to live in the store (default 30 s). With the watchdog on it is renewed
    /// every ttl/3, so it only bounds how long a crashed server keeps the lock. A request
    /// refused because another holds the lock is told the *holder's* remaining ttl in
    /// `Retry-After`, whoever took it and with whatever ttl.
    ///
    /// # Panics
    /// If `ttl` is outside [`MIN_TTL`]`..=`[`MAX_TTL`]: a configuration mistake is reported when
    /// the router is built, not as a failure of every request. [`try_ttl`](Self::try_ttl)
    /// returns the error instead.
    pub fn ttl(self, ttl: Duration) -> Self {
        self.try_ttl(ttl)
            .unwrap_or_else(|err| panic!("LockLayer::ttl: {err}"))
    }

    /// [`ttl`](Self::ttl), or [`ConfigError::TtlOutOfRange`] if `ttl` is outside
    /// [`MIN_TTL`]`..=`[`MAX_TTL`].
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

    /// Waits up to `wait` for a busy lock before refusing the request (default zero: refuse at
    /// once). Waiters are woken one at a time as the holder releases, so requests on one key
    /// are served one after another. The request's own timeout, if any, still applies.
    ///
    /// With a wait, a request gives back the inner service's readiness (a `ConcurrencyLimit`
    /// permit, say) before it asks for the lock, and readies the service again once it holds
    /// it: a request waiting for one key never keeps requests on other keys out.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.config.wait = wait;
        self
    }

    /// Renews the lease while the request runs (default on). Off, the lease simply expires
    /// after its ttl, and a handler still running then is answered as described in the
    /// [module docs](super#when-the-lease-is-lost).
    pub fn watchdog(mut self, on: bool) -> Self {
        self.config.watchdog = on;
        self
    }

    /// Stops renewing once a request has held its lock this long, so a stuck handler or a
    /// client reading a stream very slowly cannot keep the lock for ever.
    ///
    /// # Panics
    /// If `max_hold` is zero; [`try_max_hold`](Self::try_max_hold) returns the error instead.
    pub fn max_hold(self, max_hold: Duration) -> Self {
        self.try_max_hold(max_hold)
            .unwrap_or_else(|err| panic!("LockLayer::max_hold: {err}"))
    }

    /// [`max_hold`](Self::max_hold), or [`ConfigError::ZeroMaxHold`] if `max_hold` is zero.
    pub fn try_max_hold(mut self, max_hold: Duration) -> Result<Self, ConfigError> {
        if max_hold.is_zero() {
            return Err(ConfigError::ZeroMaxHold);
        }
        self.config.max_hold = Some(max_hold);
        Ok(self)
    }

    /// The status of a request refused because its lock is busy: `423 Locked` (default) or
    /// `409 Conflict`. Either comes with `Retry-After`.
    pub fn busy_status(mut self, status: BusyStatus) -> Self {
        self.config.busy_status = status;
        self
    }

    /// What a request without a key gets (default [`MissingKey::Reject`]: `400`). A request
    /// whose key is [invalid](crate::extract::Extracted::Invalid) (a key header sent twice,
    /// over-long, not text) is answered `400` whatever this says, so that no request runs
    /// unlocked by malforming its key.
    pub fn on_missing_key(mut self, behaviour: MissingKey) -> Self {
        self.config.missing_key = behaviour;
        self
    }
}

impl<S, K: Clone, R: Clone> Layer<S> for LockLayer<K, R> {
    type Service = Lock<S, K, R>;

    fn layer(&self, inner: S) -> Self::Service {
        Lock::new(inner, Arc::new(self.config.clone()), self.extract.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer() -> LockLayer<crate::extract::PathSegment> {
        LockLayer::new(Client::in_memory(), crate::extract::PathSegment(0))
    }

    #[test]
    fn out_of_range_settings_are_typed_errors() {
        for ttl in [
            Duration::ZERO,
            MIN_TTL / 2,
            MAX_TTL + Duration::from_secs(1),
        ] {
            assert_eq!(
                layer().try_ttl(ttl).err(),
                Some(ConfigError::TtlOutOfRange {
                    ttl,
                    min: MIN_TTL,
                    max: MAX_TTL
                }),
                "{ttl:?}"
            );
        }
        for ttl in [MIN_TTL, MAX_TTL] {
            assert_eq!(layer().try_ttl(ttl).map(|l| l.config.ttl).ok(), Some(ttl));
        }
        assert_eq!(
            layer().try_max_hold(Duration::ZERO).err(),
            Some(ConfigError::ZeroMaxHold)
        );
        let one = Duration::from_nanos(1);
        assert_eq!(
            layer()
                .try_max_hold(one)
                .ok()
                .and_then(|l| l.config.max_hold),
            Some(one)
        );
    }

    #[test]
    fn the_unchecked_forms_still_panic() {
        assert!(std::panic::catch_unwind(|| layer().ttl(Duration::ZERO)).is_err());
        assert!(std::panic::catch_unwind(|| layer().max_hold(Duration::ZERO)).is_err());
    }
}
