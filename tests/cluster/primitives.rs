//! Semaphores, read-write locks, multi-locks and jobs on a real Redis Cluster: every script of
//! a semaphore or a read-write lock stays in its name's slot; a multi-lock across slots takes
//! its groups in slot order with rollback, never holding two overlapping sets at once and
//! leaving nothing behind.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use distlock::LockError;

use crate::locks::{client, names_on_every_master};
use crate::support::cluster::{RedisCluster, slot_of};
use crate::support::semaphore::{Workload, most_inside};

/// 12 tasks over two clients on a semaphore of 3, for names on every master: never more than
/// 3 inside; every key of the semaphore in the name's slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_on_every_master_never_exceed_their_permits() {
    let cluster = RedisCluster::shared();
    let a = client(cluster, "sem").await;
    let b = client(cluster, "sem").await;
    let names = names_on_every_master(cluster, &a, 1).await;
    for name in &names {
        let key = a.__inspect().semaphore_key(name).expect("key");
        let lock_slot = slot_of(a.__inspect().lock_key(name).expect("key"));
        assert_eq!(slot_of(&key), lock_slot, "{name}");
    }
    // Every name's tasks at once.
    let runs: Vec<_> = names
        .iter()
        .map(|name| {
            let work = Workload {
                name: name.clone(),
                permits: 3,
                tasks: 12,
                rounds: 8,
                ttl: None,
                max_hold: Duration::from_millis(4),
            };
            tokio::spawn(most_inside(a.clone(), b.clone(), work))
        })
        .collect();
    let mut most = 0;
    for run in runs {
        most = most.max(run.await.expect("run"));
    }
    assert!(
        most <= 3,
        "{most} inside a semaphore of 3\n{}",
        cluster.logs()
    );
    assert_eq!(most, 3);
}

/// Readers overlap, a writer is alone, on a name of each master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rw_locks_on_every_master() {
    let cluster = RedisCluster::shared();
    let client = client(cluster, "rw").await;
    for name in names_on_every_master(cluster, &client, 1).await {
        let rw = || client.rw_lock(&name).wait(Duration::from_secs(5));
        let r1 = rw().read().await.expect("read");
        let r2 = rw().read().await.expect("read");
        let read_fence = r2.fence().await.expect("fence");
        let writer = {
            let client = client.clone();
            let name = name.clone();
            tokio::spawn(async move {
                client
                    .rw_lock(&name)
                    .wait(Duration::from_secs(5))
                    .write()
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The waiting writer keeps new readers out.
        assert!(matches!(
            client.rw_lock(&name).read().await,
            Err(LockError::Busy { .. })
        ));
        r1.release().await.expect("release");
        r2.release().await.expect("release");
        let w = tokio::time::timeout(Duration::from_secs(2), writer)
            .await
            .expect("woken by the readers' releases")
            .expect("task")
            .expect("write");
        assert!(w.fence().await.expect("fence") > read_fence);
        w.release().await.expect("release");
    }
}

/// The multi-lock case across slots: 12 tasks take random overlapping sets of 1..=4
/// of 6 names spread over every master (so most sets span slots and nodes), some acquires
/// cancelled: no two overlapping sets at once, no deadlock, no lock key left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_locks_across_slots_with_rollback() {
    let cluster = RedisCluster::shared();
    let a = client(cluster, "multi").await;
    let b = client(cluster, "multi").await;
    let names = names_on_every_master(cluster, &a, 2).await;
    let held: Arc<Vec<AtomicBool>> =
        Arc::new(names.iter().map(|_| AtomicBool::new(false)).collect());
    let violations = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for task in 0..12 {
        let client = if task % 2 == 0 { a.clone() } else { b.clone() };
        let (names, held, violations) = (names.clone(), held.clone(), violations.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..15 {
                let set: std::collections::BTreeSet<usize> = (0..rand::random_range(1..=4))
                    .map(|_| rand::random_range(0..names.len()))
                    .collect();
                let acquire = client
                    .multi_lock(set.iter().map(|&i| names[i].clone()))
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(60))
                    .acquire();
                let multi = if round % 5 == 4 {
                    let cut = Duration::from_micros(rand::random_range(0..3000));
                    match tokio::time::timeout(cut, acquire).await {
                        Ok(multi) => multi.expect("acquire"),
                        Err(_) => continue,
                    }
                } else {
                    acquire.await.expect("acquire")
                };
                for &i in &set {
                    if held[i].swap(true, Ordering::SeqCst) {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(rand::random_range(0..3))).await;
                for &i in &set {
                    held[i].store(false, Ordering::SeqCst);
                }
                multi.release().await.expect("release");
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
        .expect("no deadlock");
    assert_eq!(
        violations.load(Ordering::SeqCst),
        0,
        "overlapping sets held at once"
    );
    let inspect = a.__inspect();
    let lock_keys: Vec<String> = names
        .iter()
        .map(|n| inspect.lock_key(n).expect("key"))
        .collect();
    // A cancelled acquire gives its grants back in the background. Expiry would clear them
    // only after the 5 s ttl, so keys gone well before that were given back. The wait is
    // bounded by the clock, not by a count of polls, so a slow `KEYS` on a busy machine
    // does not eat the margin.
    let deadline = std::time::Instant::now() + Duration::from_secs(4);
    while std::time::Instant::now() < deadline {
        let keys = inspect.keys().await.expect("keys");
        if keys.iter().all(|k| !lock_keys.contains(k)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("lock keys left behind: {:?}", inspect.keys().await);
}

/// A job keeps `at_least` on a cluster too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_keeps_at_least_on_a_cluster() {
    let cluster = RedisCluster::shared();
    let client = client(cluster, "job").await;
    let job = || {
        client
            .job("cluster-job")
            .ttl(Duration::from_millis(200))
            .at_least(Duration::from_millis(600))
    };
    assert_eq!(job().run(|_| async { 1 }).await.expect("run"), Some(1));
    assert_eq!(job().run(|_| async { 2 }).await.expect("run"), None);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(job().run(|_| async { 3 }).await.expect("run"), Some(3));
}
