//! `IdempotencyLayer` end to end: through `ServiceExt::oneshot` on memory, one redis-server
//! and a Cluster (the same test bodies), and over real HTTP with two server processes sharing
//! one Redis.

#[path = "../../../tests/support/mod.rs"]
mod support;

mod oneshot;
mod processes;
mod retries;
mod runtime;
