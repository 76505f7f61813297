//! The rate-limit service (feature `rls`) with a real gRPC client over TCP: every
//! configuration feature on Redis, in memory and on a Cluster; reloads, good and bad;
//! concurrent clients with exact totals; the store killed; decisions equal to the in-process
//! limiter's over random traces; the `distlock-rls` binary; the guide's Envoy snippet.

/// The helpers the tower crate's test binaries share (its own are in `common`).
#[path = "../common/mod.rs"]
mod shared;
#[path = "../../../tests/support/mod.rs"]
mod support;

mod answers;
mod binary;
mod common;
mod differential;
mod envoy;
mod faults;
mod reload;
