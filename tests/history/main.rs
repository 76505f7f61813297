//! Recorded histories under faults (TESTPLAN 13, 16 and 45; issue 26): worker processes run a
//! seeded random mix of lock, semaphore, read-write lock and rate-limit operations against each
//! backend while a nemesis injects faults; every invocation and completion is recorded with
//! `CLOCK_MONOTONIC`, and an offline checker verifies the README's guarantees on the whole
//! history (`checker.rs`, itself tested on hand-made histories that must fail).

#[path = "../support/mod.rs"]
mod support;

mod checker;
mod record;
