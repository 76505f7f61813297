//! Semaphores on both stores: never more than `permits` held, permits that come back when a
//! holder dies or is late, waiting with wake-ups, typed errors for impossible requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock::{Client, Lease, LockError, LossReason, MAX_PERMITS, ReleaseOutcome};
use tokio::time::Instant;

use crate::support::fixture::{Fixture, on_both_stores};
use crate::support::semaphore::{Workload, most_inside};

on_both_stores!(
    thirty_two_tasks_never_exceed_five_holders,
    acquire_n_takes_its_permits_together,
    impossible_requests_are_typed_errors,
    a_late_release_frees_nothing_of_others,
    lowering_permits_never_exceeds_the_new_limit,
    fences_increase_across_holders,
    a_large_acquire_n_is_not_starved_by_single_permits,
);
on_both_stores!(
    paused_memory: a_dead_holders_permits_come_back_within_its_ttl,
    a_release_wakes_a_waiter_at_once,
    the_watchdog_keeps_permits_and_loss_is_signalled,
);

/// The core case on one process: 32 tasks (two clients) on a semaphore of 5, each
/// taking and giving back a permit 20 times; an occupancy counter never exceeds 5, and reaches
/// 5 (the permits are used, not just respected).
async fn thirty_two_tasks_never_exceed_five_holders(fx: Fixture) {
    let other = fx.another_client().await;
    let work = Workload {
        name: "exports".into(),
        permits: 5,
        tasks: 32,
        rounds: 20,
        ttl: Some(Duration::from_secs(5)),
        max_hold: Duration::from_micros(3000),
    };
    let most = most_inside(fx.client.clone(), other, work).await;
    assert!(most <= 5, "{most} holders at once on a semaphore of 5");
    assert_eq!(most, 5, "the five permits were never all in use");
    assert_eq!(live_entries(&fx, "exports").await, 0);
}

/// How many entries (permits held) semaphore `name`'s set has.
async fn live_entries(fx: &Fixture, name: &str) -> u64 {
    let inspect = fx.client.__inspect();
    let key = inspect.semaphore_key(name).expect("key");
    inspect.live_entries(&key).await.expect("count")
}

async fn acquire_n_takes_its_permits_together(fx: Fixture) {
    let inspect = fx.client.__inspect();
    let key = inspect.semaphore_key("batch").expect("key");
    let batch = || fx.client.semaphore("batch", 5);
    let three = batch().acquire_n(3).await.expect("3 of 5");
    assert_eq!(inspect.live_entries(&key).await.expect("count"), 3);
    // 3 + 3 > 5: all or nothing, so nothing is taken.
    let err = batch().acquire_n(3).await.expect_err("3 more do not fit");
    assert!(matches!(err, LockError::Busy { .. }), "{err}");
    assert_eq!(inspect.live_entries(&key).await.expect("count"), 3);
    let two = batch().acquire_n(2).await.expect("2 more fit");
    assert_eq!(inspect.live_entries(&key).await.expect("count"), 5);
    three.extend(Duration::from_secs(60)).await.expect("extend");
    assert_eq!(
        three.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_eq!(inspect.live_entries(&key).await.expect("count"), 2);
    assert_eq!(
        two.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert!(
        inspect
            .keys()
            .await
            .expect("keys")
            .iter()
            .all(|k| *k != key),
        "the set is gone with its last entry"
    );
}

/// Every count at 0, above the permits and above the bound is a typed error, without a round
/// trip and without a key written.
async fn impossible_requests_are_typed_errors(fx: Fixture) {
    let sem = |permits| fx.client.semaphore("bounds", permits);
    let err = sem(5).acquire_n(6).await.expect_err("6 of 5");
    assert!(
        matches!(
            err,
            LockError::PermitsExceeded {
                asked: 6,
                permits: 5,
                ..
            }
        ),
        "{err}"
    );
    let err = sem(5).acquire_n(u32::MAX).await.expect_err("MAX of 5");
    assert!(matches!(err, LockError::PermitsExceeded { .. }), "{err}");
    for (permits, count) in [(5, 0), (0, 1), (0, 0), (MAX_PERMITS + 1, 1), (u32::MAX, 1)] {
        let err = sem(permits)
            .acquire_n(count)
            .await
            .expect_err("invalid counts");
        assert!(
            matches!(err, LockError::InvalidConfig { .. }),
            "{permits}/{count}: {err}"
        );
    }
    for ttl in [Duration::ZERO, Duration::MAX] {
        let err = sem(5).ttl(ttl).acquire().await.expect_err("ttl");
        assert!(matches!(err, LockError::InvalidConfig { .. }), "{err}");
    }
    let err = sem(5)
        .max_hold(Duration::ZERO)
        .acquire()
        .await
        .expect_err("max_hold");
    assert!(matches!(err, LockError::InvalidConfig { .. }), "{err}");
    let err = fx
        .client
        .semaphore("", 5)
        .acquire()
        .await
        .expect_err("name");
    assert!(matches!(err, LockError::InvalidName(_)), "{err}");
    assert!(
        fx.client.__inspect().keys().await.expect("keys").is_empty(),
        "a refused request wrote a key"
    );
    // The bound itself is fine, and waiting forever is a wait, not an error.
    let all = sem(MAX_PERMITS)
        .wait(Duration::MAX)
        .acquire_n(2)
        .await
        .expect("2 of the most permits");
    all.release().await.expect("release");
}

/// A holder that stops renewing (here: no watchdog, and the lease forgotten, as a process that
/// died leaves it) gives its permits back within its ttl.
async fn a_dead_holders_permits_come_back_within_its_ttl(fx: Fixture) {
    const TTL: Duration = Duration::from_millis(400);
    let called = Instant::now();
    let dead = fx
        .client
        .semaphore("dies", 2)
        .ttl(TTL)
        .watchdog(false)
        .acquire_n(2)
        .await
        .expect("both permits");
    std::mem::forget(dead);
    let other = fx.another_client().await;
    let started = Instant::now();
    let lease = other
        .semaphore("dies", 2)
        .wait(Duration::from_secs(10))
        .acquire_n(2)
        .await
        .expect("the dead holder's permits come back");
    let waited = started.elapsed();
    // Not before the dead holder's entries expired: granted after `called`, they lived a
    // ttl from then at least (1 ms: the store's millisecond expiries).
    assert!(
        started + waited + Duration::from_millis(1) >= called + TTL,
        "the permits came back {waited:?} after a dead holder with a ttl of {TTL:?}"
    );
    if fx.paused() {
        // At their expiry, where nothing runs late: the waiter slept the pttl it was told
        // plus its jitter (a tenth of it) and tokio's 1 ms timer resolution.
        assert!(
            waited <= TTL + TTL / 10 + Duration::from_millis(1),
            "waited {waited:?} for a ttl of {TTL:?}"
        );
    }
    lease.release().await.expect("release");
}

/// The one permit of semaphore `name` (a limit of 1), held by `client` with `ttl` (panics
/// with `what` if it is not granted).
async fn held_alone(client: &Client, name: &str, ttl: Duration, what: &str) -> Lease {
    client
        .semaphore(name, 1)
        .ttl(ttl)
        .acquire()
        .await
        .expect(what)
}

/// A holder past its ttl sees its loss, and its late release frees nothing of the holders that
/// took the permits since.
async fn a_late_release_frees_nothing_of_others(fx: Fixture) {
    let late = fx
        .client
        .semaphore("late", 1)
        .ttl(Duration::from_millis(300))
        .watchdog(false)
        .acquire()
        .await
        .expect("acquire");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(late.is_lost());
    assert_eq!(late.lost_reason(), Some(LossReason::Expired));
    let other = fx.another_client().await;
    let now_held = held_alone(
        &other,
        "late",
        Duration::from_secs(10),
        "the permit is free again",
    )
    .await;
    let err = late
        .extend(Duration::from_secs(10))
        .await
        .expect_err("a lost lease");
    assert!(matches!(err, LockError::LeaseLost { .. }), "{err}");
    assert_eq!(
        late.release().await.expect("release"),
        ReleaseOutcome::AlreadyExpired
    );
    assert_eq!(
        live_entries(&fx, "late").await,
        1,
        "the late release took the new holder's permit"
    );
    assert!(matches!(
        fx.client.semaphore("late", 1).acquire().await,
        Err(LockError::Busy { .. })
    ));
    assert_eq!(
        now_held.release().await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// Five held under a limit of 5; a caller with a limit of 3 waits until two are left.
async fn lowering_permits_never_exceeds_the_new_limit(fx: Fixture) {
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(
            fx.client
                .semaphore("resized", 5)
                .acquire()
                .await
                .expect("one of 5"),
        );
    }
    let lowered = || fx.client.semaphore("resized", 3);
    for _ in 0..3 {
        assert!(matches!(
            lowered().acquire().await,
            Err(LockError::Busy { .. })
        ));
        held.pop()
            .expect("a holder")
            .release()
            .await
            .expect("release");
    }
    // Two held: the third of 3 is free.
    let third = lowered().acquire().await.expect("2 + 1 <= 3");
    assert!(matches!(
        lowered().acquire().await,
        Err(LockError::Busy { .. })
    ));
    third.release().await.expect("release");
    for lease in held {
        lease.release().await.expect("release");
    }
}

/// A waiter is woken by the release, not at the holder's ttl.
async fn a_release_wakes_a_waiter_at_once(fx: Fixture) {
    let holder = held_alone(&fx.client, "wake", Duration::from_secs(30), "acquire").await;
    let other = fx.another_client().await;
    let waiter = tokio::spawn(async move {
        let lease = other
            .semaphore("wake", 1)
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .expect("the waiter gets in");
        let at = Instant::now();
        lease.release().await.expect("release");
        at
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    holder.release().await.expect("release");
    let got_at = waiter.await.expect("waiter");
    let took = got_at.saturating_duration_since(released_at);
    // A waiter that missed the release sleeps until the holder's 30 s ttl would run out.
    // Where nothing runs late, the wake-up takes no time at all; on the real clock the bound
    // tells a release from the ttl with seconds to spare for a busy machine.
    let bound = if fx.paused() {
        Duration::from_millis(1)
    } else {
        Duration::from_secs(5)
    };
    assert!(took <= bound, "woken {took:?} after the release");
}

/// With the watchdog, a short ttl holds for much longer; deleting the set behind the holder's
/// back is noticed at the next renewal.
///
/// The bounds are the library's own: the watchdog renews every third of the ttl, and a lease
/// whose renewals fail is lost by its local deadline, at most one ttl after its last renewal.
/// The loss is awaited for that ttl plus a second of scheduling slack, so a busy machine that
/// delays a timer by less than that cannot fail it (a 300 ms ttl did, at load 11).
async fn the_watchdog_keeps_permits_and_loss_is_signalled(fx: Fixture) {
    const TTL: Duration = Duration::from_secs(1);
    let lease = held_alone(&fx.client, "renewed", TTL, "acquire").await;
    // Eight waits of 0.4 ttl: more than three ttls in all, so only renewals explain a lease
    // still held at the end.
    for _ in 0..8 {
        tokio::time::sleep(TTL * 2 / 5).await;
        assert!(!lease.is_lost(), "lost while renewed");
        assert!(matches!(
            fx.client.semaphore("renewed", 1).acquire().await,
            Err(LockError::Busy { .. })
        ));
    }
    let inspect = fx.client.__inspect();
    let key = inspect.semaphore_key("renewed").expect("key");
    assert!(inspect.delete(&key).await.expect("delete"));
    tokio::time::timeout(TTL + Duration::from_secs(1), lease.lost())
        .await
        .expect("the loss is signalled by the lease's deadline");
    assert_eq!(lease.lost_reason(), Some(LossReason::NotHeld));
}

async fn fences_increase_across_holders(fx: Fixture) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let taken = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let client = fx.another_client().await;
        let (seen, taken) = (seen.clone(), taken.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                let lease = client
                    .semaphore("fenced", 1)
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                    .expect("acquire");
                let fence = lease.fence().await.expect("fence");
                seen.lock().expect("seen").push(fence);
                taken.fetch_add(1, Ordering::SeqCst);
                lease.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    // One permit: grants are serial, so the order of pushes is the order of grants.
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 200);
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "fences out of grant order: {seen:?}"
    );
}

/// Issue 27 §5: an `acquire_n` of every permit behind a stream of single-permit acquirers
/// (12 tasks of two other clients, each taking a permit the moment one frees) is served: once it has waited
/// long it claims its permits, nobody else takes one that would leave it short, and it gets
/// them when the holders of the moment release. Without the claim it waits out its whole
/// wait (all four permits are never free at once). The stream goes on afterwards.
async fn a_large_acquire_n_is_not_starved_by_single_permits(fx: Fixture) {
    const PERMITS: u32 = 4;
    const HOLD: Duration = Duration::from_millis(30);
    const WAIT: Duration = Duration::from_secs(15);
    const STREAM: u32 = PERMITS * 3;
    let others = [fx.another_client().await, fx.another_client().await];
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let taken = Arc::new(AtomicUsize::new(0));
    let mut stream = Vec::new();
    for task in 0..STREAM {
        let client = others[task as usize % 2].clone();
        let (stop, taken) = (stop.clone(), taken.clone());
        stream.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let Ok(lease) = client
                    .semaphore("starve", PERMITS)
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                else {
                    continue;
                };
                taken.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(HOLD).await;
                let _ = lease.release().await;
            }
        }));
    }
    // Let the stream fill every permit first.
    let deadline = Instant::now() + Duration::from_secs(10);
    while taken.load(Ordering::Relaxed) < (PERMITS as usize) * 3 {
        assert!(Instant::now() < deadline, "the stream never got going");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let asked = Instant::now();
    let all = fx
        .client
        .semaphore("starve", PERMITS)
        .wait(WAIT)
        .acquire_n(PERMITS)
        .await
        .expect("the large acquire is served within its wait, not starved");
    let waited = asked.elapsed();
    eprintln!(
        "acquire_n({PERMITS}) behind {} single-permit acquirers waited {waited:?}",
        PERMITS + 2
    );
    let before = taken.load(Ordering::Relaxed);
    all.release().await.expect("release");
    // The claim went with the grant: the stream takes permits again.
    let deadline = Instant::now() + Duration::from_secs(10);
    while taken.load(Ordering::Relaxed) < before + PERMITS as usize {
        assert!(
            Instant::now() < deadline,
            "the stream is stuck after the large grant"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for task in stream {
        task.await.expect("stream task");
    }
}
