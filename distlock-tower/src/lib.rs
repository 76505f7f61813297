//! Tower layers for `distlock`, for axum routers and any other tower stack over `http` types.
//!
//! * [`extract`]: which key a request belongs to ([`ExtractKey`] and the provided extractors),
//!   shared by every layer of this crate.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod extract;

pub use extract::ExtractKey;
