//! Redis-backed coordination for async Rust services that run as several replicas:
//! distributed locks as leases (a watchdog renews them, a lost signal fires before the store
//! could let them expire, every grant carries a strictly increasing fencing token), the
//! primitives built on the same leases (semaphores, read-write and hierarchical locks,
//! multi-locks, scheduled-job locks), distributed rate limiting ([`ratelimit`]), Bloom filters ([`bloom`]),
//! and `#[distributed_lock]` for async functions. Tower layers for axum are the companion crate
//! `distlock-tower`.
//!
//! ```
//! use std::time::Duration;
//! use distlock::ratelimit::{Policy, Rate};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // `Client::connect("redis://127.0.0.1:6379/")` shares everything with the other replicas;
//! // the in-memory store is one process only (tests, local development).
//! let client = distlock::Client::in_memory();
//!
//! let lease = client.lock("order:42").ttl(Duration::from_secs(30)).acquire().await?;
//! // Minted on first use, while the lock is held: the resource you protect refuses writes
//! // with a smaller one.
//! let fence = lease.fence().await?;
//! lease.release().await?;
//!
//! let limiter = client.rate_limiter(Policy::gcra("api", Rate::per_second(100)?.burst(20)?)?).build()?;
//! assert!(limiter.check("user:7").await?.allowed);
//! # let _ = fence;
//! # Ok(()) }
//! ```
//!
//! Start with [`Client`]: [`Client::lock`], [`Client::semaphore`], [`Client::rw_lock`],
//! [`Client::hierarchy_lock`], [`Client::multi_lock`], [`Client::job`], [`Client::election`], [`Client::rate_limiter`] and
//! [`Client::bloom_filter`] each return a builder. The [`guide`] has the rest: what the
//! guarantees are and where they end, every primitive in depth, the layers, the configuration
//! reference, Redis Cluster, Redlock, Sentinel, TLS and ACL users, and operations (metrics,
//! key layout).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
pub mod adaptive;
mod admin;
pub mod bloom;
mod client;
#[cfg(feature = "serde")]
pub mod config;
mod core;
mod digits;
mod drain;
mod drift;
mod election;
mod error;
pub mod fenced;
pub mod guide;
mod health;
mod holder;
pub mod http;
pub mod idempotency;
#[cfg(feature = "test-util")]
mod inspect;
mod keys;
mod lock;
pub mod logging;
#[cfg(feature = "metrics")]
mod metrics;
mod mode;
pub mod ratelimit;
mod store;
mod token;

#[cfg(feature = "metrics")]
pub use crate::metrics::describe_metrics;
pub use admin::{
    DEFAULT_KEY_BUDGET, HierarchyHolder, HolderState, LockEntry, LockListing, LockState,
    MAX_LISTED_LOCKS, RwLockState,
};
pub use client::{Client, ClientBuilder, DEFAULT_PREFIX, default_client, set_default_client};
pub use drain::{LeaseKind, NotReleased, OwnLease, ShutdownReport};
pub use election::{Election, ElectionBuilder, Leader, Leadership, MAX_IDENTITY_LEN};
pub use error::{
    BloomError, Cause, InvalidName, InvalidPolicy, LockError, LossReason, MIN_REDIS_VERSION,
    NodeFailure, RateLimitError, RefusedKind, StoreError,
};
pub use fenced::{FencedError, FencedResource};
pub use health::{Health, NodeHealth};
pub use holder::{Holder, MAX_HOLDER_IDENTITY_LEN};
pub use idempotency::{Idempotency, IdempotencyError};
#[cfg(feature = "test-util")]
#[doc(hidden)]
pub use inspect::Inspector;
pub use keys::{MAX_HIERARCHY_LEVELS, MAX_NAME_LEN};
pub use lock::hierarchy::HierarchyLockBuilder;
pub use lock::job::JobBuilder;
pub use lock::multi::{MAX_MULTI_LOCK, MultiHandle, MultiLease, MultiLockBuilder};
pub use lock::rwlock::RwLockBuilder;
pub use lock::semaphore::{MAX_PERMITS, SemaphoreBuilder};
pub use lock::{
    DEFAULT_TTL, InvalidOption, Lease, LeaseHandle, LockBuilder, LockOptions, MAX_TTL, MIN_TTL,
    ReleaseOutcome, RunReport, current_lease, safety_margin,
};
pub use mode::HierarchyMode;
pub use store::{Capability, StoreKind, Unsupported};

#[doc(hidden)]
pub use keys::hash_tag;

// The README's examples are compiled and run with the doctests (it is not the crate's
// documentation: its links point at docs.rs).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

// Its documentation lives on the macro itself, so that it also shows in editors.
#[cfg(feature = "macros")]
pub use distlock_macros::{distributed_lock, rate_limit};
