//! Lock semantics against real `redis-server` processes and the in-memory store (the same test
//! bodies on both), and the cases that need several OS processes.

#[path = "../support/mod.rs"]
mod support;
// Only the binaries that capture traces: the others lack tracing-subscriber.
#[path = "../support/traces.rs"]
mod traces;

mod batching;
mod existing;
mod fairness;
mod handoff;
mod processes;
mod scripts;
mod semantics;
mod timing;
mod tokens;
mod wakeups;
