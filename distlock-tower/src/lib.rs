//! Tower layers for `distlock`, for axum routers and any other tower stack over `http` types.
//!
//! * [`lock`]: [`LockLayer`] runs each request under a distributed lock named by its key,
//!   held until the response body has been sent; handlers read the lease through [`HeldLock`].
//! * [`extract`]: which key a request belongs to ([`ExtractKey`] and the provided extractors),
//!   shared by every layer of this crate.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod extract;
pub mod lock;

pub use extract::ExtractKey;
pub use lock::{HeldLock, LockLayer};
