//! `on_busy = skip` and `JobBuilder::try_run` on both stores: a call that finds the lock held
//! returns `Ok(())` / `Ok(None)` at once without running, any other failure is still an error,
//! and with `min_hold` replicas that tick on their own timers run a job once per period.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use distlock::{Client, LockError, distributed_lock};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::support::fixture::{Fixture, on_both_stores};

on_both_stores!(
    failures_other_than_a_busy_lock_are_not_skipped,
    the_job_builder_skips_as_the_macro_does,
);

// Bodies that time something: on Redis they check what holds however late anything runs;
// on tokio's paused clock (memory), where nothing runs late, the exact figures as well.
on_both_stores!(
    paused_memory: a_skipped_call_returns_at_once_without_running,
    replicas_run_a_skipping_job_once_per_period,
);

#[distributed_lock(key = "tick:{name}", client = client, on_busy = skip)]
async fn tick(client: &Client, name: &str, runs: &AtomicU32) -> Result<(), LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "tick:{name}", client = client, on_busy = skip)]
async fn export(client: &Client, name: &str) -> Result<Option<u64>, LockError> {
    Ok(Some(
        distlock::current_lease()
            .expect("held")
            .fence()
            .await
            .expect("fence"),
    ))
}

async fn a_skipped_call_returns_at_once_without_running(store: Fixture) {
    let runs = AtomicU32::new(0);
    tick(&store.client, "a", &runs).await.expect("free: runs");
    let fence = export(&store.client, "a")
        .await
        .expect("free: runs")
        .expect("ran");

    let other = store.another_client().await;
    let held = other
        .lock("tick:a")
        .ttl(Duration::from_secs(5))
        .acquire()
        .await
        .expect("hold");
    let started = Instant::now();
    tick(&store.client, "a", &runs).await.expect("skipped");
    assert_eq!(
        export(&store.client, "a").await.expect("skipped"),
        None,
        "a skipped call returns None"
    );
    if store.paused() {
        // Where nothing runs late, one attempt takes no time at all: it did not wait (on
        // Redis, `None` rather than a wait's `Busy` after the holder's 5 s says as much).
        assert_eq!(started.elapsed(), Duration::ZERO, "skipping waited");
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the skipped call did not run"
    );
    // Another key is free.
    tick(&store.client, "b", &runs).await.expect("runs");
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    held.release().await.expect("release");
    let later = export(&store.client, "a")
        .await
        .expect("free again")
        .expect("ran");
    assert!(later > fence, "a new lease: {later} after {fence}");
}

#[distributed_lock(key = "{name}", client = client, on_busy = skip)]
async fn named(client: &Client, name: &str) -> Result<(), LockError> {
    unreachable!("{name:?} is not a lock name")
}

// Renewed every second: the lease's deadline is ~1.9 s past a renewal, so only a renewal can
// end it (`NotHeld`) unless a busy machine starves the watchdog that long (`Expired`, also
// `LeaseLost`), and the thief's key is still there to delete.
#[distributed_lock(key = "stolen-job", client = client, on_busy = skip, ttl = "3s")]
async fn long_job(client: &Client, entered: oneshot::Sender<()>) -> Result<Option<()>, LockError> {
    let _ = entered.send(());
    tokio::time::sleep(Duration::from_secs(10)).await;
    Ok(Some(()))
}

async fn failures_other_than_a_busy_lock_are_not_skipped(store: Fixture) {
    let too_long = "x".repeat(distlock::MAX_NAME_LEN + 1);
    match named(&store.client, &too_long).await {
        Err(LockError::InvalidName(_)) => {}
        other => panic!("expected InvalidName, got {other:?}"),
    }
    // A lease lost while the body runs ends the call with LeaseLost, not with a skip.
    let key = store.lock_key("stolen-job");
    let thief = store.another_client().await;
    let (entered_tx, entered) = oneshot::channel();
    let steal = tokio::spawn(async move {
        entered.await.expect("the body started");
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(thief.__inspect().delete(&key).await.expect("delete"));
    });
    let result = long_job(&store.client, entered_tx).await;
    steal.await.expect("thief");
    assert!(
        matches!(result, Err(LockError::LeaseLost { .. })),
        "{result:?}\n{}",
        store.log()
    );
}

#[distributed_lock(
    key = "ticker",
    client = client,
    on_busy = skip,
    ttl = "2s",
    min_hold = "150ms"
)]
async fn ticker(
    client: &Client,
    inside: &AtomicU32,
    overlaps: &AtomicU32,
    called: Instant,
    runs: &Mutex<Vec<(Instant, Instant)>>,
) -> Result<Option<()>, LockError> {
    runs.lock().expect("runs").push((called, Instant::now()));
    if inside.fetch_add(1, Ordering::SeqCst) > 0 {
        overlaps.fetch_add(1, Ordering::SeqCst);
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    inside.fetch_sub(1, Ordering::SeqCst);
    Ok(Some(()))
}

/// ShedLock's scheduling through the macro: two clients (two connections on Redis) tick every
/// 200 ms with 100 ms of skew between them; `min_hold` of 150 ms keeps the late replica from
/// running the period's job a second time. Never concurrently; each run at least min_hold
/// after the call that made the one before (its grant came after that call, and its key
/// lived min_hold from the grant). On tokio's paused clock, where no tick is late, each
/// period runs it exactly once; on Redis a busy machine can delay a tick past min_hold (a
/// second run in its period) or bunch a stalled replica's ticks into one min_hold (skipped
/// periods), and min_hold promises neither count.
async fn replicas_run_a_skipping_job_once_per_period(store: Fixture) {
    const PERIOD: Duration = Duration::from_millis(200);
    const PERIODS: u32 = 10;
    const MIN_HOLD: Duration = Duration::from_millis(150);
    let inside = Arc::new(AtomicU32::new(0));
    let overlaps = Arc::new(AtomicU32::new(0));
    let runs = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now() + Duration::from_millis(100);
    let mut replicas = Vec::new();
    for skew in [0, 100] {
        let client = store.another_client().await;
        let (inside, overlaps, runs) = (inside.clone(), overlaps.clone(), runs.clone());
        replicas.push(tokio::spawn(async move {
            let mut ran = 0;
            for period in 0..PERIODS {
                let tick = start + PERIOD * period + Duration::from_millis(skew);
                tokio::time::sleep_until(tick).await;
                if ticker(&client, &inside, &overlaps, Instant::now(), &runs)
                    .await
                    .expect("ran or skipped")
                    .is_some()
                {
                    ran += 1;
                }
            }
            ran
        }));
    }
    let mut ran = 0;
    for replica in replicas {
        ran += replica.await.expect("replica");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    let mut runs = runs.lock().expect("runs").clone();
    runs.sort_by_key(|&(_, entered)| entered);
    assert_eq!(runs.len(), ran as usize);
    for pair in runs.windows(2) {
        let ((called, _), (_, next)) = (pair[0], pair[1]);
        // Less 1 ms: the store counts whole milliseconds.
        assert!(
            next + Duration::from_millis(1) >= called + MIN_HOLD,
            "a run {:?} after the call that made the one before, within min_hold\n{}",
            next - called,
            store.log()
        );
    }
    if store.paused() {
        assert_eq!(ran, PERIODS, "once per period\n{}", store.log());
    }
}

#[derive(Debug)]
enum JobError {
    Lock(LockError),
    Failed(&'static str),
}

impl From<LockError> for JobError {
    fn from(err: LockError) -> Self {
        Self::Lock(err)
    }
}

#[distributed_lock(key = "export-job", client = client, on_busy = skip)]
async fn export_job(client: &Client, fail: bool) -> Result<Option<u32>, JobError> {
    if fail {
        return Err(JobError::Failed("disk full"));
    }
    Ok(Some(7))
}

/// `client.job(name).try_run(..)` and `#[distributed_lock(on_busy = skip)]` on a function
/// returning `Result<Option<T>, E>` answer alike: a value, a skip, the body's error, the
/// lock's error converted.
async fn the_job_builder_skips_as_the_macro_does(store: Fixture) {
    let job = |client: &Client, fail: bool| {
        client.job("export-job").try_run(move |_lease| async move {
            if fail {
                return Err(JobError::Failed("disk full"));
            }
            Ok(7)
        })
    };
    assert_eq!(
        export_job(&store.client, false).await.expect("ran"),
        Some(7)
    );
    assert_eq!(job(&store.client, false).await.expect("ran"), Some(7));
    assert!(matches!(
        export_job(&store.client, true).await,
        Err(JobError::Failed("disk full"))
    ));
    assert!(matches!(
        job(&store.client, true).await,
        Err(JobError::Failed("disk full"))
    ));

    let other = store.another_client().await;
    let held = other.lock("export-job").acquire().await.expect("hold");
    assert_eq!(
        export_job(&store.client, true).await.expect("skipped"),
        None
    );
    assert_eq!(job(&store.client, true).await.expect("skipped"), None);
    assert_eq!(
        store
            .client
            .job("export-job")
            .run(|_| async { 1 })
            .await
            .expect("skipped"),
        None
    );
    held.release().await.expect("release");

    let bad = store
        .client
        .job("export-job")
        .at_most(Duration::ZERO)
        .try_run(|_| async { Ok::<_, JobError>(1) })
        .await;
    assert!(
        matches!(bad, Err(JobError::Lock(LockError::InvalidConfig { .. }))),
        "{bad:?}"
    );
}
