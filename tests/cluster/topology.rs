//! The library while the cluster changes under it (TESTPLAN 32 and 33): slots holding live
//! leases, waiters and rate-limit subjects migrate under load, and a master holding leases is
//! killed. Each test has a cluster of its own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use distlock::ratelimit::{Policy, Rate};
use distlock::{Client, Lease, ReleaseOutcome};

use crate::locks::client;
use crate::support::cluster::{RedisCluster, slot_of};

/// Lock names (and a rate-limit subject) whose keys all live in the slots of one master:
/// `count` names, in at most `slots` slots. Returns the names and their slots.
async fn names_on_one_master(
    cluster: &RedisCluster,
    client: &Client,
    count: usize,
) -> (Vec<String>, Vec<u16>) {
    let master = cluster.masters().await[0].id().to_owned();
    let mut names = Vec::new();
    let mut slots = Vec::new();
    let mut i = 0;
    while names.len() < count {
        let name = format!("moving:{i}");
        i += 1;
        let slot = slot_of(client.__inspect().lock_key(&name).expect("name"));
        if cluster.master_of_slot(slot).await.id() == master {
            names.push(name);
            slots.push(slot);
        }
    }
    slots.sort_unstable();
    slots.dedup();
    (names, slots)
}

/// Lock `name` of `client`, held for 10 s, with the fence it minted while held.
async fn fenced_lease(client: &Client, name: &str) -> (Lease, u64) {
    let lease = client
        .lock(name)
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquire");
    let fence = lease.fence().await.expect("fence");
    (lease, fence)
}

/// TESTPLAN 32: while 8 tasks lock names in slots being migrated (holding, waiting, releasing)
/// and 8 tasks check a rate limit on a subject in a migrating slot, those slots move to
/// another master (with their leases, fence keys and rate-limit state). Afterwards: no two
/// holders were ever inside at once, the fences of each name increased in grant order, the
/// rate limit let exactly its limit through, every operation succeeded (redirects were
/// followed, never surfaced), and no waiter waited anywhere near the holders' ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resharding_under_load_keeps_every_promise() {
    const LIMIT: u32 = 300;
    let cluster = RedisCluster::start();
    let setup = client(&cluster, "reshard").await;
    let (names, slots) = names_on_one_master(&cluster, &setup, 4).await;
    // The rate-limit subject: one that lands in the first moving slot.
    let limiter_probe = setup
        .rate_limiter(Policy::gcra("quota", Rate::per_day(LIMIT).expect("rate")).expect("policy"))
        .build()
        .expect("valid limiter");
    let subject = (0..)
        .map(|i| format!("tenant:{i}"))
        .find(|s| slot_of(&limiter_probe.__keys(s).expect("keys")[0]) == slots[0])
        .expect("a subject in the slot");
    let slots = {
        let mut all = slots;
        all.sort_unstable();
        all
    };

    let stop = Arc::new(AtomicBool::new(false));
    let inside: Arc<BTreeMap<String, AtomicBool>> = Arc::new(
        names
            .iter()
            .map(|n| (n.clone(), AtomicBool::new(false)))
            .collect(),
    );
    let last_fence: Arc<BTreeMap<String, AtomicU64>> = Arc::new(
        names
            .iter()
            .map(|n| (n.clone(), AtomicU64::new(0)))
            .collect(),
    );
    let mut lockers = Vec::new();
    for t in 0..8 {
        let client = client(&cluster, "reshard").await;
        let (names, stop, inside, last_fence) = (
            names.clone(),
            stop.clone(),
            inside.clone(),
            last_fence.clone(),
        );
        lockers.push(tokio::spawn(async move {
            let mut sections = 0u64;
            let mut longest = Duration::ZERO;
            let mut i = t;
            while !stop.load(Ordering::Relaxed) {
                let name = &names[i % names.len()];
                i += 1;
                let asked = Instant::now();
                let lease = client
                    .lock(name)
                    .ttl(Duration::from_secs(2))
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                    .unwrap_or_else(|e| panic!("acquire {name} during resharding: {e}"));
                longest = longest.max(asked.elapsed());
                assert!(
                    !inside[name].swap(true, Ordering::SeqCst),
                    "two holders of {name}"
                );
                let fence = lease.fence().await.expect("fence");
                let previous = last_fence[name].swap(fence, Ordering::SeqCst);
                assert!(fence > previous, "{name}: fence {fence} after {previous}");
                tokio::time::sleep(Duration::from_millis(rand::random_range(0..20))).await;
                inside[name].store(false, Ordering::SeqCst);
                assert!(!lease.is_lost(), "{name} lost: {:?}", lease.lost_reason());
                assert_eq!(
                    lease.release().await.expect("release during resharding"),
                    ReleaseOutcome::Released
                );
                sections += 1;
            }
            (sections, longest)
        }));
    }
    let allowed = Arc::new(AtomicU64::new(0));
    let mut checkers = Vec::new();
    for _ in 0..8 {
        let client = client(&cluster, "reshard").await;
        let limiter = client
            .rate_limiter(
                Policy::gcra("quota", Rate::per_day(LIMIT).expect("rate")).expect("policy"),
            )
            .deny_cache(0)
            .build()
            .expect("valid limiter");
        let (stop, allowed, subject) = (stop.clone(), allowed.clone(), subject.clone());
        checkers.push(tokio::spawn(async move {
            let mut checks = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let decision = limiter
                    .check(&subject)
                    .await
                    .unwrap_or_else(|e| panic!("check during resharding: {e}"));
                if decision.allowed {
                    allowed.fetch_add(1, Ordering::SeqCst);
                }
                checks += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            checks
        }));
    }

    // Let the load run, then move every slot of the names (leases held, waiters asleep, the
    // limiter's state and the fence keys in them) to another master, one at a time.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let target = cluster.masters().await[1];
    let target_id = target.id().to_owned();
    for &slot in &slots {
        let target = cluster.node(&target_id);
        let mut migration = cluster.begin_migration(slot, target).await;
        // Half the keys moved, half not: clients meet ASK here.
        migration.move_keys(1).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        migration.finish().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);

    let mut sections = 0;
    let mut longest = Duration::ZERO;
    for locker in lockers {
        let (s, l) = locker.await.expect("locker");
        sections += s;
        longest = longest.max(l);
    }
    let mut checks = 0;
    for checker in checkers {
        checks += checker.await.expect("checker");
    }
    for &slot in &slots {
        assert_eq!(
            cluster.master_of_slot(slot).await.id(),
            target_id,
            "slot {slot} did not move"
        );
    }
    assert!(sections > 50, "only {sections} sections");
    assert!(checks > u64::from(LIMIT), "only {checks} checks");
    assert_eq!(
        allowed.load(Ordering::SeqCst),
        u64::from(LIMIT),
        "the rate limit let through a different number than its limit across the migration"
    );
    assert!(
        longest < Duration::from_secs(2),
        "a waiter waited {longest:?}, as long as a holder's ttl: a wake-up was lost"
    );
}

/// TESTPLAN 33: a master holding leases is SIGKILLed and its replica promoted. Leases the
/// replica had stay valid (renewals reach the new master); leases granted while the replica
/// was frozen were never replicated, so a second client is granted them after the failover
/// (asynchronous replication: the double grant exists), with a greater fence, and the first
/// holder reports the loss at its next renewal. The window in which both believed they held
/// a lock is measured and printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_keeps_leases_valid_or_reported_lost() {
    let cluster = RedisCluster::start();
    let a = client(&cluster, "failover").await;
    let b = client(&cluster, "failover").await;
    let (names, _) = names_on_one_master(&cluster, &a, 8).await;
    let master = cluster.masters().await[0];
    let replica = cluster.replicas_of(master).await[0];
    // Half the leases have reached the replica; the other half are granted while the replica
    // is frozen, so the promoted replica has never seen them: the double-grant case.
    // Each lease mints its fence lazily, at once, while it holds its lock.
    let mut leases = Vec::new();
    for name in &names[..4] {
        leases.push(fenced_lease(&a, name).await);
    }
    cluster.wait_replication_synced().await;
    cluster.stop_node(replica);
    // Cut the replication link too, or the frozen replica would find the grants waiting in
    // its socket when it resumes.
    let mut conn = master.conn().await;
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query_async(&mut conn)
        .await
        .expect("CLIENT KILL TYPE replica");
    for name in &names[4..] {
        leases.push(fenced_lease(&a, name).await);
    }
    let killed_at = Instant::now();
    cluster.kill_node(master);
    cluster.cont_node(replica);
    cluster.wait_settled().await;
    eprintln!(
        "failover: the cluster served again {:?} after the kill",
        killed_at.elapsed()
    );

    // Second client: takes every name it can once the cluster serves again.
    let mut double_grants = Vec::new();
    for ((lease, first_fence), name) in leases.iter().zip(&names) {
        let taken = loop {
            match b.lock(name).ttl(Duration::from_secs(10)).acquire().await {
                Ok(lease) => break Some(lease),
                Err(distlock::LockError::Busy { .. }) => break None,
                // The cluster may still be settling: redirects and CLUSTERDOWN are retried.
                Err(distlock::LockError::Store(_))
                    if killed_at.elapsed() < Duration::from_secs(20) =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("{name}: {e}"),
            }
        };
        if let Some(second) = taken {
            // Minted lazily on the promoted replica, whose fence key may be behind: re-seeded
            // from its clock, it is still above the first holder's.
            let second_fence = second.fence().await.expect("fence");
            assert!(
                second_fence > *first_fence,
                "{name}: the second holder's fence {second_fence} is not above the first's \
                 {first_fence}"
            );
            if !lease.is_lost() {
                // Both believe they hold it: how long until the first learns otherwise?
                let granted = Instant::now();
                tokio::time::timeout(Duration::from_secs(10), lease.lost())
                    .await
                    .unwrap_or_else(|_| panic!("{name}: the first holder never saw its loss"));
                double_grants.push(granted.elapsed());
            }
            second.release().await.expect("release");
        }
    }
    // Every lease still believed valid is really held on the new master.
    for ((lease, _), name) in leases.iter().zip(&names) {
        if lease.is_lost() {
            continue;
        }
        let key = a.__inspect().lock_key(name).expect("name");
        let value = a.__inspect().get(&key).await.expect("GET");
        assert!(
            value.is_some(),
            "{name}: believed valid, but the key is gone"
        );
    }
    let kept = leases.iter().filter(|(l, _)| !l.is_lost()).count();
    eprintln!(
        "failover: {kept} of {} leases stayed valid; double grants {}: {:?} until the first \
         holder saw its loss",
        leases.len(),
        double_grants.len(),
        double_grants
    );
    assert!(
        kept >= 4,
        "leases replicated before the kill were lost: {kept} kept"
    );
    for window in &double_grants {
        assert!(
            *window < Duration::from_secs(10) / 3 + Duration::from_secs(1),
            "a double grant lasted {window:?}, more than one renewal interval"
        );
    }
    for (lease, _) in leases {
        let _ = lease.release().await;
    }
}
