//! `LockLayer` end to end: through `ServiceExt::oneshot` and over real TCP with `axum::serve`,
//! on a real `redis-server` and on the in-memory store (the same test bodies on both), plus
//! store faults on Redis.

#[path = "../../../tests/support/mod.rs"]
mod support;
#[path = "../../../tests/support/traces.rs"]
mod traces;

#[path = "../common/mod.rs"]
mod common;

mod app;
mod composed;
mod drain;
mod faults;
mod handler_errors;
mod health;
mod invalid_key;
mod oneshot;
mod responses;
mod retry_after;
mod tcp;
mod untrusted;
