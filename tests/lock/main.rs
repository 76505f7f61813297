//! Lock semantics, and those of the primitives built on leases (semaphores, read-write locks,
//! multi-locks, scheduled jobs), against real `redis-server` processes and the in-memory store
//! (the same test bodies on both), and the cases that need several OS processes.

#[path = "../support/mod.rs"]
mod support;
// Only the binaries that capture traces: the others lack tracing-subscriber.
#[path = "../support/traces.rs"]
mod traces;

mod admin;
mod batching;
mod drain;
mod election;
mod events;
mod existing;
mod fair;
mod fairness;
mod fences;
mod handoff;
mod hierarchy;
mod holders;
mod job;
mod multi;
mod processes;
mod retry;
mod rwlock;
mod scripts;
mod semantics;
mod semaphore;
mod starved;
mod timing;
mod tokens;
mod wakeups;
