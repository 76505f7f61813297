//! How long a lease lives and what ends it: cancelled acquires, dropped leases and panics
//! leave nothing behind; the watchdog keeps a long hold alive, the safety deadline ends one
//! without it, `max_hold` bounds it; `run` joins or waits for itself, and ends its body when
//! the lease is lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use distlock::{LockError, LossReason, ReleaseOutcome, safety_margin};
use rand::Rng;
use tokio::time::Instant;

use crate::support::fixture::Fixture;
use crate::support::theft::{lost_at_a_renewal, steal_once_entered};

/// TESTPLAN 5: acquire futures dropped at random points, leases dropped without release and
/// panics in 1% of critical sections; afterwards no lock keys, no renewals, no watched leases
/// and no subscriptions remain.
pub(super) async fn cancellation_and_drop_leave_nothing_behind(fx: Fixture) {
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
    let lock_keys = super::lock_keys_left(&fx.client).await;
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
pub(super) async fn watchdog_keeps_a_long_hold_alive(fx: Fixture) {
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
pub(super) async fn panic_in_critical_section_releases_the_lock(fx: Fixture) {
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

pub(super) async fn reentrant_run_joins_the_outer_lease(fx: Fixture) {
    let client = fx.client.clone();
    let (outer_fence, inner_fence) = fx
        .client
        .lock("reentrant")
        .reentrant(true)
        .run(|outer| async move {
            let inner = client
                .lock("reentrant")
                .reentrant(true)
                .run(|inner| async move { inner.fence().await.expect("fence") })
                .await
                .expect("the nested run joins the outer lease");
            let current = distlock::current_lease().expect("inside a run");
            assert_eq!(
                current.fence().await.expect("fence"),
                outer.fence().await.expect("fence")
            );
            (outer.fence().await.expect("fence"), inner)
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

pub(super) async fn non_reentrant_run_waits_for_itself(fx: Fixture) {
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
pub(super) async fn run_ends_the_body_when_the_lease_is_lost(fx: Fixture) {
    // Renewed every second; the lease's deadline is ~1.9 s past a renewal, so only a
    // renewal can end it early (`NotHeld`) unless the machine starves it that long.
    const TTL: Duration = Duration::from_secs(3);
    let key = fx.client.__inspect().lock_key("stolen").expect("key");
    let thief = fx.another_client().await;
    let finished = Arc::new(AtomicBool::new(false));
    let flag = finished.clone();
    let (entered_tx, steal) = steal_once_entered(thief, key);
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
    assert!(lost_at_a_renewal(&result), "{result:?}");
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

/// TESTPLAN 9 (in process): with the watchdog off, the lease is lost at its safety deadline and
/// the key expires after the ttl.
pub(super) async fn watchdog_off_lease_is_lost_at_its_deadline(fx: Fixture) {
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

pub(super) async fn max_hold_bounds_the_hold(fx: Fixture) {
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
