//! Smoke tests of the replication test infrastructure (tests/support/sentinel.rs, tls.rs and
//! the ACL rules in server.rs): a Sentinel topology that forms and fails over, TLS servers
//! with certificates made at test time, the library's minimal ACL, and no leaked process.

#[path = "../support/mod.rs"]
mod support;

mod acl;
mod failover;
mod leaks;
mod misconfig;
mod sentinel;
// redis-rs's rustls backend (distlock's `tls` feature; CI enables every feature).
#[cfg(feature = "tls")]
mod tls;
