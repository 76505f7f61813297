//! Lock semantics that hold on every store: each test runs on Redis and in memory.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{LockError, LossReason, ReleaseOutcome, safety_margin};
use rand::Rng;
use tokio::time::Instant;

use crate::support::fixture::{Fixture, on_both_stores};

on_both_stores!(
    mutual_exclusion_16_tasks,
    exactly_one_winner_of_125_simultaneous_tries,
    release_and_extend_after_expiry_touch_nothing,
    fences_strictly_increase_in_grant_order,
    fence_keeps_increasing_after_its_key_is_lost,
    cancellation_and_drop_leave_nothing_behind,
    panic_in_critical_section_releases_the_lock,
    many_waiters_leave_no_subscription_behind,
    waiters_of_one_client_are_woken_release_by_release,
    reentrant_run_joins_the_outer_lease,
    non_reentrant_run_waits_for_itself,
    extend_resets_the_ttl_and_refuses_a_lost_lease,
    busy_reports_the_holders_remaining_ttl,
    invalid_input_is_refused_and_writes_nothing,
    names_that_look_alike_are_different_locks,
);

// Bodies whose timing matters: on Redis they check what holds whatever the scheduling; on
// tokio's paused clock (memory), where nothing runs late, the exact bounds as well.
on_both_stores!(
    paused_memory: stale_owner_never_disturbs_the_next_one,
    watchdog_keeps_a_long_hold_alive,
    missed_wakeup_costs_at_most_one_pttl,
    run_ends_the_body_when_the_lease_is_lost,
    watchdog_off_lease_is_lost_at_its_deadline,
    max_hold_bounds_the_hold,
);

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
async fn mutual_exclusion_16_tasks(fx: Fixture) {
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
async fn exactly_one_winner_of_125_simultaneous_tries(fx: Fixture) {
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
async fn release_and_extend_after_expiry_touch_nothing(fx: Fixture) {
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
    assert!(b.fence() > a.fence());
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
async fn stale_owner_never_disturbs_the_next_one(fx: Fixture) {
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
async fn fences_strictly_increase_in_grant_order(fx: Fixture) {
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
                grants.lock().expect("grants").push(lease.fence());
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
async fn fence_keeps_increasing_after_its_key_is_lost(fx: Fixture) {
    let inspect = fx.client.__inspect();
    let mut last = 0;
    for _ in 0..5 {
        let lease = fx.client.lock("refenced").acquire().await.expect("acquire");
        assert!(lease.fence() > last, "{} <= {last}", lease.fence());
        last = lease.fence();
        lease.release().await.expect("release");
        assert!(
            inspect
                .delete(&inspect.fence_key("refenced").expect("key"))
                .await
                .expect("delete")
        );
    }
}

/// TESTPLAN 5: acquire futures dropped at random points, leases dropped without release and
/// panics in 1% of critical sections; afterwards no lock keys, no renewals, no watched leases
/// and no subscriptions remain.
async fn cancellation_and_drop_leave_nothing_behind(fx: Fixture) {
    const SOAK: Duration = Duration::from_secs(8);
    const TTL: Duration = Duration::from_millis(500);
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new([
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    ]);
    let mut tasks = Vec::new();
    for t in 0..8 {
        let client = if t % 2 == 0 {
            fx.another_client().await
        } else {
            fx.client.clone()
        };
        let (stop, stats) = (stop.clone(), stats.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let name = format!("soak:{}", rand::rng().random_range(0..4));
                let cancel_after = Duration::from_micros(rand::rng().random_range(0..3000));
                let acquire = client
                    .lock(&name)
                    .ttl(TTL)
                    .wait(Duration::from_millis(50))
                    .acquire();
                let Ok(Ok(lease)) = tokio::time::timeout(cancel_after, acquire).await else {
                    stats[0].fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let roll = rand::rng().random_range(0..100);
                if roll == 0 {
                    stats[2].fetch_add(1, Ordering::Relaxed);
                    // A panic inside the critical section: the lease is dropped while unwinding.
                    let crashed = tokio::spawn(async move {
                        let _held = lease;
                        tokio::task::yield_now().await;
                        panic!("simulated crash inside a critical section");
                    });
                    assert!(crashed.await.is_err());
                } else if roll < 50 {
                    stats[1].fetch_add(1, Ordering::Relaxed);
                    drop(lease);
                } else {
                    let _ = lease.release().await;
                }
            }
        }));
    }
    tokio::time::sleep(SOAK).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("soak task");
    }
    let [cancelled, dropped, panicked] = &*stats;
    assert!(
        cancelled.load(Ordering::Relaxed) > 0
            && dropped.load(Ordering::Relaxed) > 0
            && panicked.load(Ordering::Relaxed) > 0,
        "the soak did not exercise every path: {stats:?}"
    );

    // Every lock key is gone within one ttl (released in the background or expired).
    tokio::time::sleep(TTL + Duration::from_millis(100)).await;
    let inspect = fx.client.__inspect();
    let lock_keys: Vec<String> = inspect
        .keys()
        .await
        .expect("keys")
        .into_iter()
        .filter(|k| k.contains(":lock:"))
        .collect();
    assert!(lock_keys.is_empty(), "lock keys left behind: {lock_keys:?}");
    assert_eq!(
        inspect.watched_leases(),
        0,
        "the watchdog still tracks leases"
    );
    let renewals = inspect.renewal_calls();
    tokio::time::sleep(TTL).await;
    assert_eq!(
        inspect.renewal_calls(),
        renewals,
        "renewal traffic after every lease ended"
    );
    assert_eq!(inspect.waiting_channels(), 0, "waiter registrations leaked");
}

/// TESTPLAN 6: ttl 1 s held 10 s: no competitor gets in, the key outlives the lease's
/// deadline at every sample, the watchdog renews on schedule (the key's ttl never drops below
/// 2/3 of it, renewals = hold/(ttl/3)) with no storm, and after release a waiter gets in at
/// once (within 50 ms where nothing runs late).
async fn watchdog_keeps_a_long_hold_alive(fx: Fixture) {
    const TTL: Duration = Duration::from_secs(1);
    const HOLD: Duration = Duration::from_secs(10);
    let inspect = fx.client.__inspect();
    let key = inspect.lock_key("long-hold").expect("key");
    let competitor = fx.another_client().await;
    let renewals_before = inspect.renewal_calls();
    let lease = fx
        .client
        .lock("long-hold")
        .ttl(TTL)
        .acquire()
        .await
        .expect("acquire");
    let started = Instant::now();
    let mut min_pttl = TTL;
    let mut competitor_tries = 0;
    while started.elapsed() < HOLD {
        let deadline = Instant::now() + lease.valid_for();
        let read = fx.expiry(&key).await;
        // Safety, whatever the scheduling: the key lives at least until the deadline the
        // lease had when the read was sent (a renewal answered meanwhile only moves both).
        let latest = read.latest().unwrap_or_else(|| {
            panic!(
                "the key is gone while the lease is held (lost: {:?})",
                lease.lost_reason()
            )
        });
        assert!(
            latest >= deadline,
            "the key expires {:?} before the lease's deadline",
            deadline - latest
        );
        min_pttl = min_pttl.min(read.pttl.unwrap_or_default());
        if competitor_tries < 100 && rand::rng().random_bool(0.2) {
            competitor_tries += 1;
            let err = competitor
                .lock("long-hold")
                .acquire()
                .await
                .expect_err("competitor must not get in");
            assert!(matches!(err, LockError::Busy { .. }), "{err}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Liveness: renewed throughout. A runtime starved for longer than 2/3 of the ttl minus
    // the margin (about 600 ms here) renews too late and loses the lease, as it must: the
    // README's limits. No machine this suite runs on starves a process that long.
    assert!(!lease.is_lost(), "lost: {:?}", lease.lost_reason());
    let renewals = inspect.renewal_calls() - renewals_before;
    let expected = (HOLD.as_secs_f64() / (TTL / 3).as_secs_f64()) as u64;
    // No storm: renewals are scheduled ttl/3 after the last one was sent, so a late runtime
    // makes fewer of them, never more.
    assert!(
        renewals <= expected + 3,
        "renewals {renewals}, expected about {expected}"
    );
    if fx.paused() {
        // On schedule, where nothing runs late (tokio's timers have 1 ms resolution).
        assert!(
            min_pttl + Duration::from_millis(2) >= TTL - TTL / 3,
            "pttl fell to {min_pttl:?}"
        );
        assert!(
            renewals + 3 >= expected,
            "renewals {renewals}, expected about {expected}"
        );
    }

    // The holder's ttl long, so that a waiter that missed the release would sleep ~30 s.
    lease.extend(Duration::from_secs(30)).await.expect("extend");
    let waiter = tokio::spawn(async move {
        let lease = competitor
            .lock("long-hold")
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .expect("waiter");
        (Instant::now(), lease)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        lease.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let released_at = Instant::now();
    let (acquired_at, next) = waiter.await.expect("waiter task");
    let handoff = acquired_at.saturating_duration_since(released_at);
    // Woken by the release: far sooner than the ~30 s the holder's ttl would cost, with
    // seconds to spare for a starved machine; within 50 ms where nothing runs late.
    let bound = if fx.paused() {
        Duration::from_millis(50)
    } else {
        Duration::from_secs(5)
    };
    assert!(handoff <= bound, "hand-off took {handoff:?}");
    next.release().await.expect("release");
}

/// TESTPLAN 8: a panic inside the critical section releases the lock at once (not at ttl).
async fn panic_in_critical_section_releases_the_lock(fx: Fixture) {
    let client = fx.client.clone();
    let crashed = tokio::spawn(async move {
        client
            .lock("panicky")
            .ttl(Duration::from_secs(30))
            .run(|_lease| async { panic!("boom") })
            .await
    });
    assert!(crashed.await.expect_err("the task panicked").is_panic());
    let started = Instant::now();
    let lease = fx
        .client
        .lock("panicky")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("the lock is free again");
    assert!(started.elapsed() < Duration::from_secs(5));
    lease.release().await.expect("release");
}

/// TESTPLAN 15: a release nobody hears about (here: the key deleted without a message) costs a
/// waiter at most the holder's remaining ttl, not its whole wait.
async fn missed_wakeup_costs_at_most_one_pttl(fx: Fixture) {
    const TTL: Duration = Duration::from_millis(800);
    const WAIT: Duration = Duration::from_secs(20);
    let inspect = fx.client.__inspect();
    let holder = fx
        .client
        .lock("missed")
        .ttl(TTL)
        .watchdog(false)
        .acquire()
        .await
        .expect("holder");
    let waiter_client = fx.another_client().await;
    let started = Instant::now();
    let waiter =
        tokio::spawn(async move { waiter_client.lock("missed").wait(WAIT).acquire().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        inspect
            .delete(&inspect.lock_key("missed").expect("key"))
            .await
            .expect("delete")
    );
    let lease = waiter.await.expect("waiter task").expect("waiter acquires");
    let waited = started.elapsed();
    // The waiter sleeps the pttl it was told plus a jitter of a tenth of it (at most 50 ms).
    // Where nothing runs late, that is the bound. On the real clock a busy machine delays
    // its timer and round trips by an amount nothing bounds: there the bound only tells one
    // pttl (0.8 s) from the whole wait (20 s), with seconds to spare.
    let bound = if fx.paused() {
        // (Plus 1 ms: tokio's timers have millisecond resolution.)
        TTL + (TTL / 10).min(Duration::from_millis(50)) + Duration::from_millis(1)
    } else {
        WAIT / 2
    };
    assert!(
        waited <= bound,
        "waited {waited:?}; bound is the holder's ttl"
    );
    lease.release().await.expect("release");
    drop(holder);
}

/// TESTPLAN 15: 200 waiters on one key all get their turn; afterwards no subscription remains,
/// locally or on the server.
async fn many_waiters_leave_no_subscription_behind(fx: Fixture) {
    const WAITERS: usize = 200;
    let holder = fx.client.lock("crowd").acquire().await.expect("holder");
    let served = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let client = if i % 50 == 0 {
            fx.another_client().await
        } else {
            fx.client.clone()
        };
        let served = served.clone();
        tasks.push(tokio::spawn(async move {
            let lease = client
                .lock("crowd")
                .wait(Duration::from_secs(60))
                .acquire()
                .await
                .expect("waiter");
            served.fetch_add(1, Ordering::Relaxed);
            lease.release().await.expect("release");
            client
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    holder.release().await.expect("release");
    let mut clients = Vec::new();
    for task in tasks {
        clients.push(task.await.expect("waiter task"));
    }
    assert_eq!(served.load(Ordering::Relaxed), WAITERS);
    for client in &clients {
        assert_eq!(
            client.__inspect().waiting_channels(),
            0,
            "local waiter registrations leaked"
        );
    }
    if let Some(server) = &fx.server {
        let mut conn = server.conn().await;
        // The unsubscribes are sent at once; the deadline only outlasts a busy machine.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let channels: Vec<String> = redis::cmd("PUBSUB")
                .arg("CHANNELS")
                .query_async(&mut conn)
                .await
                .expect("pubsub");
            if channels.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "server still has subscriptions: {channels:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Waiters of one client asleep on a lock are each woken by a release, not by their timers,
/// however many there are: a release wakes one of them, and the one woken marks the lock it
/// is granted so that its own release wakes the next. The holder's ttl (30 s) is what a
/// missed wake-up would cost.
async fn waiters_of_one_client_are_woken_release_by_release(fx: Fixture) {
    const WAITERS: usize = 6;
    let holder = fx.client.lock("chain").acquire().await.expect("holder");
    let other = fx.another_client().await;
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        // Four on one client, two on another: both kinds of hand-off.
        let client = if i < 4 {
            fx.client.clone()
        } else {
            other.clone()
        };
        tasks.push(tokio::spawn(async move {
            let lease = client
                .lock("chain")
                .wait(Duration::from_secs(60))
                .acquire()
                .await
                .expect("waiter");
            tokio::time::sleep(Duration::from_millis(20)).await;
            lease.release().await.expect("release");
        }));
    }
    // Every waiter has tried, listens and sleeps.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    holder.release().await.expect("release");
    for task in tasks {
        task.await.expect("waiter task");
    }
    let took = released.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "{WAITERS} hand-offs took {took:?}: a waiter slept until its timer"
    );
}

async fn reentrant_run_joins_the_outer_lease(fx: Fixture) {
    let client = fx.client.clone();
    let (outer_fence, inner_fence) = fx
        .client
        .lock("reentrant")
        .reentrant(true)
        .run(|outer| async move {
            let inner = client
                .lock("reentrant")
                .reentrant(true)
                .run(|inner| async move { inner.fence() })
                .await
                .expect("the nested run joins the outer lease");
            let current = distlock::current_lease().expect("inside a run");
            assert_eq!(current.fence(), outer.fence());
            (outer.fence(), inner)
        })
        .await
        .expect("outer run");
    assert_eq!(outer_fence, inner_fence);
    assert!(distlock::current_lease().is_none());
    // Released on the way out of the outer run only.
    fx.client
        .lock("reentrant")
        .acquire()
        .await
        .expect("free afterwards")
        .release()
        .await
        .expect("release");
}

async fn non_reentrant_run_waits_for_itself(fx: Fixture) {
    let client = fx.client.clone();
    let inner = fx
        .client
        .lock("self-wait")
        .run(|_| async move {
            client
                .lock("self-wait")
                .wait(Duration::from_millis(300))
                .run(|_| async {})
                .await
        })
        .await
        .expect("outer run");
    assert!(matches!(inner, Err(LockError::Timeout { .. })), "{inner:?}");
}

/// The key is deleted behind the holder's back: the watchdog finds out at its next renewal and
/// the body is dropped with `LeaseLost`.
async fn run_ends_the_body_when_the_lease_is_lost(fx: Fixture) {
    // Renewed every second; the lease's deadline is ~1.9 s past a renewal, so only a
    // renewal can end it early (`NotHeld`) unless the machine starves it that long.
    const TTL: Duration = Duration::from_secs(3);
    let key = fx.client.__inspect().lock_key("stolen").expect("key");
    let thief = fx.another_client().await;
    let finished = Arc::new(AtomicBool::new(false));
    let flag = finished.clone();
    let (entered_tx, entered) = tokio::sync::oneshot::channel();
    let steal = tokio::spawn(async move {
        entered.await.expect("the body started");
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(thief.__inspect().delete(&key).await.expect("delete"));
        Instant::now()
    });
    let result = fx
        .client
        .lock("stolen")
        .ttl(TTL)
        .run(|_| async move {
            let _ = entered_tx.send(());
            tokio::time::sleep(Duration::from_secs(10)).await;
            flag.store(true, Ordering::SeqCst);
        })
        .await;
    let ended = Instant::now();
    let stolen_at = steal.await.expect("thief");
    // `NotHeld`: a renewal found the key gone (the deadline would say `Expired`).
    assert!(
        matches!(
            result,
            Err(LockError::LeaseLost {
                reason: LossReason::NotHeld,
                ..
            })
        ),
        "{result:?}"
    );
    assert!(
        !finished.load(Ordering::SeqCst),
        "the body ran to completion"
    );
    if fx.paused() {
        // At the next renewal, within ttl/3 of the theft (1 ms: tokio's timer resolution).
        let noticed = ended.saturating_duration_since(stolen_at);
        assert!(
            noticed <= TTL / 3 + Duration::from_millis(1),
            "noticed after {noticed:?}"
        );
    }
}

async fn extend_resets_the_ttl_and_refuses_a_lost_lease(fx: Fixture) {
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

/// TESTPLAN 9 (in process): with the watchdog off, the lease is lost at its safety deadline and
/// the key expires after the ttl.
async fn watchdog_off_lease_is_lost_at_its_deadline(fx: Fixture) {
    const TTL: Duration = Duration::from_millis(400);
    let inspect = fx.client.__inspect();
    let sent = Instant::now();
    let lease = fx
        .client
        .lock("no-watchdog")
        .ttl(TTL)
        .watchdog(false)
        .acquire()
        .await
        .expect("acquire");
    let answered = Instant::now();
    lease.lost().await;
    let at = sent.elapsed();
    // Never early: the grant was sent after `sent`, and the deadline is its send time plus
    // the ttl minus the margin. A late runtime only makes it later.
    assert!(
        at >= TTL - safety_margin(TTL),
        "lost fired too early: {at:?}"
    );
    if fx.paused() {
        // On time, where nothing runs late: at the deadline, before the key's expiry (1 ms:
        // tokio's timer resolution). On the real clock the signal is a timer, and a starved
        // runtime fires it late, even past the key's expiry: the README's limits. There,
        // `is_lost()` (which reads the clock) is what is exact: `starved.rs` tests it.
        assert!(
            at <= TTL - safety_margin(TTL) + Duration::from_millis(1),
            "lost fired after its deadline: {at:?}"
        );
    }
    assert!(lease.is_lost());
    assert_eq!(lease.lost_reason(), Some(LossReason::Expired));
    // The key expires after the ttl: the grant was applied before its answer came back
    // (plus the library's own drift allowance of 1% + 2 ms between the two clocks).
    tokio::time::sleep_until(answered + TTL + TTL / 100 + Duration::from_millis(2)).await;
    assert_eq!(
        inspect
            .pttl(&inspect.lock_key("no-watchdog").expect("key"))
            .await
            .expect("pttl"),
        None
    );
    assert_eq!(inspect.renewal_calls(), 0);
}

async fn max_hold_bounds_the_hold(fx: Fixture) {
    const TTL: Duration = Duration::from_millis(300);
    const MAX_HOLD: Duration = Duration::from_millis(700);
    let started = Instant::now();
    let lease = fx
        .client
        .lock("bounded")
        .ttl(TTL)
        .max_hold(MAX_HOLD)
        .acquire()
        .await
        .expect("acquire");
    lease.lost().await;
    let held = started.elapsed();
    assert_eq!(lease.lost_reason(), Some(LossReason::Expired));
    if fx.paused() {
        // Where nothing runs late: renewed up to the last renewal, which asks for what
        // remains of max_hold, so the lease ends at max_hold minus at most the margin, never
        // after (1 ms: tokio's timer resolution). On the real clock a starved watchdog
        // renews late and loses the lease early (reported, as it must be), and the lost
        // signal, a timer, fires late.
        assert!(
            held >= MAX_HOLD - safety_margin(TTL) && held <= MAX_HOLD + Duration::from_millis(1),
            "lost after {held:?} (max_hold {MAX_HOLD:?})"
        );
    }
    // Another owner can take it: the key cannot outlive max_hold. (The wait only outlasts a
    // busy machine's delays.)
    let next = fx
        .another_client()
        .await
        .lock("bounded")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("next owner");
    if fx.paused() {
        // The waiter came at the deadline and slept the key's remaining 20 ms plus its
        // jitter (a tenth of that) and tokio's 1 ms timer resolution.
        assert!(
            Instant::now() <= started + MAX_HOLD + Duration::from_millis(5),
            "the key outlived max_hold"
        );
    }
    next.release().await.expect("release");
}

async fn busy_reports_the_holders_remaining_ttl(fx: Fixture) {
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
async fn invalid_input_is_refused_and_writes_nothing(fx: Fixture) {
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
async fn names_that_look_alike_are_different_locks(fx: Fixture) {
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

/// A service that takes and releases one lease at a time leaves the watchdog with nothing to
/// watch at every look; a new lease that is not due before the watchdog's next look must not
/// wake it (a wake-up per lease is a task switch and a scan on the hot path). One runtime
/// thread, as in a `current_thread` service: the task can only look between leases, so it
/// always finds the map empty. The watchdog does not depend on the store; memory suffices.
#[tokio::test]
async fn one_lease_at_a_time_does_not_wake_the_watchdog_each_time() {
    const LEASES: u64 = 200;
    let client = distlock::Client::in_memory();
    let inspect = client.__inspect();
    // A short lease starts the task, which looks again at its renewal time (ttl/3) and then
    // finds nothing to watch: the idle state every later lease arrives in.
    let lease = client
        .lock("seq")
        .ttl(Duration::from_millis(60))
        .acquire()
        .await
        .expect("acquire");
    lease.release().await.expect("release");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = inspect.watchdog_scans();
    for _ in 0..LEASES {
        let lease = client.lock("seq").acquire().await.expect("acquire");
        assert_eq!(inspect.watched_leases(), 1, "the lease is watched");
        lease.release().await.expect("release");
        tokio::task::yield_now().await;
    }
    let scans = inspect.watchdog_scans() - before;
    assert!(
        scans < LEASES / 10,
        "{scans} watchdog scans for {LEASES} one-at-a-time leases"
    );
}

/// The watchdog task exits after a long idle spell; the next lease starts a new one and is
/// renewed. On a paused clock, so the 30 s idle spell costs nothing.
#[tokio::test(start_paused = true)]
async fn a_lease_after_the_watchdog_went_idle_is_still_renewed() {
    let client = distlock::Client::in_memory();
    let inspect = client.__inspect();
    let lease = client
        .lock("idle")
        .ttl(Duration::from_secs(3))
        .acquire()
        .await
        .expect("acquire");
    lease.release().await.expect("release");
    // Long enough for the task to find nothing to watch for its whole idle allowance.
    tokio::time::sleep(Duration::from_secs(120)).await;
    let scans = inspect.watchdog_scans();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        inspect.watchdog_scans(),
        scans,
        "the idle watchdog task did not exit"
    );

    let renewals = inspect.renewal_calls();
    let lease = client
        .lock("idle")
        .ttl(Duration::from_secs(3))
        .acquire()
        .await
        .expect("acquire");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        !lease.is_lost(),
        "the lease was lost: {:?}",
        lease.lost_reason()
    );
    assert!(
        inspect.renewal_calls() >= renewals + 3,
        "a 10 s hold of a 3 s lease was renewed {} times",
        inspect.renewal_calls() - renewals
    );
    assert_eq!(
        lease.release().await.expect("release"),
        ReleaseOutcome::Released
    );
}
