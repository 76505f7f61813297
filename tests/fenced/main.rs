//! Fenced writes (`Client::fenced`, `distlock::fenced::postgres`): the check on the resource
//! side, against real servers the tests start (redis-server, a Redis Cluster, Sentinel, and
//! PostgreSQL through `initdb` + `postgres`), and in memory.
//!
//! * `semantics`: the same cases on memory, a single primary and a Cluster: lower fences
//!   refused, equal and higher accepted, updates all or nothing, expiry, names, concurrency.
//! * `topologies`: the key layout on a primary and a Cluster, Sentinel through a failover,
//!   and a Redlock quorum refused when the handle is made.
//! * `postgres`: the guard table in the caller's transaction, concurrent transactions on one
//!   resource, rollback.
//! * `paused`: TESTPLAN 48, a holder process SIGSTOPped past its lease writes after its
//!   successor: refused on Redis and on PostgreSQL, and the data shows the successor's write.

#[path = "../support/mod.rs"]
mod support;

#[allow(dead_code)]
#[path = "../support/postgres.rs"]
mod pg;

mod paused;
mod postgres;
mod semantics;
mod stores;
mod topologies;
