//! Shared test harness for the distlock integration tests.
//!
//! Every test binary includes this module with
//! `#[path = "../support/mod.rs"] mod support;`.
//!
//! * [`server::RedisServer`] runs a real, throw-away `redis-server` process on a
//!   free loopback port, with fault controls (SIGSTOP/SIGCONT, SIGKILL, restart).
//! * [`proxy::Proxy`] is an in-process TCP proxy in front of a server that can
//!   delay, blackhole, reset or refuse connections.
//! * [`sentinel::SentinelSetup`] runs a primary, its replica and three sentinels, with
//!   timed failovers; [`tls::TlsServer`] runs a TLS-only server with certificates made at
//!   test time ([`tls::TestCerts`]). Their processes die with the test process, however it
//!   ends (as `cluster.rs`'s).
//! * [`node::NodeProcess`] is the process half that the Cluster, Sentinel and TLS set-ups'
//!   nodes share (spawn tied to the test, wait until ready, logs, SIGSTOP/SIGCONT/SIGKILL,
//!   a new run on the same port); [`files`] has the ports, temp dirs and log readers of every
//!   set-up.
//!
//! There is no mock of Redis anywhere: if `redis-server` is not installed the
//! tests fail (panic) with instructions instead of silently skipping.
#![allow(dead_code, unused_imports, unused_macros)]

pub mod bloom;
pub mod child;
pub mod cluster;
pub mod election;
pub mod faketime;
pub mod files;
pub mod fixture;
pub mod hierarchy;
pub mod lateness;
pub mod netns;
pub mod node;
pub mod process;
pub mod proxy;
pub mod readers;
pub mod sections;
pub mod semaphore;
pub mod sentinel;
pub mod server;
pub mod theft;
pub mod tls;

pub use proxy::{Proxy, ProxyMode};
pub use server::{RedisServer, RedisServerBuilder, StoppedGuard};
