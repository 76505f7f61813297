//! Tower layers for `distlock`, for axum routers and any other tower stack over `http` types.
//!
//! * [`lock`]: [`LockLayer`] runs each request under a distributed lock named by its key,
//!   held until the response body has been sent; handlers read the lease through [`HeldLock`].
//! * [`rate_limit`]: [`RateLimitLayer`] checks each request against a distributed rate
//!   limiter under its key, answering `429` with `Retry-After` and the IETF `RateLimit`
//!   fields when it is over.
//! * [`extract`]: which key a request belongs to ([`ExtractKey`] and the provided extractors),
//!   shared by every layer of this crate; [`client_ip`] adds the client's IP address, behind
//!   trusted proxies too.
//!
//! Builders panic on a setting they cannot work with (documented under `# Panics`), so a
//! misconfigured router stops the process where it is built; each such method has a checked
//! twin (`try_ttl`, `try_cost`, ...) that returns a [`ConfigError`] instead.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod client_ip;
mod config_error;
pub mod extract;
pub mod lock;
pub mod rate_limit;
mod readiness;
mod retry_after;

pub use config_error::ConfigError;
pub use extract::{ExtractKey, Extracted, MissingKey};
pub use lock::{HeldLock, LockLayer};
pub use rate_limit::RateLimitLayer;
