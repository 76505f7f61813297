//! Fault injection against real `redis-server` processes: the server killed, frozen or slow
//! while a lease is held, scripts flushed under the client, connection faults through a TCP
//! proxy, memory pressure and eviction policies, and wrong credentials (TESTPLAN cases 7, 10,
//! 11, 17, 18, 25 and 57), and
//! writes that wait for a frozen replica stalling only themselves (43).
//!
//! Timing assertions are bounds on behaviour that is specified as a bound (a deadline, a
//! response timeout); everything else is polled with bounded loops.

#[path = "../support/mod.rs"]
mod support;
#[path = "../support/traces.rs"]
mod traces;

mod acknowledged;
mod common;
mod credentials;
mod killed;
mod lazy;
mod memory;
mod noscript;
mod partition;
mod paused;
mod proxy_faults;
mod replicas;
