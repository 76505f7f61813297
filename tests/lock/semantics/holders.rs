//! Who holds the lock: one holder at a time, one winner among simultaneous tries, fences
//! in grant order; what an expired owner can no longer do (release, extend), what a busy
//! lock reports; names and input.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{LockError, LossReason, ReleaseOutcome, safety_margin};
use rand::Rng;
use tokio::time::Instant;

use crate::support::fixture::Fixture;

/// Sorts hold intervals and returns the first overlapping pair, if any.
fn overlap(
    intervals: &mut [(Instant, Instant)],
) -> Option<((Instant, Instant), (Instant, Instant))> {
    intervals.sort_by_key(|i| i.0);
    intervals
        .windows(2)
        .find(|w| w[1].0 < w[0].1)
        .map(|w| (w[0], w[1]))
}

/// TESTPLAN 1: 16 tasks × 500 critical sections on one key, each a non-atomic read-modify-write.
pub(super) async fn mutual_exclusion_16_tasks(fx: Fixture) {
    const TASKS: usize = 16;
    const SECTIONS: usize = 500;
    let counter = Arc::new(AtomicU64::new(0));
    let intervals = Arc::new(Mutex::new(Vec::with_capacity(TASKS * SECTIONS)));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let client = fx.another_client().await;
        let counter = counter.clone();
        let intervals = intervals.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..SECTIONS {
                let lease = client
                    .lock("exclusion")
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("acquire");
                let start = Instant::now();
                let seen = counter.load(Ordering::SeqCst);
                if rand::rng().random_bool(0.5) {
                    tokio::task::yield_now().await;
                } else {
                    let us = rand::rng().random_range(0..2000);
                    tokio::time::sleep(Duration::from_micros(us)).await;
                }
                counter.store(seen + 1, Ordering::SeqCst);
                let end = Instant::now();
                intervals.lock().expect("intervals").push((start, end));
                assert_eq!(
                    lease.release().await.expect("release"),
                    ReleaseOutcome::Released
                );
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(
        counter.load(Ordering::SeqCst),
        (TASKS * SECTIONS) as u64,
        "lost updates: two holders overlapped"
    );
    let mut intervals = intervals.lock().expect("intervals").clone();
    assert_eq!(intervals.len(), TASKS * SECTIONS);
    assert_eq!(overlap(&mut intervals), None, "two hold intervals overlap");
}

/// TESTPLAN 1: 125 tasks try at the same instant without waiting: exactly one wins.
pub(super) async fn exactly_one_winner_of_125_simultaneous_tries(fx: Fixture) {
    const TRIES: usize = 125;
    let barrier = Arc::new(tokio::sync::Barrier::new(TRIES));
    let mut tasks = Vec::new();
    for i in 0..TRIES {
        let client = if i % 5 == 0 {
            fx.another_client().await
        } else {
            fx.client.clone()
        };
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            client
                .lock("one-winner")
                .ttl(Duration::from_secs(10))
                .acquire()
                .await
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        match task.await.expect("task") {
            Ok(lease) => winners.push(lease),
            Err(LockError::Busy { retry_after, .. }) => {
                assert!(
                    retry_after <= Duration::from_secs(10),
                    "retry_after {retry_after:?}"
                );
            }
            Err(other) => panic!("unexpected error: {other}\n{}", fx.log()),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one of {TRIES} must win");
}

/// TESTPLAN 2: A's lease expires and B takes the lock; A's release and extend change nothing.
/// Extending an expired, unclaimed lock does not re-create it.
pub(super) async fn release_and_extend_after_expiry_touch_nothing(fx: Fixture) {
    let inspect = fx.client.__inspect();
    let key = inspect.lock_key("expiry").expect("key");
    let a = fx
        .client
        .lock("expiry")
        .ttl(Duration::from_millis(300))
        .watchdog(false)
        .acquire()
        .await
        .expect("A acquires");
    // Minted while held, and kept: asked again once lost, it answers the same.
    let a_fence = a.fence().await.expect("fence");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(a.is_lost(), "A is past its deadline");
    assert_eq!(a.lost_reason(), Some(LossReason::Expired));

    let other = fx.another_client().await;
    let b = other
        .lock("expiry")
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .expect("B acquires after A expired");
    assert!(b.fence().await.expect("fence") > a_fence);
    assert_eq!(
        a.fence().await.ok(),
        Some(a_fence),
        "a minted fence is kept"
    );
    let before = fx.expiry(&key).await;
    assert!(before.exists(), "B's key exists");

    let err = a
        .extend(Duration::from_secs(10))
        .await
        .expect_err("A cannot extend");
    assert!(matches!(err, LockError::LeaseLost { .. }), "{err}");
    assert_eq!(
        a.release().await.expect("release"),
        ReleaseOutcome::HeldByOther
    );

    // B's key keeps its expiry: the two reads' windows overlap (a read's window widens with
    // a slow machine, never moves), so neither an earlier nor a later expiry was set.
    let after = fx.expiry(&key).await;
    assert!(after.exists(), "B's key survives A");
    assert!(
        after.latest() >= before.earliest() && after.earliest() <= before.latest(),
        "B's ttl was touched: {before:?} -> {after:?}"
    );
    assert_eq!(
        b.release().await.expect("release"),
        ReleaseOutcome::Released
    );

    // Expired and unclaimed: extend must not re-create the key.
    let c = fx
        .client
        .lock("expiry")
        .ttl(Duration::from_millis(200))
        .watchdog(false)
        .acquire()
        .await
        .expect("C acquires");
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Bypass the local deadline check: go to the store even though C knows it is lost.
    let err = c
        .extend(Duration::from_secs(10))
        .await
        .expect_err("C cannot extend");
    assert!(matches!(err, LockError::LeaseLost { .. }), "{err}");
    assert_eq!(
        inspect.pttl(&key).await.expect("pttl"),
        None,
        "extend re-created the key"
    );
    assert_eq!(
        c.release().await.expect("release"),
        ReleaseOutcome::AlreadyExpired
    );
}

/// TESTPLAN 2: 1000 jittered repetitions, 100 at a time on distinct keys: whatever the timing,
/// a stale owner's release never frees the next owner's lock, and a stale extend never
/// re-creates a key.
pub(super) async fn stale_owner_never_disturbs_the_next_one(fx: Fixture) {
    const REPS: usize = 1000;
    const CONCURRENT: usize = 100;
    let other = fx.another_client().await;
    let violations = Arc::new(AtomicUsize::new(0));
    let takeovers = Arc::new(AtomicUsize::new(0));
    for round in 0..REPS / CONCURRENT {
        let mut tasks = Vec::new();
        for i in 0..CONCURRENT {
            let (a_client, b_client) = (fx.client.clone(), other.clone());
            let violations = violations.clone();
            let takeovers = takeovers.clone();
            tasks.push(tokio::spawn(async move {
                let name = format!("stale:{round}:{i}");
                let inspect = a_client.__inspect();
                let key = inspect.lock_key(&name).expect("key");
                let a = a_client
                    .lock(&name)
                    .ttl(Duration::from_millis(30))
                    .watchdog(false)
                    .acquire()
                    .await
                    .expect("A acquires");
                let jitter = rand::rng().random_range(0..60);
                tokio::time::sleep(Duration::from_millis(jitter)).await;
                let b_called = Instant::now();
                let b = b_client
                    .lock(&name)
                    .ttl(Duration::from_secs(5))
                    .acquire()
                    .await;
                if rand::rng().random_bool(0.5) {
                    let _ = a.extend(Duration::from_secs(5)).await;
                    drop(a);
                } else {
                    let _ = a.release().await;
                }
                match b {
                    Ok(b) => {
                        takeovers.fetch_add(1, Ordering::Relaxed);
                        // B must still hold its key, with B's long ttl: granted after
                        // `b_called`, it cannot expire before 5 s after that.
                        // (The read's answer plus the PTTL is the latest it can expire.)
                        let pttl = inspect.pttl(&key).await.expect("pttl");
                        let latest = pttl.map(|p| Instant::now() + p + Duration::from_millis(1));
                        if latest.is_none_or(|l| l < b_called + Duration::from_secs(5)) {
                            violations.fetch_add(1, Ordering::Relaxed);
                        }
                        if b.release().await.expect("release") != ReleaseOutcome::Released {
                            violations.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(LockError::Busy { .. }) => {}
                    Err(other) => panic!("unexpected: {other}"),
                }
            }));
        }
        for task in tasks {
            task.await.expect("task");
        }
    }
    assert_eq!(
        violations.load(Ordering::Relaxed),
        0,
        "a stale owner disturbed the next one"
    );
    // A jitter past the ttl (half of them) always ends in a takeover, the case with
    // something to check. Where nothing runs late, the jitter straddles the ttl: both orders
    // happen. (On a busy machine B's attempt may always come after A's expiry.)
    let takeovers = takeovers.load(Ordering::Relaxed);
    assert!(takeovers > 0, "no takeover in {REPS} repetitions");
    if fx.paused() {
        assert!(
            takeovers < REPS,
            "takeovers {takeovers}: the jitter did not straddle the ttl"
        );
    }
}

/// TESTPLAN 3: 10 clients × 1000 acquisitions: fences strictly increase in grant order.
pub(super) async fn fences_strictly_increase_in_grant_order(fx: Fixture) {
    const CLIENTS: usize = 10;
    const EACH: usize = 1000;
    let grants = Arc::new(Mutex::new(Vec::with_capacity(CLIENTS * EACH)));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let client = fx.another_client().await;
        let grants = grants.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..EACH {
                let lease = client
                    .lock("fenced")
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("acquire");
                // Recorded while holding, so the order of the vector is the grant order.
                let fence = lease.fence().await.expect("fence");
                grants.lock().expect("grants").push(fence);
                lease.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let grants = grants.lock().expect("grants").clone();
    assert_eq!(grants.len(), CLIENTS * EACH);
    if let Some(w) = grants.windows(2).find(|w| w[1] <= w[0]) {
        panic!("fence went from {} to {}", w[0], w[1]);
    }
    assert_eq!(
        grants.iter().collect::<HashSet<_>>().len(),
        grants.len(),
        "duplicate fences"
    );
}

/// Deleting the fence key (expiry, or a failover that lost it) does not make fences go back.
pub(super) async fn fence_keeps_increasing_after_its_key_is_lost(fx: Fixture) {
    let inspect = fx.client.__inspect();
    let mut last = 0;
    for _ in 0..5 {
        let lease = fx.client.lock("refenced").acquire().await.expect("acquire");
        assert!(
            lease.fence().await.expect("fence") > last,
            "{} <= {last}",
            lease.fence().await.expect("fence")
        );
        last = lease.fence().await.expect("fence");
        lease.release().await.expect("release");
        assert!(
            inspect
                .delete(&inspect.fence_key("refenced").expect("key"))
                .await
                .expect("delete")
        );
    }
}

pub(super) async fn extend_resets_the_ttl_and_refuses_a_lost_lease(fx: Fixture) {
    let inspect = fx.client.__inspect();
    let key = inspect.lock_key("extend").expect("key");
    let lease = fx
        .client
        .lock("extend")
        .ttl(Duration::from_millis(500))
        .watchdog(false)
        .acquire()
        .await
        .expect("acquire");
    let extended = Instant::now();
    lease.extend(Duration::from_secs(20)).await.expect("extend");
    // Sent after `extended`: the key lives 20 s from then at least, and the lease trusts it
    // until then minus the margin.
    let read = fx.expiry(&key).await;
    let latest = read.latest().expect("exists");
    assert!(
        latest >= extended + Duration::from_secs(20),
        "the extend did not reset the ttl: {read:?}"
    );
    let deadline = Instant::now() + lease.valid_for();
    assert!(
        deadline >= extended + Duration::from_secs(20) - safety_margin(Duration::from_secs(20)),
        "the extend did not move the deadline"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!lease.is_lost(), "the extension moved the deadline");

    assert!(inspect.delete(&key).await.expect("delete"));
    let err = lease
        .extend(Duration::from_secs(20))
        .await
        .expect_err("gone");
    assert!(
        matches!(
            err,
            LockError::LeaseLost {
                reason: LossReason::NotHeld,
                ..
            }
        ),
        "{err}"
    );
    assert!(lease.is_lost());
    assert_eq!(
        inspect.pttl(&key).await.expect("pttl"),
        None,
        "extend re-created the key"
    );
    let err = lease
        .extend(Duration::from_millis(1))
        .await
        .expect_err("below minimum");
    assert!(matches!(err, LockError::InvalidConfig { .. }), "{err}");
}

pub(super) async fn busy_reports_the_holders_remaining_ttl(fx: Fixture) {
    const TTL: Duration = Duration::from_secs(7);
    let called = Instant::now();
    let holder = fx
        .client
        .lock("busy")
        .ttl(Duration::from_secs(7))
        .acquire()
        .await
        .expect("holder");
    let other = fx.another_client().await;
    let err = other.lock("busy").acquire().await.expect_err("busy");
    let answered = Instant::now();
    match err {
        LockError::Busy { name, retry_after } => {
            assert_eq!(name, "busy");
            // The key's pttl when the attempt ran: the key was granted after `called`, so
            // it lives until 7 s after that at least, and the attempt ran before `answered`
            // (1 ms: the store's millisecond expiries).
            assert!(
                retry_after <= TTL
                    && answered <= called + TTL
                    && retry_after + Duration::from_millis(1) >= (called + TTL) - answered,
                "{retry_after:?}"
            );
        }
        other => panic!("expected Busy, got {other}"),
    }
    holder.release().await.expect("release");
}

/// Bad input gets a clear error and writes nothing.
pub(super) async fn invalid_input_is_refused_and_writes_nothing(fx: Fixture) {
    let inspect = fx.client.__inspect();
    let err = fx.client.lock("").acquire().await.expect_err("empty name");
    assert!(
        matches!(err, LockError::InvalidName(distlock::InvalidName::Empty)),
        "{err}"
    );
    let err = fx
        .client
        .lock("x".repeat(distlock::MAX_NAME_LEN + 1))
        .acquire()
        .await
        .expect_err("long name");
    assert!(err.to_string().contains("limit is 512 bytes"), "{err}");
    let err = fx
        .client
        .lock("ok")
        .ttl(Duration::ZERO)
        .acquire()
        .await
        .expect_err("zero ttl");
    assert!(
        matches!(err, LockError::InvalidConfig { .. }) && err.to_string().contains("ttl"),
        "{err}"
    );
    let err = fx
        .client
        .lock("ok")
        .ttl(Duration::from_secs(3600 * 24 * 365))
        .acquire()
        .await
        .expect_err("huge ttl");
    assert!(matches!(err, LockError::InvalidConfig { .. }), "{err}");
    let err = fx
        .client
        .lock("ok")
        .max_hold(Duration::ZERO)
        .run(|_| async {})
        .await
        .expect_err("zero max_hold");
    assert!(matches!(err, LockError::InvalidConfig { .. }), "{err}");
    assert!(
        inspect.keys().await.expect("keys").is_empty(),
        "invalid input wrote keys"
    );
}

/// TESTPLAN 23 (on the stores): names that differ only by characters the encoding escapes are
/// different locks, each lock key carries its name as the library's hash tag, and all share the
/// prefix's one fence key.
pub(super) async fn names_that_look_alike_are_different_locks(fx: Fixture) {
    let names = [
        "a{b}",
        "a%7Bb%7D",
        "a%7Bb}",
        "{a}b",
        "a:b",
        "a",
        "a\u{0}",
        "ünï{cødé}",
    ];
    let mut leases = Vec::new();
    for name in names {
        leases.push(
            fx.client
                .lock(name)
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("{name:?}: {e}")),
        );
    }
    let inspect = fx.client.__inspect();
    let keys = inspect.keys().await.expect("keys");
    let lock_keys: HashSet<&String> = keys.iter().filter(|k| k.contains(":lock:")).collect();
    assert_eq!(lock_keys.len(), names.len(), "{keys:?}");
    for name in names {
        let lock = inspect.lock_key(name).expect("key");
        assert_eq!(
            inspect.fence_key(name).expect("key"),
            format!("{}:fence", fx.client.prefix())
        );
        assert!(!distlock::hash_tag(&lock).contains(['{', '}']));
        assert!(keys.contains(&lock), "{lock} missing from {keys:?}");
    }
    for lease in leases {
        assert_eq!(
            lease.release().await.expect("release"),
            ReleaseOutcome::Released
        );
    }
}
