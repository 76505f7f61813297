//! Rate limiting against real `redis-server` processes and the in-memory store (the same test
//! bodies on both where the semantics are shared): the stores against the reference model and
//! against each other, exactness and boundary bursts, memory bounds, and outages (TESTPLAN
//! 19, 20 and 22); a sliding log across a longer window, partial grants, lockouts and the
//! any-of combination (issue 28).

#[path = "../support/mod.rs"]
mod support;
// Only the binaries that capture traces: the others lack tracing-subscriber.
#[path = "../support/traces.rs"]
mod traces;

mod any_of;
mod bounds;
mod cached_model_check;
mod common;
mod deny_cache;
mod exactness;
mod hybrid;
mod lockout;
mod log_window;
mod memory_bound;
mod model;
mod model_check;
mod operations;
mod outage;
mod semantics;
mod stores_agree;
mod up_to;
