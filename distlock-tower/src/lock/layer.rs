use std::sync::Arc;

use distlock::Client;

use super::Lock;
use crate::config_error::ConfigError;
use crate::lease::{LeaseConfig, LeaseOptions};
use crate::refusal::PlainText;

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
pub(crate) type Config<K, R> = LeaseConfig<K, Locking, R>;

/// What only the lock layer takes, besides the options it shares with the concurrency limit.
#[derive(Clone, Debug)]
pub(crate) struct Locking {
    pub(crate) busy_status: BusyStatus,
}

/// Applies the [`Lock`] middleware: each request takes a lock named by its key, held until
/// its response body has been sent.
///
/// [`new`](Self::new) gives the defaults: ttl 30 s renewed by the watchdog while held, no
/// waiting (`423 Locked` at once when busy), held at most 5 minutes, names under `http/`,
/// `400 Bad Request` for a request
/// without a key (and always for a request whose key is invalid). Anything else is set on
/// the [`builder`](Self::builder), whose [`build`](LockLayerBuilder::build) checks it all
/// at once and returns a [`ConfigError`] for a value the lock could never take (a ttl out
/// of range from a configuration file, say): nothing here panics.
///
/// ```
/// # fn main() -> Result<(), distlock_tower::ConfigError> {
/// use std::time::Duration;
/// use axum::{Router, routing::post};
/// use distlock_tower::extract::{Header, Prefixed};
/// use distlock_tower::lock::{BusyStatus, HeldLock, LockLayer};
///
/// async fn import(lock: HeldLock) -> Result<String, distlock::LockError> {
///     Ok(format!("importing under fence {}", lock.fence().await?))
/// }
///
/// // One import per tenant at a time, across every replica; others wait up to 5 s, then get
/// // 409 Conflict with Retry-After.
/// let client = distlock::Client::in_memory(); // Client::connect("redis://...") in production
/// let layer = LockLayer::builder(client, Prefixed::new("import:", Header::from_static("x-tenant")))
///     .ttl(Duration::from_secs(15))
///     .wait(Duration::from_secs(5))
///     .max_hold(Duration::from_secs(600))
///     .busy_status(BusyStatus::Conflict)
///     .build()?;
/// let app: Router = Router::new().route("/import", post(import)).route_layer(layer);
/// # Ok(()) }
/// ```
///
/// `R` makes the responses the layer answers itself (`423`, `503`, `400`): [`PlainText`]
/// unless the builder set another with [`refusal`](LockLayerBuilder::refusal). The
/// [module docs](super) show the responses.
#[must_use = "a layer does nothing until it wraps a service"]
pub struct LockLayer<K, R = PlainText> {
    pub(crate) config: Arc<Config<K, R>>,
}

impl_layer!(LockLayer => Lock);

impl<K> LockLayer<K> {
    /// Locks each request on the key `extract` finds in it (see
    /// [`extract`](crate::extract)), through `client`, with the default settings.
    ///
    /// The lock is named `http/<key>` (see the builder's
    /// [`namespace`](LockLayerBuilder::namespace)), so that no request can name a lock the
    /// application or the runtime takes for itself: a layer keyed `order:42` and
    /// `client.lock("http/order:42")` elsewhere (or
    /// `#[distributed_lock(key = "http/order:{id}")]`) exclude each other.
    pub fn new(client: Client, extract: K) -> Self {
        Self::builder(client, extract).into_layer()
    }

    /// A layer locking as [`new`](Self::new) does, with settings of your own: set them on the
    /// builder, then [`build`](LockLayerBuilder::build) it.
    pub fn builder(client: Client, extract: K) -> LockLayerBuilder<K> {
        let locking = Locking {
            busy_status: BusyStatus::default(),
        };
        LockLayerBuilder {
            config: LeaseOptions::defaults(client, extract, locking),
        }
    }
}

/// The settings of a [`LockLayer`], checked together by [`build`](Self::build). Made by
/// [`LockLayer::builder`]; consuming, as the runtime's builders.
#[must_use = "a builder does nothing until it is built"]
pub struct LockLayerBuilder<K, R = PlainText> {
    config: Config<K, R>,
}

impl<K, R> LockLayerBuilder<K, R> {
    lease_option_setters!(LockLayerBuilder, "lock");

    /// The status of a request refused because its lock is busy: `423 Locked` (default) or
    /// `409 Conflict`. Either comes with `Retry-After`: the holder's remaining ttl, whoever
    /// took the lock (this layer, `client.lock(..)`, the macro) and with whatever ttl; or,
    /// once this layer's requests have held their locks, the longest of their latest 16
    /// holds when that is shorter (a watchdog keeps a 30 s ttl alive for a request of
    /// milliseconds, and the client should not be told to wait 30 s).
    pub fn busy_status(mut self, status: BusyStatus) -> Self {
        self.config.options.kind.busy_status = status;
        self
    }

    /// Each request's lease mints its fence with the grant (an eager lease: see
    /// [`LockBuilder::fenced`](distlock::LockBuilder::fenced)), for handlers that all write
    /// under their fence. By default the fence is minted when the handler first asks for it
    /// (the [`fence`](distlock::LeaseHandle::fence) of its [`HeldLock`](super::HeldLock): one
    /// round trip while the lock is held), so a request that never asks pays nothing for it:
    /// its lock costs the store a plain `SET NX PX`, where an eager grant is a script that
    /// also reads the server's clock and writes the fence key.
    pub fn fenced(mut self, on: bool) -> Self {
        self.config.options.lease = self.config.options.lease.fenced(on);
        self
    }

    /// Requests waiting for one key are let in in the order they arrived, across every
    /// replica of the service (a fair lock: see
    /// [`LockBuilder::fair`](distlock::LockBuilder::fair)). Only with a
    /// [`wait`](Self::wait): a request that does not wait is refused while others queue.
    /// Every route locking the same names must say it too. Not on a Redlock quorum, where
    /// each request is refused with `503` (see the lock's documentation).
    pub fn fair(mut self, on: bool) -> Self {
        self.config.options.lease = self.config.options.lease.fair(on);
        self
    }

    /// Changes every request's lock options with `change`, starting from the layer's (its
    /// ttl, wait, watchdog and [`DEFAULT_MAX_HOLD`](crate::DEFAULT_MAX_HOLD) as set so far,
    /// and no patience with store errors, so a request is answered `503` at the first):
    /// any [`LockOptions`](distlock::LockOptions) setter, including those this builder has
    /// no setter of its own for (`min_hold`, `max_attempts`, `retry_backoff`, `replicas`,
    /// `identity`...). `build` checks the result as it checks every setting.
    ///
    /// ```
    /// # use distlock_tower::{LockLayer, extract::PathSegment};
    /// # let client = distlock::Client::in_memory();
    /// let layer = LockLayer::builder(client, PathSegment(1))
    ///     .lock_options(|options| options.min_hold(std::time::Duration::from_millis(500)))
    ///     .build()
    ///     .expect("valid");
    /// ```
    pub fn lock_options(
        mut self,
        change: impl FnOnce(distlock::LockOptions) -> distlock::LockOptions,
    ) -> Self {
        self.config.options.lease = change(std::mem::take(&mut self.config.options.lease));
        self
    }

    /// The layer, or the first setting it could not work with:
    /// [`ConfigError::TtlOutOfRange`] for a ttl outside
    /// [`MIN_TTL`](distlock::MIN_TTL)`..=`[`MAX_TTL`](distlock::MAX_TTL),
    /// [`ConfigError::ZeroMaxHold`] for a zero `max_hold`. A mistake is reported where the
    /// router is built, not as a failure of every request.
    pub fn build(self) -> Result<LockLayer<K, R>, ConfigError> {
        self.config.options.check()?;
        Ok(self.into_layer())
    }

    /// The layer, unchecked: for the defaults, which are valid.
    fn into_layer(self) -> LockLayer<K, R> {
        LockLayer {
            config: Arc::new(self.config),
        }
    }
}

impl_builder_debug!(LockLayerBuilder);

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use distlock::{MAX_TTL, MIN_TTL};

    use super::*;

    fn builder() -> LockLayerBuilder<crate::extract::PathSegment> {
        LockLayer::builder(Client::in_memory(), crate::extract::PathSegment(0))
    }

    #[test]
    fn out_of_range_settings_are_typed_errors() {
        for ttl in [
            Duration::ZERO,
            MIN_TTL / 2,
            MAX_TTL + Duration::from_secs(1),
        ] {
            assert_eq!(
                builder().ttl(ttl).build().err(),
                Some(ConfigError::TtlOutOfRange {
                    ttl,
                    min: MIN_TTL,
                    max: MAX_TTL
                }),
                "{ttl:?}"
            );
        }
        for ttl in [MIN_TTL, MAX_TTL] {
            assert_eq!(
                builder()
                    .ttl(ttl)
                    .build()
                    .map(|l| l.config.options.lease.get_ttl())
                    .ok(),
                Some(ttl)
            );
        }
        assert_eq!(
            builder().max_hold(Duration::ZERO).build().err(),
            Some(ConfigError::ZeroMaxHold)
        );
        let one = Duration::from_nanos(1);
        assert_eq!(
            builder().max_hold(one).build().ok().and_then(|l| l
                .config
                .options
                .lease
                .get_max_hold()),
            Some(one)
        );
    }

    /// `lock_options` starts from the layer's options and `build` checks what it sets as
    /// every other setting, naming the option.
    #[test]
    fn lock_options_change_the_layers_and_are_checked() {
        let second = Duration::from_secs(1);
        let layer = builder()
            .ttl(MAX_TTL)
            .lock_options(|options| options.min_hold(second).max_attempts(2))
            .build()
            .expect("valid");
        let lease = &layer.config.options.lease;
        assert_eq!(lease.get_min_hold(), Some(second));
        assert_eq!(lease.get_max_attempts(), Some(2));
        assert_eq!(lease.get_ttl(), MAX_TTL, "the setting before it is kept");
        assert_eq!(
            lease.get_max_hold(),
            Some(crate::DEFAULT_MAX_HOLD),
            "the layer's default is kept"
        );
        match builder().lock_options(|o| o.max_attempts(0)).build().err() {
            Some(ConfigError::InvalidSetting { setting, .. }) => {
                assert_eq!(setting, "max_attempts");
            }
            other => panic!("expected max_attempts to be refused, got {other:?}"),
        }
    }

    /// Every value a configuration file can hold is answered, never a panic: the checked
    /// settings over their whole range, and the unchecked ones at their extremes.
    #[test]
    fn no_setting_panics() {
        for d in [
            Duration::ZERO,
            Duration::from_nanos(1),
            MIN_TTL,
            MAX_TTL,
            Duration::MAX,
        ] {
            let built = std::panic::catch_unwind(|| {
                builder()
                    .ttl(d)
                    .wait(d)
                    .max_hold(d)
                    .watchdog(false)
                    .busy_status(BusyStatus::Conflict)
                    .fenced(true)
                    .fair(true)
                    .build()
                    .is_ok()
            });
            assert!(built.is_ok(), "{d:?} panicked");
        }
    }
}
