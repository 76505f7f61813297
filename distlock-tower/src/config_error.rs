//! [`ConfigError`]: a layer or extractor given a setting it cannot work with.

use std::time::Duration;

/// A setting a layer or extractor of this crate cannot work with, returned where it is built.
///
/// One pattern throughout the crate: a type whose settings can be wrong is configured on a
/// consuming builder whose setters only store, and one fallible call checks them all and
/// makes the value ([`LockLayerBuilder::build`](crate::lock::LockLayerBuilder::build),
/// [`ConcurrencyLimitLayer::new`](crate::ConcurrencyLimitLayer::new) and its builder's
/// `build`, [`RateLimitLayerBuilder::build`](crate::rate_limit::RateLimitLayerBuilder::build),
/// [`ClientIpBuilder::build`](crate::client_ip::ClientIpBuilder::build),
/// [`Header::new`](crate::extract::Header::new), [`Constant::new`](crate::extract::Constant::new)),
/// as the runtime's `RateLimiterBuilder` does.
/// Constructors that take nothing that can be wrong (`LockLayer::new`, `RateLimitLayer::new`,
/// `ClientIp::peer`) cannot fail. No value, from code or from a configuration file, makes
/// any of them panic.
///
/// ```
/// use std::time::Duration;
/// use distlock_tower::{ConfigError, LockLayer};
/// use distlock_tower::extract::Header;
///
/// let client = distlock::Client::in_memory();
/// let err = LockLayer::builder(client, Header::from_static("x-job"))
///     .ttl(Duration::ZERO)
///     .build()
///     .unwrap_err();
/// assert!(matches!(err, ConfigError::TtlOutOfRange { .. }));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A lock ttl outside [`distlock::MIN_TTL`]`..=`[`distlock::MAX_TTL`].
    #[error("lock ttl {ttl:?} is out of range: it must be between {min:?} and {max:?}")]
    #[non_exhaustive]
    TtlOutOfRange {
        /// The ttl asked for.
        ttl: Duration,
        /// The shortest ttl allowed.
        min: Duration,
        /// The longest ttl allowed.
        max: Duration,
    },
    /// A concurrency limit of 0 (every request refused) or above
    /// [`distlock::MAX_PERMITS`].
    #[error("a concurrency limit must be between 1 and {max}, got {limit}")]
    #[non_exhaustive]
    LimitOutOfRange {
        /// The limit asked for.
        limit: u32,
        /// The largest limit allowed.
        max: u32,
    },
    /// The client's store cannot serve what the layer needs: the concurrency layer counts
    /// permits in holder sets, which a Redlock quorum cannot (majorities of independent
    /// primaries do not bound how many hold at once). Build the layer on a client of a single
    /// primary or a Cluster, or on a quorum client made with
    /// [`ClientBuilder::counting_on`](distlock::ClientBuilder::counting_on). Every request
    /// would be refused, so the layer is refused where it is built.
    #[error(transparent)]
    UnsupportedStore(#[from] distlock::Unsupported),
    /// A zero `max_hold`: the lease would stop being renewed before it was ever used.
    #[error("max_hold must be greater than zero")]
    ZeroMaxHold,
    /// A per-request cost that one of the limiter's policies can never allow: every request
    /// would be refused. Raise the policy's burst (or limit), or lower the cost.
    #[error(
        "a cost of {cost} can never pass policy `{policy}`, which allows at most {capacity} at once"
    )]
    #[non_exhaustive]
    CostTooLarge {
        /// The cost asked for.
        cost: u32,
        /// The policy that can never allow it.
        policy: String,
        /// The most that policy allows at once.
        capacity: u32,
    },
    /// An address-grouping prefix longer than the address (32 bits for IPv4, 128 for IPv6).
    #[error("an IPv{version} prefix has at most {max} bits, got {bits}")]
    #[non_exhaustive]
    PrefixTooLong {
        /// 4 or 6.
        version: u8,
        /// The prefix length asked for.
        bits: u8,
        /// The longest prefix of that address family.
        max: u8,
    },
    /// A header name that is not a valid HTTP field name (visible ASCII token characters).
    #[error("{name:?} is not a valid header name")]
    #[non_exhaustive]
    InvalidHeaderName {
        /// The name given.
        name: String,
    },
    /// A header name longer than [`MAX_HEADER_NAME_LEN`](crate::extract::MAX_HEADER_NAME_LEN)
    /// bytes: valid HTTP, but no header a client sends is named that (a value pasted into the
    /// name's place, most likely).
    #[error("a header name of {len} bytes is longer than the {max} allowed")]
    #[non_exhaustive]
    HeaderNameTooLong {
        /// The name's length in bytes.
        len: usize,
        /// The longest name allowed.
        max: usize,
    },
    /// A [`Constant`](crate::extract::Constant) key that no request could use: empty, or
    /// longer than [`MAX_KEY_LEN`](crate::extract::MAX_KEY_LEN) bytes. An empty name is
    /// refused by the runtime on every request, so it is refused where the key is made.
    #[error("a constant key must be 1 to {max} bytes long, got {len}")]
    #[non_exhaustive]
    InvalidConstantKey {
        /// The key's length in bytes.
        len: usize,
        /// The longest key allowed.
        max: usize,
    },
    /// A setting of a layer out of its range (the
    /// [`IdempotencyLayer`](crate::IdempotencyLayer)'s namespace, record ttl or body caps, a
    /// stored header that carries credentials, a lock layer's namespace...), or one that
    /// needs to be said by name (trusting every address as a proxy).
    #[error("layer setting `{setting}`: {reason}")]
    #[non_exhaustive]
    InvalidSetting {
        /// The setting's name, as its builder method is named.
        setting: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// An [`IdempotencyLayer`](crate::IdempotencyLayer) built without saying whose keys
    /// they are: with no scope, every caller's keys would meet, and one caller could read the
    /// response stored under another's key.
    #[error(
        "an idempotency layer needs a scope: say who sends each request with \
         .scope(extractor) (a user, a tenant, an API key's id), or share the keys among every \
         caller with .scope_global()"
    )]
    NoScope,
}
