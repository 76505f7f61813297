//! `ConcurrencyLimitLayer` end to end: through `ServiceExt::oneshot` on both stores (the same
//! test bodies on Redis and in memory), and over real HTTP with two server processes sharing
//! one Redis.

#[path = "../../../tests/support/mod.rs"]
mod support;

#[path = "../common/mod.rs"]
mod common;

mod adaptive;
mod oneshot;
mod processes;
