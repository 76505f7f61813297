//! Recorded histories under faults (TESTPLAN 13, 16 and 45; issue 26): worker processes run a
//! seeded random mix of lock, semaphore, read-write lock and rate-limit operations against each
//! backend while a nemesis injects faults; every invocation and completion is recorded with
//! `CLOCK_MONOTONIC`, and an offline checker verifies the README's guarantees on the whole
//! history (`checker.rs`, itself tested on hand-made histories that must fail).

#[path = "../support/mod.rs"]
mod support;

mod checker;
mod fence_props;
// The reference model the rate limiters are checked against.
#[path = "../ratelimit/model.rs"]
#[allow(dead_code)]
mod model;
mod props;
mod record;
mod run;
mod worker;

use tokio::sync::{Mutex, MutexGuard};

/// One backend at a time: each run takes the machine's two cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

async fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary() {
    let _turn = one_at_a_time().await;
    run::run("primary").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel() {
    let _turn = one_at_a_time().await;
    run::run("sentinel").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster() {
    let _turn = one_at_a_time().await;
    run::run("cluster").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum() {
    let _turn = one_at_a_time().await;
    run::run("quorum").await;
}

/// A worker process's entry (run by the backends' tests in a network namespace, with its plan
/// in the environment); does nothing in a normal run.
#[test]
#[ignore = "a worker process's entry, run by the history tests"]
fn worker_entry() {
    let Ok(plan) = std::env::var(worker::PLAN_VAR) else {
        return;
    };
    let plan = worker::Plan::parse(&plan);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("worker runtime")
        .block_on(worker::run(plan));
}

/// Checks a kept history again (`DISTLOCK_HISTORY_DIR=<dir> cargo test --test history
/// check_kept_history -- --ignored --nocapture`), e.g. after changing the checker.
#[test]
#[ignore = "checks the history in DISTLOCK_HISTORY_DIR"]
fn check_kept_history() {
    let dir = std::env::var("DISTLOCK_HISTORY_DIR").expect("DISTLOCK_HISTORY_DIR");
    let events = record::read_dir(std::path::Path::new(&dir));
    let report = checker::check(&events);
    print!("{}", checker::figures(&report));
    for v in &report.violations {
        println!(
            "VIOLATION [{}] {}\n{}",
            v.rule,
            v.what,
            checker::excerpt(&events, v)
        );
    }
    assert!(
        report.violations.is_empty(),
        "{} violations",
        report.violations.len()
    );
}
