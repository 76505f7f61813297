//! [`ConfigError`]: a layer or extractor given a setting it cannot work with.

use std::time::Duration;

/// A setting a layer or extractor of this crate cannot work with, returned by the checked
/// builder methods (`try_ttl`, `try_cost`, ...). Their unchecked twins panic with the same
/// message, so that a mistake in a router built at startup stops the process at once; use the
/// checked ones when the values come from configuration you want to report on.
///
/// ```
/// use std::time::Duration;
/// use distlock_tower::{ConfigError, LockLayer};
/// use distlock_tower::extract::Header;
///
/// let layer = LockLayer::new(distlock::Client::in_memory(), Header::from_static("x-job"));
/// let err = layer.try_ttl(Duration::ZERO).unwrap_err();
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
    /// [`ClientBuilder::counting_on`](distlock::ClientBuilder::counting_on).
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
}
