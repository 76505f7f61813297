//! Scheduled-job locks and `min_hold` on both stores: the lock outlives a quick body until
//! `at_least` has passed, by the key's expiry; `at_most` bounds a stuck body; the bounds are
//! typed errors.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use distlock::{LockError, ReleaseOutcome, safety_margin};
use tokio::time::Instant;

use crate::support::fixture::{Fixture, on_both_stores};

on_both_stores!(
    paused_memory: at_least_keeps_the_lock_after_a_quick_body,
    a_cancelled_or_panicking_run_still_keeps_at_least,
    at_most_ends_a_stuck_body,
    a_job_runs_once_per_period_across_clients,
);
on_both_stores!(min_hold_on_a_plain_lock_and_its_bounds);

const AT_LEAST: Duration = Duration::from_millis(800);

// On the real clock a busy machine delays every step of these tests (and the server's
// commands) by an amount nothing bounds, so the checks there are the ones that hold whatever
// the scheduling: the key's expiry read against the edges of a PTTL read's window
// (`Fixture::expiry`), and "ran" or "gone" only ever counted against the library when it
// happened before `at_least` had passed. On tokio's paused clock (memory), where nothing runs
// late, the exact instants are asserted as well.

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
        .run(|lease| async move { lease.fence().await.expect("fence") })
        .await
        .expect("run");
    let returned = Instant::now();
    assert!(ran.is_some(), "the first run runs");
    // The body is done; the key stays, with an expiry that honours at_least: not before
    // at_least after the start (the grant was sent after `started`), and not after at_least
    // from when the run returned (the release asked for what remained of it, which the
    // server counts from when it ran the release, before the run returned).
    let expiry = fx.expiry(&key).await;
    let latest = expiry.latest().expect("the key is kept");
    let earliest = expiry.earliest().expect("the key is kept");
    assert!(
        latest >= started + AT_LEAST,
        "the key expires {:?} before at_least has passed",
        (started + AT_LEAST) - latest
    );
    assert!(
        earliest <= returned + AT_LEAST,
        "the key outlives at_least by {:?}",
        earliest - (returned + AT_LEAST)
    );
    if fx.paused() {
        assert_eq!(
            expiry.pttl,
            Some(AT_LEAST),
            "exactly at_least from the start"
        );
    }
    let other = fx.another_client().await;
    let skipped = job(&other).run(|_| async {}).await.expect("run");
    assert!(
        skipped.is_none() || Instant::now() >= started + AT_LEAST,
        "another replica ran the job within at_least"
    );
    // Free once the key's expiry has passed.
    tokio::time::sleep_until(latest).await;
    assert_eq!(
        job(&other).run(|_| async { 7 }).await.expect("run"),
        Some(7)
    );
}

/// Checks, with one read, that the key of a job started at `started` is kept until
/// `at_least` has passed: gone counts against the library only if the read's answer came
/// before then (the server looked before then).
async fn assert_kept(fx: &Fixture, key: &str, started: Instant, what: &str) {
    let read = fx.expiry(key).await;
    assert!(
        read.exists() || read.answered >= started + AT_LEAST,
        "{what} freed the lock {:?} after the start, before at_least",
        read.answered - started
    );
}

async fn a_cancelled_or_panicking_run_still_keeps_at_least(fx: Fixture) {
    let inspect = fx.client.__inspect();
    let job = |name: &str| {
        fx.client
            .job(name)
            .ttl(Duration::from_millis(100))
            .at_least(AT_LEAST)
    };
    // Cancelled mid-body: the lease is dropped; its background release keeps at_least.
    let key = inspect.lock_key("cancelled").expect("key");
    let started = Instant::now();
    let cut = tokio::time::timeout(
        Duration::from_millis(50),
        job("cancelled").run(|_| tokio::time::sleep(Duration::from_secs(10))),
    )
    .await;
    assert!(cut.is_err(), "cancelled");
    // Time for the background release to run (on the paused clock it runs before the
    // clock moves at all); it sets the key's expiry to what remains instead of deleting it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_kept(&fx, &key, started, "a cancelled run").await;
    let ran = job("cancelled").run(|_| async {}).await.expect("run");
    assert!(
        ran.is_none() || Instant::now() >= started + AT_LEAST,
        "the job ran again within at_least of a cancelled run"
    );
    if fx.paused() {
        assert_eq!(
            fx.expiry(&key).await.pttl,
            Some(AT_LEAST - Duration::from_millis(350)),
            "kept exactly until at_least after the start"
        );
    }

    // A body that panics: the same.
    let key = inspect.lock_key("panicked").expect("key");
    let started = Instant::now();
    let task = {
        let client = fx.client.clone();
        tokio::spawn(async move {
            client
                .job("panicked")
                .ttl(Duration::from_millis(100))
                .at_least(AT_LEAST)
                .run(|_| async { panic!("the job failed") })
                .await
        })
    };
    assert!(task.await.is_err(), "the body panicked");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_kept(&fx, &key, started, "a panicking run").await;
    if fx.paused() {
        assert_eq!(
            fx.expiry(&key).await.pttl,
            Some(AT_LEAST - Duration::from_millis(300)),
            "kept exactly until at_least after the start"
        );
    }
}

async fn at_most_ends_a_stuck_body(fx: Fixture) {
    const TTL: Duration = Duration::from_millis(150);
    const AT_MOST: Duration = Duration::from_millis(400);
    let started = Instant::now();
    let err = fx
        .client
        .job("stuck")
        .ttl(TTL)
        .at_least(Duration::from_millis(100))
        .at_most(AT_MOST)
        .run(|_| tokio::time::sleep(Duration::from_secs(10)))
        .await
        .expect_err("the body is dropped at at_most");
    assert!(matches!(err, LockError::LeaseLost { .. }), "{err}");
    let took = started.elapsed();
    if fx.paused() {
        // Only where nothing runs late: on the real clock a starved watchdog renews late and
        // the lease is lost early (reported, as it must be), and the lost signal, a timer,
        // fires late. Renewed until the last renewal, which asks for what remains of
        // at_most: the deadline is at_most minus the margin, never past at_most (the key
        // may not outlive it, and the lease ends before its key).
        assert!(
            took >= AT_MOST - TTL / 3 - safety_margin(TTL) && took <= AT_MOST,
            "the stuck body ran {took:?} (at_most {AT_MOST:?})"
        );
    }
    // The dropped run's lease is released in the background, and its key could not outlive
    // at_most anyway: the job is free again.
    assert!(
        fx.wait_free("stuck", Duration::from_secs(10)).await,
        "the stuck job's lock was never freed"
    );
    if fx.paused() {
        assert!(
            Instant::now() <= started + AT_MOST,
            "the key outlived at_most"
        );
    }
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
    const MIN_HOLD: Duration = Duration::from_millis(500);
    let started = Instant::now();
    let lease = fx
        .client
        .lock("held-a-while")
        .ttl(Duration::from_millis(100))
        .min_hold(MIN_HOLD)
        .acquire()
        .await
        .expect("acquire");
    assert_eq!(
        lease.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let again = fx.client.lock("held-a-while").acquire().await;
    // Busy, unless this machine was so slow that min_hold had passed by the answer.
    assert!(
        matches!(again, Err(LockError::Busy { .. })) || Instant::now() >= started + MIN_HOLD,
        "taken again within min_hold: {again:?}"
    );
    if let Ok(again) = again {
        again.release().await.expect("release");
    }
    // The waiter sleeps until the key's expiry; the wait only has to outlast a starved
    // machine's delays.
    let free = fx
        .client
        .lock("held-a-while")
        .wait(Duration::from_secs(10))
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
/// between them and run the job with `at_least` 150 ms: never concurrently, never twice
/// within `at_least`, and (where nothing runs late) once per period. (The two-process
/// version with 1 s periods is in `processes.rs`.)
async fn a_job_runs_once_per_period_across_clients(fx: Fixture) {
    const PERIOD: Duration = Duration::from_millis(200);
    const PERIODS: u32 = 10;
    const AT_LEAST: Duration = Duration::from_millis(150);
    let inside = Arc::new(AtomicU32::new(0));
    let overlaps = Arc::new(AtomicU32::new(0));
    // Each run: when its `run` call began, and when its body began.
    let runs = Arc::new(std::sync::Mutex::new(Vec::<(Instant, Instant)>::new()));
    let start = Instant::now() + Duration::from_millis(100);
    let mut replicas = Vec::new();
    for skew in [0u64, 100] {
        let client = fx.another_client().await;
        let (runs, inside, overlaps) = (runs.clone(), inside.clone(), overlaps.clone());
        replicas.push(tokio::spawn(async move {
            for period in 0..PERIODS {
                let tick = start + PERIOD * period + Duration::from_millis(skew);
                tokio::time::sleep_until(tick).await;
                let called = Instant::now();
                client
                    .job("ticker")
                    .ttl(Duration::from_secs(2))
                    .at_least(AT_LEAST)
                    .run(|_| async {
                        let began = Instant::now();
                        if inside.fetch_add(1, Ordering::SeqCst) > 0 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        runs.lock().expect("runs").push((called, began));
                    })
                    .await
                    .expect("run");
            }
        }));
    }
    for replica in replicas {
        replica.await.expect("replica");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    let mut runs = runs.lock().expect("runs").clone();
    runs.sort_by_key(|&(_, began)| began);
    // A run's key lives at least at_least from its grant's send, which came after its `run`
    // call: the next body cannot begin before then, however late anything ran (1 ms for
    // the store's millisecond expiries).
    for pair in runs.windows(2) {
        let ((called, _), (_, next_began)) = (pair[0], pair[1]);
        assert!(
            next_began + Duration::from_millis(1) >= called + AT_LEAST,
            "the job ran twice within at_least: {:?} apart",
            next_began - called
        );
    }
    if fx.paused() {
        // Where nothing runs late, each period's first tick runs it and the other skips.
        // (On the real clock a late run can push its at_least window over the next period's
        // both ticks, or a late tick can fall after the window: starvation shifts the count,
        // not the two rules above.)
        assert_eq!(
            runs.len(),
            PERIODS as usize,
            "once per period, not {} times in {PERIODS} periods",
            runs.len()
        );
    }
}
