//! Redis-backed coordination for async services: distributed locks (leases with a watchdog,
//! fencing tokens and a lost signal, pub/sub hand-off to waiters).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//!
//! // `Client::connect("redis://127.0.0.1/")` for Redis; memory for this example.
//! let client = distlock::Client::in_memory();
//! let lease = client
//!     .lock("order:42")
//!     .ttl(Duration::from_secs(30))
//!     .wait(Duration::from_secs(5))
//!     .acquire()
//!     .await?;
//! // Hand the fence to the resource you protect; it refuses smaller ones.
//! let fence = lease.fence();
//! lease.ensure_held()?;
//! lease.release().await?;
//! # let _ = fence; Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod client;
mod error;
mod inspect;
mod keys;
mod lock;
mod store;
mod token;

pub use client::{Client, ClientBuilder, DEFAULT_PREFIX, default_client, set_default_client};
pub use error::{InvalidName, LockError, LossReason, RefusedKind, StoreError};
pub use inspect::Inspector;
pub use keys::MAX_NAME_LEN;
pub use lock::{
    DEFAULT_TTL, Lease, LeaseHandle, LockBuilder, MAX_TTL, MIN_TTL, ReleaseOutcome, current_lease,
};

#[doc(hidden)]
pub use keys::hash_tag;
