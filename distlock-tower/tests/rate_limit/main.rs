//! `RateLimitLayer` end to end: through `ServiceExt::oneshot` and over real TCP with
//! `axum::serve`, on a real `redis-server` and on the in-memory store (the same test bodies on
//! both), client-IP extraction (TESTPLAN 21), store faults on Redis, and layers built from their
//! configuration.

#[path = "../../../tests/support/mod.rs"]
mod support;
#[path = "../../../tests/support/traces.rs"]
mod traces;

#[path = "../common/mod.rs"]
mod common;

mod app;
mod client_ip;
mod composed;
mod cost_by;
mod exempt;
mod faults;
#[cfg(feature = "serde")]
mod from_config;
mod invalid_key;
mod oneshot;
mod responses;
mod settle;
mod tcp;
mod visibility;
