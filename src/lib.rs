//! Redis-backed coordination for async services: distributed locks (leases with a watchdog,
//! fencing tokens and a lost signal, pub/sub hand-off to waiters), the primitives built on
//! the same leases (semaphores, read-write locks, multi-locks, scheduled-job locks), and
//! distributed rate limiting ([`ratelimit`]).
//!
//! The crate's README follows.
#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
mod admin;
pub mod bloom;
mod client;
mod error;
pub mod http;
#[cfg(feature = "test-util")]
mod inspect;
mod keys;
mod lock;
mod metrics;
pub mod ratelimit;
mod store;
mod token;

#[cfg(feature = "metrics")]
pub use crate::metrics::describe_metrics;
pub use admin::LockState;
pub use client::{Client, ClientBuilder, DEFAULT_PREFIX, default_client, set_default_client};
pub use error::{
    BloomError, InvalidName, InvalidPolicy, LockError, LossReason, MIN_REDIS_VERSION, NodeFailure,
    RateLimitError, RefusedKind, StoreError,
};
#[cfg(feature = "test-util")]
#[doc(hidden)]
pub use inspect::Inspector;
pub use keys::MAX_NAME_LEN;
pub use lock::job::JobBuilder;
pub use lock::multi::{MAX_MULTI_LOCK, MultiHandle, MultiLease, MultiLockBuilder};
pub use lock::rwlock::RwLockBuilder;
pub use lock::semaphore::{MAX_PERMITS, SemaphoreBuilder};
pub use lock::{
    DEFAULT_TTL, Lease, LeaseHandle, LockBuilder, MAX_TTL, MIN_TTL, ReleaseOutcome, RunReport,
    current_lease, safety_margin,
};
pub use store::{Capability, Unsupported};

#[doc(hidden)]
pub use keys::hash_tag;

// Its documentation lives on the macro itself, so that it also shows in editors.
#[cfg(feature = "macros")]
pub use distlock_macros::distributed_lock;
