//! `#[distributed_lock]` and `#[rate_limit]` end to end, on real `redis-server` processes and
//! on the in-memory store: mutual exclusion across tasks and OS processes, reentrancy, lease
//! loss, the fence, busy locks and skipped calls, the default client and key rendering; rate
//! limits' denials, costs, waits and exactness across processes.

#[path = "../support/mod.rs"]
mod support;

#[path = "../ui/shared/app_error.rs"]
mod app_error;
#[path = "../support/traces.rs"]
mod traces;

mod default_client;
mod exclusion;
mod processes;
mod rate_limit;
mod rate_limit_processes;
mod semantics;
mod skip;
