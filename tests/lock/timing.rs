//! A lease's timing under concurrent renewals and extends (TESTPLAN 26), finished bodies
//! (TESTPLAN 28), and the lock API's boundary values (TESTPLAN 41).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use distlock::{LockError, MAX_TTL, MIN_TTL, ReleaseOutcome, safety_margin};
use rand::Rng;
use tokio::time::Instant;

use crate::support::fixture::{Fixture, on_both_stores};

on_both_stores!(
    paused_memory: local_deadline_never_outruns_the_key,
    extend_respects_max_hold,
);
on_both_stores!(
    finished_body_returns_its_value_whatever_the_release_finds,
    lock_durations_at_their_bounds,
);

/// TESTPLAN 26: a short-ttl lease renewed by the watchdog while another task calls `extend`
/// with random shorter and longer ttls. Sampled about every millisecond: the local deadline
/// always lies the documented safety margin before the key's expiry on the server, and the
/// lease, held and renewable throughout, is never lost.
///
/// Never lost means every renewal comes before the deadline, ttl − ttl/3 − margin after the
/// last one. Where nothing runs late (tokio's paused clock) the ttls are 100–900 ms. On the
/// real clock a busy machine runs the watchdog late by an amount nothing bounds (hundreds of
/// milliseconds with four busy loops per core), and a lease renewed that late is lost, as
/// it must be (the README's limits): there the ttls are 1–3 s, so that the shortest leaves
/// 600 ms for a starved runtime.
/// The safety margin as `distlock::safety_margin`'s documentation states it, independently
/// of the function: 1% of the ttl plus 2 ms, plus a twentieth of the ttl up to 50 ms. A test
/// whose bound came from the library would loosen with it.
fn documented_margin(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2) + (ttl / 20).min(Duration::from_millis(50))
}

#[test]
fn the_documented_margin_is_the_documented_figures() {
    // "For a 30 s ttl it is 352 ms; for 1 s, 62 ms."
    assert_eq!(
        documented_margin(Duration::from_secs(30)),
        Duration::from_millis(352)
    );
    assert_eq!(
        documented_margin(Duration::from_secs(1)),
        Duration::from_millis(62)
    );
    for ttl in [
        MIN_TTL,
        Duration::from_millis(300),
        Duration::from_secs(30),
        MAX_TTL,
    ] {
        assert_eq!(safety_margin(ttl), documented_margin(ttl), "{ttl:?}");
    }
}

async fn local_deadline_never_outruns_the_key(fx: Fixture) {
    const HAMMER: Duration = Duration::from_secs(3);
    /// Enough of each to have raced renewals, however slow the machine is.
    const MIN_SAMPLES: u32 = 300;
    const MIN_EXTENDS: u32 = 50;
    let (ttl, shortest, longest) = if fx.paused() {
        (300, 100, 900)
    } else {
        (1000, 1000, 3000)
    };
    let lease = fx
        .client
        .lock("timing")
        .ttl(Duration::from_millis(ttl))
        .acquire()
        .await
        .expect("acquire");
    let key = fx.lock_key("timing");
    let inspect = fx.another_client().await;
    let stop = Arc::new(AtomicBool::new(false));
    let extends = Arc::new(AtomicU32::new(0));
    let lease = Arc::new(lease);
    let extender = tokio::spawn({
        let lease = lease.clone();
        let stop = stop.clone();
        let extends = extends.clone();
        async move {
            while !stop.load(Ordering::Relaxed) {
                let ttl = Duration::from_millis(rand::rng().random_range(shortest..=longest));
                lease.extend(ttl).await.expect("extend of a held lease");
                extends.fetch_add(1, Ordering::Relaxed);
                let pause = rand::rng().random_range(0..3_000);
                tokio::time::sleep(Duration::from_micros(pause)).await;
            }
        }
    });
    let started = Instant::now();
    let mut samples = 0u32;
    let mut skipped = 0u32;
    while started.elapsed() < HAMMER
        || samples < MIN_SAMPLES
        || extends.load(Ordering::Relaxed) < MIN_EXTENDS
    {
        assert!(
            started.elapsed() < 20 * HAMMER,
            "only {samples} conclusive samples ({skipped} skipped) and {} extends in {:?}",
            extends.load(Ordering::Relaxed),
            started.elapsed()
        );
        // The local deadline just before and just after the server's PTTL is read: an
        // answer landing in between may move it either way, so the earlier claim counts.
        let before = Instant::now();
        let local_before = before + lease.valid_for();
        let pttl = inspect
            .__inspect()
            .pttl(&key)
            .await
            .expect("pttl")
            .unwrap_or_else(|| panic!("the key expired while held; log: {}", fx.log()));
        let after = Instant::now();
        let local_after = after + lease.valid_for();
        // An op answered (or an extend sent) inside the window moves the local deadline and
        // makes the sample inconclusive: the server may have applied it before or after its
        // PTTL read. Samples where the deadline held still are checked.
        let moved = local_before.max(local_after) - local_before.min(local_after);
        if moved > Duration::from_millis(2) {
            skipped += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        let local = local_before.min(local_after);
        // The server read PTTL somewhere in [before, after]; its expiry is at most this.
        let server = after + pttl + Duration::from_millis(1);
        // The promise: the local deadline lies the documented margin before the key's expiry,
        // the margin of the ttl that last set it, so at least the shortest ttl's.
        let margin = documented_margin(Duration::from_millis(shortest));
        assert!(
            local + margin <= server,
            "local deadline only {:?} before the server's expiry, not the {margin:?} margin \
             (pttl {pttl:?} read {:?} after the sample began)",
            server.saturating_duration_since(local),
            after - before,
        );
        assert!(
            !lease.is_lost(),
            "lost while held: {:?}",
            lease.lost_reason()
        );
        samples += 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    stop.store(true, Ordering::Relaxed);
    extender.await.expect("extender");
    // Renewal goes on after the hammering: still held past the longest ttl the last extend
    // can have asked for.
    tokio::time::sleep(Duration::from_millis(longest) * 2).await;
    assert!(
        !lease.is_lost(),
        "lost after the hammering: renewals stopped ({:?})",
        lease.lost_reason()
    );
    assert!(fx.is_held("timing").await);
    let lease = Arc::into_inner(lease).expect("only owner");
    assert_eq!(
        lease.release().await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// `extend` has the builder's bounds and never lets the key outlive `max_hold`.
async fn extend_respects_max_hold(fx: Fixture) {
    const MAX_HOLD: Duration = Duration::from_millis(600);
    let started = Instant::now();
    let lease = fx
        .client
        .lock("extend-max-hold")
        .ttl(Duration::from_secs(2))
        .max_hold(MAX_HOLD)
        .acquire()
        .await
        .expect("acquire");
    let granted = Instant::now();
    let extend_sent = Instant::now();
    lease
        .extend(Duration::from_secs(60))
        .await
        .expect("extend within max_hold");
    let extend_answered = Instant::now();
    // Cut to what is left of max_hold: about 600 ms, not a minute. The extend asked for
    // what remained of max_hold from the grant's send (before `granted`) when it was sent;
    // the server counts it from when it ran it (before `extend_answered`).
    let read = fx.expiry(&fx.lock_key("extend-max-hold")).await;
    let earliest = read.earliest().expect("held");
    assert!(
        earliest <= granted + MAX_HOLD + (extend_answered - extend_sent),
        "the extend let the key outlive max_hold: {read:?}"
    );
    assert!(lease.valid_for() <= MAX_HOLD);
    if fx.paused() {
        assert_eq!(
            read.pttl,
            Some(MAX_HOLD),
            "exactly what is left of max_hold"
        );
    }
    tokio::time::sleep_until(started + MAX_HOLD + Duration::from_millis(100)).await;
    match lease.extend(Duration::from_secs(1)).await {
        Err(LockError::MaxHoldReached { .. } | LockError::LeaseLost { .. }) => {}
        other => panic!("extend after max_hold: {other:?}"),
    }
    // Gone: past its expiry (on the real clock the server may have applied the extend late,
    // which delays the expiry as much; it cannot be renewed, so it goes).
    if fx.paused() {
        assert!(
            fx.is_free("extend-max-hold").await,
            "the key outlived max_hold"
        );
    } else {
        assert!(
            fx.wait_free("extend-max-hold", Duration::from_secs(10))
                .await,
            "the key was never freed"
        );
    }
}

/// TESTPLAN 28: a body that ran to completion returns its value even if the release then
/// finds the key gone (deleted between the two); `run_reporting` says what it found.
async fn finished_body_returns_its_value_whatever_the_release_finds(fx: Fixture) {
    // Deletes the lock's key behind its holder's back, when the body awaits it.
    let delete_key = || {
        let (key, inspect) = (fx.lock_key("finished"), fx.client.clone());
        async move { assert!(inspect.__inspect().delete(&key).await.expect("delete")) }
    };
    let value = fx
        .client
        .lock("finished")
        .run(|_lease| {
            let delete = delete_key();
            async move {
                delete.await;
                "committed"
            }
        })
        .await
        .expect("the body finished: its value comes back");
    assert_eq!(value, "committed");

    let report = fx
        .client
        .lock("finished")
        .run_reporting(|lease| {
            let delete = delete_key();
            async move {
                // Minted while the lock is held (once the key is gone, no fence is minted).
                let fence = lease.fence().await.expect("fence");
                delete.await;
                fence
            }
        })
        .await
        .expect("finished");
    assert_eq!(Some(report.value), report.fence);
    assert!(
        matches!(report.release, Some(Ok(ReleaseOutcome::AlreadyExpired))),
        "{:?}",
        report.release
    );

    // The rule does not cover a body cut short by a loss.
    let lost = fx
        .client
        .lock("finished")
        .ttl(Duration::from_millis(200))
        .watchdog(false)
        .run(|_| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
        })
        .await;
    assert!(matches!(lost, Err(LockError::LeaseLost { .. })), "{lost:?}");
}

/// TESTPLAN 41 for locks: every `Duration` of the lock API at 0, 1 ms, its bounds and `MAX`
/// is a typed error or a defined meaning, never a panic.
async fn lock_durations_at_their_bounds(fx: Fixture) {
    let client = &fx.client;
    let invalid = |r: Result<distlock::Lease, LockError>| {
        assert!(
            matches!(r, Err(LockError::InvalidConfig { .. })),
            "expected InvalidConfig, got {r:?}"
        );
    };
    let one_ns = Duration::from_nanos(1);
    for ttl in [
        Duration::ZERO,
        one_ns,
        MIN_TTL - one_ns,
        MAX_TTL + one_ns,
        Duration::MAX,
    ] {
        invalid(client.lock("bounds").ttl(ttl).acquire().await);
    }
    for ttl in [MIN_TTL, MAX_TTL] {
        let lease = client
            .lock("bounds")
            .ttl(ttl)
            .acquire()
            .await
            .expect("a ttl at its bound");
        lease.release().await.expect("release");
    }
    invalid(
        client
            .lock("bounds")
            .max_hold(Duration::ZERO)
            .acquire()
            .await,
    );

    // max_hold(MAX) means no limit: renewed like any lease. (A ttl long enough that a busy
    // machine's late runtime cannot make the renewal miss the deadline: 2/3 of it, less
    // the margin, is ~900 ms.)
    let renewals = client.__inspect().renewal_calls();
    let lease = client
        .lock("bounds")
        .ttl(Duration::from_millis(1500))
        .max_hold(Duration::MAX)
        .acquire()
        .await
        .expect("max_hold MAX");
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.__inspect().renewal_calls() == renewals {
        assert!(Instant::now() < deadline, "never renewed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !lease.is_lost(),
        "renewed, yet lost: {:?}",
        lease.lost_reason()
    );

    // extend: the builder's bounds.
    for ttl in [
        Duration::ZERO,
        MIN_TTL - one_ns,
        MAX_TTL + one_ns,
        Duration::from_secs(100 * 365 * 24 * 3600),
        Duration::MAX,
    ] {
        let r = lease.extend(ttl).await;
        assert!(
            matches!(r, Err(LockError::InvalidConfig { .. })),
            "extend({ttl:?}): {r:?}"
        );
    }
    lease.extend(MAX_TTL).await.expect("extend to MAX_TTL");
    lease.extend(Duration::from_secs(1)).await.expect("extend");

    // wait: ZERO tries once; MAX (and anything past the clock's range) waits as long as it
    // takes, in acquire and in run.
    let busy = client.lock("bounds").wait(Duration::ZERO).acquire().await;
    assert!(matches!(busy, Err(LockError::Busy { .. })), "{busy:?}");
    let waiter = tokio::spawn({
        let client = client.clone();
        async move { client.lock("bounds").wait(Duration::MAX).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished(), "wait(MAX) gave up");
    lease.release().await.expect("release");
    let lease = waiter
        .await
        .expect("no panic")
        .expect("acquired after waiting");
    let runner = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .lock("bounds")
                .wait(Duration::from_secs(u64::MAX))
                .run(|_| async { 7 })
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!runner.is_finished(), "run with a huge wait gave up");
    lease.release().await.expect("release");
    assert_eq!(runner.await.expect("no panic").expect("run"), 7);
}
