//! The layers' settings from a configuration file (feature `serde`): where the key comes
//! from, what a request without one gets, the cost, the lease's timing and the status codes,
//! as a service keeps them next to its [`distlock::config`] settings.
//!
//! Each type deserialises from a table whose fields are its builder's options with the same
//! names, every one optional but the key (and a concurrency layer's `limit`); durations are
//! text (`"250ms"`, `"1h 30min"`, `"forever"` for `wait`); an unknown field is an error. The
//! key is a table whose `from` names the extractor, with that extractor's settings:
//!
//! | `from` | settings | extractor |
//! |---|---|---|
//! | `"client-ip"` | `trusted_proxies` (CIDRs, default none), `header` (`"x-forwarded-for"` or `"forwarded"`), `ipv4_prefix`, `ipv6_prefix`, `trust_every_address` and `allow_zero_prefix` (to take `0.0.0.0/0` or a 0-bit prefix, refused otherwise) | [`ClientIp`] |
//! | `"header"` | `name` | [`Header`] |
//! | `"path-segment"` | `index` (from 0) | [`PathSegment`] |
//! | `"matched-path"` | | [`MatchedPath`](crate::extract::MatchedPath) (feature `axum`) |
//! | `"constant"` | `value` | [`Constant`] |
//!
//! A layer's `key_prefix`, if set, goes before every key ([`Prefixed`]). A key the extractor
//! could never take (a `constant` key that is empty or over [`MAX_KEY_LEN`](crate::extract::MAX_KEY_LEN)
//! bytes, a header `name` that is not one or is over
//! [`MAX_HEADER_NAME_LEN`](crate::extract::MAX_HEADER_NAME_LEN) bytes) is refused when the
//! settings are read. `layer(..)` builds the layer through its builder, so a value out of
//! range is the builder's own [`ConfigError`], never a panic.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use distlock::ratelimit::{Policy, Rate};
//! use distlock_tower::config::{LockLayerConfig, RateLimitLayerConfig};
//!
//! let api: RateLimitLayerConfig = toml::from_str(
//!     r#"
//!     key = { from = "client-ip", trusted_proxies = ["10.0.0.0/8"] }
//!     cost = 2
//!     on_missing_key = "reject"
//!     "#,
//! )?;
//! let settle: LockLayerConfig = toml::from_str(
//!     r#"
//!     key = { from = "path-segment", index = 1 }
//!     key_prefix = "order:"
//!     ttl = "10s"
//!     wait = "2s"
//!     busy_status = "conflict"
//!     "#,
//! )?;
//!
//! let client = distlock::Client::in_memory();
//! let limiter = client
//!     .rate_limiter(Policy::gcra("api", Rate::per_second(100)?.burst(20)?)?)
//!     .build()?;
//! let api = api.layer(limiter)?;
//! let settle = settle.layer(client)?;
//! # let _ = (api, settle);
//! # Ok(()) }
//! ```
//!
//! # In the same file as the client
//!
//! A service usually keeps the layers' settings in the file that holds distlock's own: one
//! type for the file, read once. A format's error `Display` quotes the offending lines of the
//! text (for a table, all of it); say where with the error's span instead, as
//! [`Location::of`](distlock::config::Location::of) counts it, and its message alone:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use distlock::config::{Config, Location};
//! use distlock_tower::config::RateLimitLayerConfig;
//! use serde::Deserialize;
//!
//! /// The service's file: distlock's settings under `[distlock]`, the layers' under `[layers]`.
//! #[derive(Deserialize)]
//! struct ServiceFile {
//!     distlock: Config,
//!     layers: Layers,
//! }
//!
//! #[derive(Deserialize)]
//! struct Layers {
//!     api: RateLimitLayerConfig,
//! }
//!
//! /// `file:line:column: message`, without the text.
//! fn read(path: &str, text: &str) -> Result<ServiceFile, String> {
//!     toml::from_str(text).map_err(|err: toml::de::Error| match err.span() {
//!         Some(span) => {
//!             let at = Location::of(text, span.start);
//!             format!("{path}:{}:{}: {}", at.line, at.column, err.message())
//!         }
//!         None => format!("{path}: {}", err.message()),
//!     })
//! }
//!
//! let text = r#"
//! [distlock.client]
//! memory = true                 # url = "redis://cache:6379/" in production
//!
//! [distlock.limiters.api]
//! policies = "100/s burst 20"
//!
//! [layers.api]
//! key = { from = "header", name = "x-api-key" }
//! cost = 2
//! "#;
//! let file = read("service.toml", text)?;
//! let client = file.distlock.connect().await?;
//! let limiter = file.distlock.limiter(&client, "api")?;
//! let api = file.layers.api.layer(limiter)?;
//! # let _ = api;
//!
//! let err = read("service.toml", &text.replace("cost = 2", "cots = 2")).err().unwrap_or_default();
//! assert!(err.starts_with("service.toml:10:1: unknown field `cots`"), "{err}");
//! assert!(!err.contains("x-api-key"), "the text is not quoted: {err}");
//! # Ok(()) }
//! ```

use std::time::Duration;

use distlock::{Client, ratelimit::RateLimiter};
use http::Request;
use serde::{Deserialize, Serialize};

use crate::ConfigError;
use crate::client_ip::{Cidr, ClientIp, ForwardedHeader};
use crate::concurrency::{ConcurrencyLimitLayer, FullStatus};
use crate::extract::{Constant, ExtractKey, Extracted, Header, MissingKey, PathSegment, Prefixed};
use crate::lock::{BusyStatus, LockLayer};
use crate::rate_limit::RateLimitLayer;

/// Where a layer's key comes from: a table whose `from` names the extractor, with its
/// settings (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(tag = "from", rename_all = "kebab-case", deny_unknown_fields)]
#[non_exhaustive]
pub enum KeyConfig {
    /// The client's IP address ([`ClientIp`]).
    ClientIp {
        /// The proxies whose forwarded hops are believed (default none: the peer is the
        /// client).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        trusted_proxies: Vec<Cidr>,
        /// The header those proxies write (default `x-forwarded-for`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        header: Option<ForwardedHeader>,
        /// Leading bits of an IPv4 address that make one client (default 32).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ipv4_prefix: Option<u8>,
        /// Leading bits of an IPv6 address that make one client (default 64).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ipv6_prefix: Option<u8>,
        /// Take a network of every address among `trusted_proxies` (`0.0.0.0/0`), which lets
        /// any client choose its own address (default `false`: refused).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        trust_every_address: bool,
        /// Take a prefix of 0 bits, which makes every client one key (default `false`:
        /// refused).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        allow_zero_prefix: bool,
    },
    /// A request header's value ([`Header`]).
    Header {
        /// The header's name.
        #[serde(deserialize_with = "header_name")]
        name: String,
    },
    /// One segment of the request's path, from 0 ([`PathSegment`]).
    PathSegment {
        /// Which segment.
        index: usize,
    },
    /// The route template the request matched ([`MatchedPath`](crate::extract::MatchedPath)).
    #[cfg(feature = "axum")]
    MatchedPath {},
    /// The same key for every request ([`Constant`]): one budget or lock for all.
    Constant {
        /// The key.
        #[serde(deserialize_with = "constant_key")]
        value: String,
    },
}

/// A header name, refused when read if [`Header::new`] would refuse it.
fn header_name<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let name = String::deserialize(deserializer)?;
    Header::new(&name).map_err(serde::de::Error::custom)?;
    Ok(name)
}

/// A constant key, refused when read if [`Constant::new`] would refuse it.
fn constant_key<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let value = String::deserialize(deserializer)?;
    Constant::new(value.as_str()).map_err(serde::de::Error::custom)?;
    Ok(value)
}

impl KeyConfig {
    /// The extractor, `prefix` (if any) before every key, or the [`ConfigError`] of a
    /// header name or address prefix it cannot take.
    pub fn extractor(&self, prefix: Option<&str>) -> Result<ConfiguredKey, ConfigError> {
        let key = match self {
            Self::ClientIp {
                trusted_proxies,
                header,
                ipv4_prefix,
                ipv6_prefix,
                trust_every_address,
                allow_zero_prefix,
            } => {
                let mut builder = ClientIp::builder().trusting(trusted_proxies.iter().copied());
                if *trust_every_address {
                    builder = builder.trust_every_address();
                }
                if *allow_zero_prefix {
                    builder = builder.allow_zero_prefix();
                }
                if let Some(header) = header {
                    builder = builder.header(*header);
                }
                if let Some(bits) = ipv4_prefix {
                    builder = builder.ipv4_prefix(*bits);
                }
                if let Some(bits) = ipv6_prefix {
                    builder = builder.ipv6_prefix(*bits);
                }
                Source::ClientIp(builder.build()?)
            }
            Self::Header { name } => Source::Header(Header::new(name)?),
            Self::PathSegment { index } => Source::PathSegment(PathSegment(*index)),
            #[cfg(feature = "axum")]
            Self::MatchedPath {} => Source::MatchedPath(crate::extract::MatchedPath),
            Self::Constant { value } => Source::Constant(Constant::new(value.as_str())?),
        };
        Ok(ConfiguredKey(Prefixed::new(
            prefix.unwrap_or_default(),
            key,
        )))
    }
}

/// The key extractor a [`KeyConfig`] names; the layers built from a configuration use it.
#[derive(Debug, Clone)]
pub struct ConfiguredKey(Prefixed<Source>);

#[derive(Debug, Clone)]
enum Source {
    ClientIp(ClientIp),
    Header(Header),
    PathSegment(PathSegment),
    #[cfg(feature = "axum")]
    MatchedPath(crate::extract::MatchedPath),
    Constant(Constant),
}

impl<B> ExtractKey<B> for Source {
    fn extract_key(&self, request: &Request<B>) -> Extracted {
        match self {
            Self::ClientIp(k) => k.extract_key(request),
            Self::Header(k) => k.extract_key(request),
            Self::PathSegment(k) => k.extract_key(request),
            #[cfg(feature = "axum")]
            Self::MatchedPath(k) => ExtractKey::<B>::extract_key(k, request),
            Self::Constant(k) => k.extract_key(request),
        }
    }

    fn absent_hint(&self) -> Option<&'static str> {
        match self {
            Self::ClientIp(k) => ExtractKey::<B>::absent_hint(k),
            _ => None,
        }
    }
}

impl<B> ExtractKey<B> for ConfiguredKey {
    fn extract_key(&self, request: &Request<B>) -> Extracted {
        self.0.extract_key(request)
    }

    fn absent_hint(&self) -> Option<&'static str> {
        ExtractKey::<B>::absent_hint(&self.0)
    }
}

/// A [`RateLimitLayer`]'s settings; [`layer`](Self::layer) builds it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RateLimitLayerConfig {
    /// Where the key comes from.
    pub key: KeyConfig,
    /// Goes before every key ([`Prefixed`]), so that layers sharing a name space do not
    /// share keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_prefix: Option<String>,
    /// [`RateLimitLayerBuilder::cost`](crate::RateLimitLayerBuilder::cost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<u32>,
    /// [`RateLimitLayerBuilder::wait`](crate::RateLimitLayerBuilder::wait).
    #[serde(
        default,
        with = "text_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub wait: Option<Duration>,
    /// [`RateLimitLayerBuilder::ietf_headers`](crate::RateLimitLayerBuilder::ietf_headers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ietf_headers: Option<bool>,
    /// [`RateLimitLayerBuilder::legacy_headers`](crate::RateLimitLayerBuilder::legacy_headers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub legacy_headers: Option<bool>,
    /// [`RateLimitLayerBuilder::on_missing_key`](crate::RateLimitLayerBuilder::on_missing_key):
    /// `"reject"` or `"allow"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_missing_key: Option<MissingKey>,
    /// `true`: give a `5xx` response's cost back once it has been sent
    /// ([`RateLimitLayerBuilder::refund_on`](crate::RateLimitLayerBuilder::refund_on)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund_server_errors: Option<bool>,
    /// Policies kept out of what clients see
    /// ([`RateLimitLayerBuilder::hide_policies`](crate::RateLimitLayerBuilder::hide_policies)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden_policies: Vec<String>,
}

impl RateLimitLayerConfig {
    /// The layer over `limiter`, or the builder's [`ConfigError`] (a cost no policy can
    /// ever allow, a header name or prefix the key cannot take).
    pub fn layer(
        &self,
        limiter: RateLimiter,
    ) -> Result<RateLimitLayer<ConfiguredKey>, ConfigError> {
        let mut builder =
            RateLimitLayer::builder(limiter, self.key.extractor(self.key_prefix.as_deref())?);
        if let Some(cost) = self.cost {
            builder = builder.cost(cost);
        }
        if let Some(wait) = self.wait {
            builder = builder.wait(wait);
        }
        if let Some(on) = self.ietf_headers {
            builder = builder.ietf_headers(on);
        }
        if let Some(on) = self.legacy_headers {
            builder = builder.legacy_headers(on);
        }
        if let Some(missing) = self.on_missing_key {
            builder = builder.on_missing_key(missing);
        }
        if self.refund_server_errors == Some(true) {
            builder = builder.refund_on(|status| status.is_server_error());
        }
        if !self.hidden_policies.is_empty() {
            builder = builder.hide_policies(self.hidden_policies.iter().cloned());
        }
        builder.build()
    }
}

/// Applies the lease settings of a lock or concurrency layer's configuration to its
/// builder, whose setters share their names.
macro_rules! apply_lease_settings {
    ($builder:ident, $settings:expr) => {{
        let settings = $settings;
        if let Some(ttl) = settings.ttl {
            $builder = $builder.ttl(ttl);
        }
        if let Some(wait) = settings.wait {
            $builder = $builder.wait(wait);
        }
        if let Some(on) = settings.watchdog {
            $builder = $builder.watchdog(on);
        }
        if let Some(max_hold) = settings.max_hold {
            $builder = $builder.max_hold(max_hold);
        }
        if let Some(missing) = settings.on_missing_key {
            $builder = $builder.on_missing_key(missing);
        }
        if let Some(namespace) = &settings.namespace {
            $builder = $builder.namespace(namespace.clone());
        }
    }};
}

/// Declares the settings of a layer that holds a lease per request: the key, its prefix and
/// the lease options the lock and concurrency layers share, then the layer's own fields.
macro_rules! lease_layer_config {
    ($(#[$doc:meta])* $name:ident { $($own:tt)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
        #[serde(deny_unknown_fields)]
        #[non_exhaustive]
        pub struct $name {
            /// Where the key comes from.
            pub key: KeyConfig,
            /// Goes before every key ([`Prefixed`]), so that layers sharing a name space do not
            /// share keys.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub key_prefix: Option<String>,
            /// The lease's ttl (default 30 s).
            #[serde(
                default,
                with = "text_duration",
                skip_serializing_if = "Option::is_none"
            )]
            pub ttl: Option<Duration>,
            /// How long to wait for a busy key (default zero; `"forever"`).
            #[serde(
                default,
                with = "text_duration",
                skip_serializing_if = "Option::is_none"
            )]
            pub wait: Option<Duration>,
            /// Renew while held (default on).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub watchdog: Option<bool>,
            /// Stop renewing after this long (default 5 min; not zero; `"forever"`: no bound).
            #[serde(
                default,
                with = "text_duration",
                skip_serializing_if = "Option::is_none"
            )]
            pub max_hold: Option<Duration>,
            /// What a request without a key gets: `"reject"` (default) or `"allow"`.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub on_missing_key: Option<MissingKey>,
            /// The name space of the layer's names (default `"http"`: a key `k` takes the name
            /// `http/k`).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub namespace: Option<String>,
            $($own)*
        }
    };
}

lease_layer_config! {
    /// A [`LockLayer`]'s settings; [`layer`](Self::layer) builds it.
    LockLayerConfig {
        /// `"locked"` (`423`, default) or `"conflict"` (`409`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub busy_status: Option<BusyStatus>,
        /// Mint each request's fence with the grant (default `false`: when the handler
        /// first asks); see [`LockLayerBuilder::fenced`](crate::lock::LockLayerBuilder::fenced).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub fenced: Option<bool>,
        /// Let requests waiting for one key in in arrival order (default `false`); see
        /// [`LockLayerBuilder::fair`](crate::lock::LockLayerBuilder::fair).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub fair: Option<bool>,
        /// Any other lock option, as a `[lock]` table of distlock's configuration reads them
        /// (`lock = { min_hold = "500ms", max_attempts = 3 }`), applied over the fields above
        /// ([`LockLayerBuilder::lock_options`](crate::lock::LockLayerBuilder::lock_options)).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub lock: Option<distlock::config::LockConfig>,
    }
}

impl LockLayerConfig {
    /// The layer on `client`, or the builder's [`ConfigError`] (a ttl out of range, a zero
    /// `max_hold`, a header name or prefix the key cannot take).
    pub fn layer(&self, client: Client) -> Result<LockLayer<ConfiguredKey>, ConfigError> {
        let mut builder =
            LockLayer::builder(client, self.key.extractor(self.key_prefix.as_deref())?);
        apply_lease_settings!(builder, self);
        if let Some(status) = self.busy_status {
            builder = builder.busy_status(status);
        }
        if let Some(on) = self.fenced {
            builder = builder.fenced(on);
        }
        if let Some(on) = self.fair {
            builder = builder.fair(on);
        }
        if let Some(lock) = &self.lock {
            builder = builder.lock_options(|options| lock.over(options));
        }
        builder.build()
    }
}

lease_layer_config! {
    /// A [`ConcurrencyLimitLayer`]'s settings; [`layer`](Self::layer) builds it.
    ConcurrencyLimitLayerConfig {
        /// Requests per key in flight at once, 1 to [`distlock::MAX_PERMITS`].
        pub limit: u32,
        /// `"service-unavailable"` (`503`, default) or `"too-many-requests"` (`429`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub full_status: Option<FullStatus>,
        /// `Retry-After` of a full key's answer (default 1 s).
        #[serde(
            default,
            with = "text_duration",
            skip_serializing_if = "Option::is_none"
        )]
        pub retry_after: Option<Duration>,
        /// A limit that follows latency, shared by every replica
        /// ([`ConcurrencyLimitLayerBuilder::adaptive`](crate::ConcurrencyLimitLayerBuilder::adaptive)).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub adaptive: Option<AdaptiveConfig>,
    }
}

/// The settings of an adaptive limit ([`distlock::adaptive`]), in a concurrency layer's
/// configuration. Unset fields take the runtime's defaults; `initial` defaults to the layer's
/// `limit`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct AdaptiveConfig {
    /// The shared limit's name (one per backend it protects).
    pub name: String,
    /// The least limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<u32>,
    /// The greatest limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u32>,
    /// How often replicas vote (default 1 s).
    #[serde(
        default,
        with = "text_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub window: Option<Duration>,
    /// How much slower than unloaded the 90th percentile may get (default 1.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<f64>,
    /// What a decrease multiplies the limit by (default 0.9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<f64>,
    /// What an increase adds (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u32>,
}

impl ConcurrencyLimitLayerConfig {
    /// The layer on `client`, or the builder's [`ConfigError`] (a limit or ttl out of range,
    /// a client on a Redlock quorum, a header name or prefix the key cannot take).
    pub fn layer(
        &self,
        client: Client,
    ) -> Result<ConcurrencyLimitLayer<ConfiguredKey>, ConfigError> {
        let shared = client.clone();
        let mut builder = ConcurrencyLimitLayer::builder(
            client,
            self.key.extractor(self.key_prefix.as_deref())?,
            self.limit,
        );
        apply_lease_settings!(builder, self);
        if let Some(status) = self.full_status {
            builder = builder.full_status(status);
        }
        if let Some(retry_after) = self.retry_after {
            builder = builder.retry_after(retry_after);
        }
        if let Some(adaptive) = &self.adaptive {
            let mut limit = shared
                .adaptive_limit(adaptive.name.clone())
                .initial(self.limit);
            if adaptive.min.is_some() || adaptive.max.is_some() {
                limit = limit.bounds(
                    adaptive.min.unwrap_or(1),
                    adaptive.max.unwrap_or(distlock::MAX_PERMITS),
                );
            }
            if let Some(window) = adaptive.window {
                limit = limit.window(window);
            }
            if let Some(tolerance) = adaptive.tolerance {
                limit = limit.tolerance(tolerance);
            }
            if let Some(backoff) = adaptive.backoff {
                limit = limit.backoff(backoff);
            }
            if let Some(step) = adaptive.step {
                limit = limit.step(step);
            }
            let limit = limit.build().map_err(|err| ConfigError::InvalidSetting {
                setting: "adaptive",
                reason: err.to_string(),
            })?;
            builder = builder.adaptive(limit);
        }
        builder.build()
    }
}

/// An optional duration as text: `"250ms"`, `"1h 30min"`, or `"forever"` for
/// [`Duration::MAX`].
mod text_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    pub(super) fn serialize<S: Serializer>(
        value: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) if *d == Duration::MAX => serializer.serialize_str("forever"),
            Some(d) => serializer.collect_str(&distlock_grammar::DurationText(*d)),
            None => serializer.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        let text = String::deserialize(deserializer)?;
        let text = text.trim();
        if text == "forever" {
            return Ok(Some(Duration::MAX));
        }
        distlock_grammar::parse_duration(text)
            .map(Some)
            .map_err(|e| {
                D::Error::custom(format_args!(
                    "invalid duration {text:?} ({e}); write a number and a unit, e.g. \"250ms\", \
                 \"2s\" or \"1h 30min\""
                ))
            })
    }
}

/// Serde for the small enums the settings name, as kebab-case text.
mod names {
    use serde::{Deserialize, Deserializer, Serialize, Serializer, de::Error as _};

    use crate::client_ip::{Cidr, ForwardedHeader};
    use crate::concurrency::FullStatus;
    use crate::extract::MissingKey;
    use crate::lock::BusyStatus;

    /// Implements serde for a fieldless enum as one of its names.
    macro_rules! by_name {
        ($ty:ty { $($variant:path => $name:literal),+ $(,)? }) => {
            impl Serialize for $ty {
                fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                    serializer.serialize_str(match self { $($variant => $name,)+ })
                }
            }

            impl<'de> Deserialize<'de> for $ty {
                fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                    let text = String::deserialize(deserializer)?;
                    match text.as_str() {
                        $($name => Ok($variant),)+
                        other => Err(D::Error::unknown_variant(other, &[$($name),+])),
                    }
                }
            }
        };
    }

    by_name!(MissingKey { MissingKey::Reject => "reject", MissingKey::Allow => "allow" });
    by_name!(BusyStatus { BusyStatus::Locked => "locked", BusyStatus::Conflict => "conflict" });
    by_name!(FullStatus {
        FullStatus::ServiceUnavailable => "service-unavailable",
        FullStatus::TooManyRequests => "too-many-requests",
    });
    by_name!(ForwardedHeader {
        ForwardedHeader::XForwardedFor => "x-forwarded-for",
        ForwardedHeader::Forwarded => "forwarded",
    });

    impl Serialize for Cidr {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_str(self)
        }
    }

    impl<'de> Deserialize<'de> for Cidr {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            let text = String::deserialize(deserializer)?;
            text.parse().map_err(D::Error::custom)
        }
    }
}

#[cfg(test)]
mod tests {
    use distlock::ratelimit::{Policy, Rate};

    use super::*;

    fn limiter(client: &Client) -> RateLimiter {
        client
            .rate_limiter(Policy::gcra("api", Rate::per_second(10).unwrap()).unwrap())
            .build()
            .unwrap()
    }

    fn parse_err<T: serde::de::DeserializeOwned + std::fmt::Debug>(text: &str) -> String {
        toml::from_str::<T>(text).unwrap_err().to_string()
    }

    /// Every extractor's table, and every setting, parse into what the text says; written
    /// back, each reads the same again.
    #[test]
    fn every_setting_parses_and_round_trips() {
        let lock: LockLayerConfig = toml::from_str(
            r#"
            key = { from = "client-ip", trusted_proxies = ["10.0.0.0/8", "::1/128"], header = "forwarded", ipv4_prefix = 24, ipv6_prefix = 48 }
            key_prefix = "ip:"
            ttl = "1m 30s"
            wait = "forever"
            watchdog = false
            max_hold = "5min"
            on_missing_key = "allow"
            busy_status = "conflict"
            fenced = true
            fair = true
            lock = { min_hold = "500ms", max_attempts = 3, retry_backoff = { first = "5ms", largest = "1s" } }
            "#,
        )
        .unwrap();
        assert_eq!(lock.fenced, Some(true));
        assert_eq!(lock.fair, Some(true));
        let options = lock.lock.as_ref().expect("lock options").options();
        assert_eq!(options.get_min_hold(), Some(Duration::from_millis(500)));
        assert_eq!(options.get_max_attempts(), Some(3));
        assert_eq!(
            lock.key,
            KeyConfig::ClientIp {
                trusted_proxies: vec!["10.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()],
                header: Some(ForwardedHeader::Forwarded),
                ipv4_prefix: Some(24),
                ipv6_prefix: Some(48),
                trust_every_address: false,
                allow_zero_prefix: false,
            }
        );
        assert_eq!(lock.ttl, Some(Duration::from_secs(90)));
        assert_eq!(lock.wait, Some(Duration::MAX));
        assert_eq!(lock.on_missing_key, Some(MissingKey::Allow));
        assert_eq!(lock.busy_status, Some(BusyStatus::Conflict));
        let again: LockLayerConfig = toml::from_str(&toml::to_string(&lock).unwrap()).unwrap();
        assert_eq!(again, lock);

        let limit: ConcurrencyLimitLayerConfig = toml::from_str(
            r#"
            key = { from = "constant", value = "everyone" }
            limit = 3
            full_status = "too-many-requests"
            retry_after = "2s"
            "#,
        )
        .unwrap();
        assert_eq!(limit.full_status, Some(FullStatus::TooManyRequests));
        let again: ConcurrencyLimitLayerConfig =
            toml::from_str(&toml::to_string(&limit).unwrap()).unwrap();
        assert_eq!(again, limit);

        for (text, key) in [
            (
                r#"key = { from = "header", name = "x-api-key" }"#,
                KeyConfig::Header {
                    name: "x-api-key".into(),
                },
            ),
            (
                r#"key = { from = "path-segment", index = 2 }"#,
                KeyConfig::PathSegment { index: 2 },
            ),
            #[cfg(feature = "axum")]
            (
                r#"key = { from = "matched-path" }"#,
                KeyConfig::MatchedPath {},
            ),
        ] {
            let config: RateLimitLayerConfig = toml::from_str(text).unwrap();
            assert_eq!(config.key, key, "{text}");
        }
        let rate: RateLimitLayerConfig = toml::from_str(
            "key = { from = \"constant\", value = \"k\" }\ncost = 3\nwait = \"250ms\"\n\
             ietf_headers = false\nrefund_server_errors = true",
        )
        .unwrap();
        assert_eq!(
            (
                rate.cost,
                rate.wait,
                rate.ietf_headers,
                rate.refund_server_errors
            ),
            (
                Some(3),
                Some(Duration::from_millis(250)),
                Some(false),
                Some(true)
            )
        );
        let again: RateLimitLayerConfig = toml::from_str(&toml::to_string(&rate).unwrap()).unwrap();
        assert_eq!(again, rate);
    }

    /// A header name of 10 KB (valid HTTP, but a value in the name's place) is refused when
    /// read and when the layer is built, and the error does not repeat it.
    #[tokio::test]
    async fn a_huge_header_name_is_refused_without_being_printed() {
        let name = "x".repeat(10_000);
        let text = format!("key = {{ from = \"header\", name = \"{name}\" }}");
        // The message alone: `toml`'s `Display` quotes the offending line of the text.
        let err = toml::from_str::<RateLimitLayerConfig>(&text).unwrap_err();
        let message = err.message();
        assert!(
            message.contains("a header name of 10000 bytes is longer than the 256 allowed"),
            "{message}"
        );
        assert!(
            message.len() < 1_000,
            "the error repeats the name: {} bytes",
            message.len()
        );
        let mut config: RateLimitLayerConfig =
            toml::from_str("key = { from = \"constant\", value = \"k\" }").unwrap();
        config.key = KeyConfig::Header { name };
        let err = config
            .layer(limiter(&Client::in_memory()))
            .map(drop)
            .unwrap_err();
        assert_eq!(
            err,
            ConfigError::HeaderNameTooLong {
                len: 10_000,
                max: crate::extract::MAX_HEADER_NAME_LEN
            }
        );
    }

    /// A file's mistakes are refused when it is read, each naming what is wrong.
    #[test]
    fn mistakes_in_the_text_are_refused_with_what_is_wrong() {
        let cases = [
            (
                r#"key = { from = "hedaer", name = "x" }"#,
                "unknown variant `hedaer`",
            ),
            (r#"key = { from = "header" }"#, "missing field `name`"),
            (
                r#"key = { from = "header", name = "x", nmae = "y" }"#,
                "unknown field `nmae`",
            ),
            (
                r#"key = { from = "matched-path", index = 3 }"#,
                "unknown field `index`",
            ),
            ("cost = 1", "missing field `key`"),
            (
                "key = { from = \"constant\", value = \"k\" }\nwiat = \"1s\"",
                "unknown field `wiat`",
            ),
            (
                "key = { from = \"constant\", value = \"k\" }\nwait = \"5\"",
                "invalid duration \"5\"",
            ),
            (
                "key = { from = \"constant\", value = \"k\" }\non_missing_key = \"ignore\"",
                "unknown variant `ignore`, expected `reject` or `allow`",
            ),
            (
                "key = { from = \"client-ip\", trusted_proxies = [\"10.0.0.0/33\"] }",
                "10.0.0.0/33",
            ),
            (
                "key = { from = \"constant\", value = \"k\" }\ncost = -1",
                "invalid value",
            ),
            // A key the extractor could never take: refused when read, not per request.
            (
                r#"key = { from = "constant", value = "" }"#,
                "a constant key must be 1 to 256 bytes long, got 0",
            ),
            (
                r#"key = { from = "header", name = "bad header" }"#,
                "\"bad header\" is not a valid header name",
            ),
        ];
        for (text, expected) in cases {
            let err = parse_err::<RateLimitLayerConfig>(text);
            assert!(err.contains(expected), "{text}: {err}");
        }
        let err =
            parse_err::<ConcurrencyLimitLayerConfig>(r#"key = { from = "constant", value = "k" }"#);
        assert!(err.contains("missing field `limit`"), "{err}");
        let err = parse_err::<LockLayerConfig>(
            "key = { from = \"constant\", value = \"k\" }\nbusy_status = \"busy\"",
        );
        assert!(err.contains("expected `locked` or `conflict`"), "{err}");
        // The lock table is read as distlock's [lock] table: unknown options and values out
        // of range are refused as the text is read, by name.
        for (lock, expected) in [
            ("{ tll = \"1s\" }", "unknown field `tll`, expected `ttl`"),
            ("{ ttl = \"1ms\" }", "field `ttl`: 1ms is out of range"),
            (
                "{ max_attempts = 0 }",
                "field `max_attempts`: 0 would never try",
            ),
            ("{ identity = \"\" }", "field `identity`"),
            ("\"fair\"", "a table of lock options"),
        ] {
            let err = parse_err::<LockLayerConfig>(&format!(
                "key = {{ from = \"constant\", value = \"k\" }}\nlock = {lock}"
            ));
            assert!(err.contains(expected), "{lock}: {err}");
        }
    }

    /// Values that parse but that a builder cannot work with are the builder's own typed
    /// errors from `layer`, never a panic.
    #[tokio::test]
    async fn values_out_of_range_are_the_builders_errors() {
        let client = Client::in_memory();
        let lock = |text: &str| -> LockLayerConfig { toml::from_str(text).unwrap() };
        let err = lock("key = { from = \"constant\", value = \"k\" }\nttl = \"1ms\"")
            .layer(client.clone())
            .unwrap_err();
        assert!(matches!(err, ConfigError::TtlOutOfRange { .. }), "{err}");
        let err = lock("key = { from = \"constant\", value = \"k\" }\nmax_hold = \"0s\"")
            .layer(client.clone())
            .unwrap_err();
        assert_eq!(err, ConfigError::ZeroMaxHold);
        // Settings made in code skip the reading checks; `layer` refuses the same keys.
        let mut keyed = lock("key = { from = \"constant\", value = \"k\" }");
        keyed.key = KeyConfig::Header {
            name: "bad header".to_owned(),
        };
        let err = keyed.layer(client.clone()).unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidHeaderName { .. }),
            "{err}"
        );
        keyed.key = KeyConfig::Constant {
            value: String::new(),
        };
        let err = keyed.layer(client.clone()).unwrap_err();
        assert_eq!(
            err,
            ConfigError::InvalidConstantKey {
                len: 0,
                max: crate::extract::MAX_KEY_LEN
            }
        );
        let err = lock(r#"key = { from = "client-ip", ipv4_prefix = 33 }"#)
            .layer(client.clone())
            .unwrap_err();
        assert!(
            matches!(err, ConfigError::PrefixTooLong { version: 4, .. }),
            "{err}"
        );

        let limit: ConcurrencyLimitLayerConfig =
            toml::from_str("key = { from = \"constant\", value = \"k\" }\nlimit = 0").unwrap();
        let err = limit.layer(client.clone()).unwrap_err();
        assert!(
            matches!(err, ConfigError::LimitOutOfRange { limit: 0, .. }),
            "{err}"
        );

        let rate: RateLimitLayerConfig =
            toml::from_str("key = { from = \"constant\", value = \"k\" }\ncost = 1000").unwrap();
        let err = rate.layer(limiter(&client)).unwrap_err();
        assert!(
            matches!(err, ConfigError::CostTooLarge { cost: 1000, .. }),
            "{err}"
        );
    }
}
