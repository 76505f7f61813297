//! Multi-locks on both stores: all or nothing, no two overlapping sets held at once, no
//! deadlock, nothing left behind after failures and cancellations.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use distlock::{LockError, MAX_MULTI_LOCK, ReleaseOutcome};

use crate::support::fixture::{Fixture, on_both_stores};

on_both_stores!(
    random_overlapping_sets_from_16_tasks,
    a_busy_lock_takes_nothing_of_the_set,
    a_multi_lock_and_single_locks_exclude_each_other,
    names_are_a_set_and_bounded,
);

const NAMES: [&str; 8] = ["a", "b", "c", "d", "e", "f", "g", "h"];

/// The case: 16 tasks (two clients) take random overlapping sets of 1..=4 of 8 names,
/// waiting; a flag per name proves no two holders of a name overlap. Every fourth attempt is
/// cancelled at a random point (a timeout shorter than the wait). Afterwards no lock key is
/// left, and the test ends (no deadlock).
async fn random_overlapping_sets_from_16_tasks(fx: Fixture) {
    let held: Arc<Vec<AtomicBool>> =
        Arc::new(NAMES.iter().map(|_| AtomicBool::new(false)).collect());
    let violations = Arc::new(AtomicU32::new(0));
    let completed = Arc::new(AtomicU32::new(0));
    let cancelled = Arc::new(AtomicU32::new(0));
    let other = fx.another_client().await;
    let mut tasks = Vec::new();
    for task in 0..16 {
        let client = if task % 2 == 0 {
            fx.client.clone()
        } else {
            other.clone()
        };
        let (held, violations, completed, cancelled) = (
            held.clone(),
            violations.clone(),
            completed.clone(),
            cancelled.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for round in 0..30 {
                let size = rand::random_range(1..=4);
                let set: BTreeSet<usize> = (0..size)
                    .map(|_| rand::random_range(0..NAMES.len()))
                    .collect();
                let acquire = client
                    .multi_lock(set.iter().map(|&i| NAMES[i]))
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(60))
                    .acquire();
                let multi = if round % 4 == 3 {
                    // Cancelled at a random point, maybe while a group is on the wire.
                    let cut = Duration::from_micros(rand::random_range(0..4000));
                    match tokio::time::timeout(cut, acquire).await {
                        Ok(multi) => multi.expect("acquire"),
                        Err(_) => {
                            cancelled.fetch_add(1, Ordering::SeqCst);
                            continue;
                        }
                    }
                } else {
                    acquire.await.expect("acquire")
                };
                for &i in &set {
                    if held[i].swap(true, Ordering::SeqCst) {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_micros(rand::random_range(0..2000))).await;
                for &i in &set {
                    held[i].store(false, Ordering::SeqCst);
                }
                let outcomes = multi.release().await.expect("release");
                assert!(
                    outcomes.iter().all(|o| *o == ReleaseOutcome::Released),
                    "{outcomes:?}"
                );
                completed.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    let all = async {
        for task in tasks {
            task.await.expect("task");
        }
    };
    tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .expect("no deadlock: every task finished");
    assert_eq!(
        violations.load(Ordering::SeqCst),
        0,
        "two overlapping sets were held at once"
    );
    assert!(completed.load(Ordering::SeqCst) >= 16 * 20);
    eprintln!(
        "multi-lock: {} sets held, {} acquires cancelled",
        completed.load(Ordering::SeqCst),
        cancelled.load(Ordering::SeqCst)
    );
    // Cancelled grants are given back in the background: nothing stays.
    let inspect = fx.client.__inspect();
    let lock_keys: Vec<String> = NAMES
        .iter()
        .map(|n| inspect.lock_key(n).expect("key"))
        .collect();
    for _ in 0..100 {
        let keys = inspect.keys().await.expect("keys");
        if keys.iter().all(|k| !lock_keys.contains(k)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "lock keys left behind: {:?}\n{}",
        inspect.keys().await,
        fx.log()
    );
}

async fn a_busy_lock_takes_nothing_of_the_set(fx: Fixture) {
    let inspect = fx.client.__inspect();
    let single = fx.client.lock("c").acquire().await.expect("c");
    let err = fx
        .client
        .multi_lock(["a", "b", "c", "d"])
        .acquire()
        .await
        .expect_err("c is held");
    match &err {
        LockError::Busy { name, retry_after } => {
            assert_eq!(name, "c");
            assert!(*retry_after <= distlock::DEFAULT_TTL);
        }
        other => panic!("expected Busy for c, got {other}"),
    }
    for name in ["a", "b", "d"] {
        assert!(
            inspect
                .get(&inspect.lock_key(name).expect("key"))
                .await
                .expect("get")
                .is_none(),
            "{name} was left taken"
        );
    }
    // A waiting multi-lock gets the set when c is released.
    let waiter = {
        let client = fx.another_client().await;
        tokio::spawn(async move {
            client
                .multi_lock(["a", "b", "c", "d"])
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    single.release().await.expect("release");
    // A waiter that missed the release would sleep until c's 30 s ttl ran out; the bound
    // tells the two apart with seconds to spare for a busy machine.
    let multi = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the release")
        .expect("task")
        .expect("acquire");
    assert_eq!(multi.leases().len(), 4);
    // A multi-lock's grants are eager: every fence came with the grant.
    let fences: Vec<Option<u64>> = multi.handles().iter().map(|h| h.minted_fence()).collect();
    assert!(
        fences.iter().all(|f| f.is_some_and(|f| f > 0)),
        "{fences:?}"
    );
    multi.release().await.expect("release");
}

async fn a_multi_lock_and_single_locks_exclude_each_other(fx: Fixture) {
    let multi = fx
        .client
        .multi_lock(["x", "y"])
        .acquire()
        .await
        .expect("x and y");
    for name in ["x", "y"] {
        assert!(matches!(
            fx.client.lock(name).acquire().await,
            Err(LockError::Busy { .. })
        ));
    }
    assert!(multi.fence_of("x").is_some() && multi.fence_of("z").is_none());
    let handle = multi.handle();
    assert!(!handle.is_lost());
    multi.release().await.expect("release");
    assert!(handle.is_lost(), "released leases count as ended");
    let value = fx
        .client
        .multi_lock(["x", "y"])
        .run(|set| async move { set.handles().len() })
        .await
        .expect("run");
    assert_eq!(value, 2);
    fx.client
        .lock("x")
        .acquire()
        .await
        .expect("free after run")
        .release()
        .await
        .expect("release");
}

async fn names_are_a_set_and_bounded(fx: Fixture) {
    let multi = fx
        .client
        .multi_lock(["same", "same", "other"])
        .acquire()
        .await
        .expect("a name given twice counts once");
    assert_eq!(multi.leases().len(), 2);
    multi.release().await.expect("release");
    let none: [&str; 0] = [];
    let err = fx
        .client
        .multi_lock(none)
        .acquire()
        .await
        .expect_err("empty");
    assert!(matches!(err, LockError::InvalidConfig { .. }), "{err}");
    let many: Vec<String> = (0..=MAX_MULTI_LOCK).map(|i| format!("n{i}")).collect();
    let err = fx
        .client
        .multi_lock(many)
        .acquire()
        .await
        .expect_err("too many");
    assert!(matches!(err, LockError::InvalidConfig { .. }), "{err}");
    let err = fx
        .client
        .multi_lock(["ok", ""])
        .acquire()
        .await
        .expect_err("an empty name");
    assert!(matches!(err, LockError::InvalidName(_)), "{err}");
    let inspect = fx.client.__inspect();
    let keys = inspect.keys().await.expect("keys");
    for name in ["same", "other", "ok", "n0"] {
        let key = inspect.lock_key(name).expect("key");
        assert!(!keys.contains(&key), "{key} left behind or written");
    }
}
