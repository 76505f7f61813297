//! Scheduled-job locks and `min_hold` on both stores: the lock outlives a quick body until
//! `at_least` has passed, by the key's expiry; `at_most` bounds a stuck body; the bounds are
//! typed errors.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use distlock::{LockError, ReleaseOutcome};

use crate::support::fixture::{Fixture, on_both_stores};

on_both_stores!(
    at_least_keeps_the_lock_after_a_quick_body,
    a_cancelled_or_panicking_run_still_keeps_at_least,
    at_most_ends_a_stuck_body,
    min_hold_on_a_plain_lock_and_its_bounds,
    a_job_runs_once_per_period_across_clients,
);

const AT_LEAST: Duration = Duration::from_millis(800);
/// The panicking run's `at_least` in [`a_cancelled_or_panicking_run_still_keeps_at_least`]
/// (nothing waits for it to pass).
const PANIC_AT_LEAST: Duration = Duration::from_secs(5);

async fn at_least_keeps_the_lock_after_a_quick_body(fx: Fixture) {
    let inspect = fx.client.__inspect();
    let key = inspect.lock_key("report").expect("key");
    let job = |client: &distlock::Client| {
        client
            .job("report")
            .ttl(Duration::from_millis(200))
            .at_least(AT_LEAST)
    };
    let started = Instant::now();
    let ran = job(&fx.client)
        .run(|lease| async move { lease.fence() })
        .await
        .expect("run");
    assert!(ran.is_some(), "the first run runs");
    // The body is done; the key stays, with an expiry that honours at_least.
    let pttl = inspect
        .pttl(&key)
        .await
        .expect("pttl")
        .expect("the key is kept");
    let left = AT_LEAST.saturating_sub(started.elapsed());
    assert!(
        pttl + Duration::from_millis(20) >= left && pttl <= AT_LEAST,
        "pttl {pttl:?}, {left:?} of at_least left"
    );
    let other = fx.another_client().await;
    assert_eq!(
        job(&other).run(|_| async {}).await.expect("run"),
        None,
        "another replica skips within at_least"
    );
    // Free once at_least has passed since the start.
    tokio::time::sleep_until((started + AT_LEAST + Duration::from_millis(30)).into()).await;
    assert_eq!(
        job(&other).run(|_| async { 7 }).await.expect("run"),
        Some(7)
    );
}

async fn a_cancelled_or_panicking_run_still_keeps_at_least(fx: Fixture) {
    let inspect = fx.client.__inspect();
    let key = inspect.lock_key("fragile").expect("key");
    let job = || {
        fx.client
            .job("fragile")
            .ttl(Duration::from_millis(100))
            .at_least(AT_LEAST)
    };
    // Cancelled mid-body: the lease is dropped; its background release keeps at_least.
    let started = Instant::now();
    let cut = tokio::time::timeout(
        Duration::from_millis(50),
        job().run(|_| tokio::time::sleep(Duration::from_secs(10))),
    )
    .await;
    assert!(cut.is_err(), "cancelled");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        inspect.pttl(&key).await.expect("pttl").is_some(),
        "a cancelled run freed the lock before at_least"
    );
    assert_eq!(job().run(|_| async {}).await.expect("run"), None);
    tokio::time::sleep_until((started + AT_LEAST + Duration::from_millis(50)).into()).await;

    // A body that panics: the same. Its at_least is longer: the panic hook prints the panic
    // (with RUST_BACKTRACE set, a symbolized backtrace of this large debug binary) while the
    // at_least runs, about 300 ms on an idle 2-core machine and past 800 ms under load.
    let started = Instant::now();
    let task = {
        let client = fx.client.clone();
        tokio::spawn(async move {
            client
                .job("fragile")
                .ttl(Duration::from_millis(100))
                .at_least(PANIC_AT_LEAST)
                .run(|_| async { panic!("the job failed") })
                .await
        })
    };
    assert!(task.await.is_err(), "the body panicked");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        started.elapsed() < PANIC_AT_LEAST && inspect.pttl(&key).await.expect("pttl").is_some(),
        "a panicking run freed the lock before at_least"
    );
}

async fn at_most_ends_a_stuck_body(fx: Fixture) {
    let started = Instant::now();
    let err = fx
        .client
        .job("stuck")
        .ttl(Duration::from_millis(150))
        .at_least(Duration::from_millis(100))
        .at_most(Duration::from_millis(400))
        .run(|_| tokio::time::sleep(Duration::from_secs(10)))
        .await
        .expect_err("the body is dropped at at_most");
    assert!(matches!(err, LockError::LeaseLost { .. }), "{err}");
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(700),
        "the stuck body ran {took:?}"
    );
    // The dropped run's lease is released in the background.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        fx.client
            .job("stuck")
            .run(|_| async { 1 })
            .await
            .expect("run"),
        Some(1)
    );
}

async fn min_hold_on_a_plain_lock_and_its_bounds(fx: Fixture) {
    let lease = fx
        .client
        .lock("held-a-while")
        .ttl(Duration::from_millis(100))
        .min_hold(Duration::from_millis(500))
        .acquire()
        .await
        .expect("acquire");
    assert_eq!(
        lease.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert!(matches!(
        fx.client.lock("held-a-while").acquire().await,
        Err(LockError::Busy { .. })
    ));
    let free = fx
        .client
        .lock("held-a-while")
        .wait(Duration::from_secs(2))
        .acquire()
        .await
        .expect("free after min_hold");
    free.release().await.expect("release");

    for (min, max) in [
        (Duration::from_secs(2), Some(Duration::from_secs(1))),
        (distlock::MAX_TTL + Duration::from_secs(1), None),
        (Duration::MAX, None),
    ] {
        let mut job = fx.client.job("bounds").at_least(min);
        if let Some(max) = max {
            job = job.at_most(max);
        }
        let err = job.run(|_| async {}).await.expect_err("out of bounds");
        assert!(matches!(err, LockError::InvalidConfig { .. }), "{err}");
    }
    let err = fx
        .client
        .job("bounds")
        .at_most(Duration::ZERO)
        .run(|_| async {})
        .await
        .expect_err("zero at_most");
    assert!(matches!(err, LockError::InvalidConfig { .. }), "{err}");
    // Zero at_least is no minimum; Duration::MAX at_most is no maximum.
    let ran = fx
        .client
        .job("bounds")
        .at_least(Duration::ZERO)
        .at_most(Duration::MAX)
        .run(|_| async { 3 })
        .await
        .expect("run");
    assert_eq!(ran, Some(3));
    assert!(
        fx.client.lock("bounds").acquire().await.is_ok(),
        "no minimum: free at once"
    );
}

/// Two clients (and, on Redis, two connections) tick every 200 ms with up to 100 ms of skew
/// between them and run the job with `at_least` 150 ms: each period runs it once, never
/// concurrently. (The two-process version with 1 s periods is in `processes.rs`.)
async fn a_job_runs_once_per_period_across_clients(fx: Fixture) {
    const PERIOD: Duration = Duration::from_millis(200);
    const PERIODS: u32 = 10;
    let runs = Arc::new(AtomicU32::new(0));
    let inside = Arc::new(AtomicU32::new(0));
    let overlaps = Arc::new(AtomicU32::new(0));
    let start = Instant::now() + Duration::from_millis(100);
    let mut replicas = Vec::new();
    for (replica, skew) in [(0u32, 0u64), (1, 100)] {
        let client = fx.another_client().await;
        let (runs, inside, overlaps) = (runs.clone(), inside.clone(), overlaps.clone());
        replicas.push(tokio::spawn(async move {
            for period in 0..PERIODS {
                let tick = start + PERIOD * period + Duration::from_millis(skew);
                tokio::time::sleep_until(tick.into()).await;
                let ran = client
                    .job("ticker")
                    .ttl(Duration::from_secs(2))
                    .at_least(Duration::from_millis(150))
                    .run(|_| async {
                        if inside.fetch_add(1, Ordering::SeqCst) > 0 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await
                    .expect("run");
                if ran.is_some() {
                    runs.fetch_add(1, Ordering::SeqCst);
                }
                let _ = replica;
            }
        }));
    }
    for replica in replicas {
        replica.await.expect("replica");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        PERIODS,
        "once per period, not {} times in {PERIODS} periods",
        runs.load(Ordering::SeqCst)
    );
}
