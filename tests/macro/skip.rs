//! `on_busy = skip` and `JobBuilder::try_run` on both stores: a call that finds the lock held
//! returns `Ok(())` / `Ok(None)` at once without running, any other failure is still an error,
//! and with `min_hold` replicas that tick on their own timers run a job once per period.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use distlock::{Client, LockError, distributed_lock};

use crate::support::fixture::{Fixture, on_both_stores};

on_both_stores!(
    a_skipped_call_returns_at_once_without_running,
    failures_other_than_a_busy_lock_are_not_skipped,
    replicas_run_a_skipping_job_once_per_period,
    the_job_builder_skips_as_the_macro_does,
);

#[distributed_lock(key = "tick:{name}", client = client, on_busy = skip)]
async fn tick(client: &Client, name: &str, runs: &AtomicU32) -> Result<(), LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "tick:{name}", client = client, on_busy = skip)]
async fn export(client: &Client, name: &str) -> Result<Option<u64>, LockError> {
    Ok(Some(distlock::current_lease().expect("held").fence()))
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
    assert!(
        started.elapsed() < Duration::from_millis(250),
        "skipping took {:?}",
        started.elapsed()
    );
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

#[distributed_lock(key = "stolen-job", client = client, on_busy = skip, ttl = "600ms")]
async fn long_job(client: &Client) -> Result<Option<()>, LockError> {
    tokio::time::sleep(Duration::from_secs(5)).await;
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
    let steal = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(thief.__inspect().delete(&key).await.expect("delete"));
    });
    let result = long_job(&store.client).await;
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
) -> Result<Option<()>, LockError> {
    if inside.fetch_add(1, Ordering::SeqCst) > 0 {
        overlaps.fetch_add(1, Ordering::SeqCst);
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    inside.fetch_sub(1, Ordering::SeqCst);
    Ok(Some(()))
}

/// ShedLock's scheduling through the macro: two clients (two connections on Redis) tick every
/// 200 ms with 100 ms of skew between them; `min_hold` of 150 ms keeps the late replica from
/// running the period's job a second time. Each period runs it once, never concurrently.
async fn replicas_run_a_skipping_job_once_per_period(store: Fixture) {
    const PERIOD: Duration = Duration::from_millis(200);
    const PERIODS: u32 = 10;
    let inside = Arc::new(AtomicU32::new(0));
    let overlaps = Arc::new(AtomicU32::new(0));
    let start = Instant::now() + Duration::from_millis(100);
    let mut replicas = Vec::new();
    for skew in [0, 100] {
        let client = store.another_client().await;
        let (inside, overlaps) = (inside.clone(), overlaps.clone());
        replicas.push(tokio::spawn(async move {
            let mut ran = 0;
            for period in 0..PERIODS {
                let tick = start + PERIOD * period + Duration::from_millis(skew);
                tokio::time::sleep_until(tick.into()).await;
                if ticker(&client, &inside, &overlaps)
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
    let mut runs = 0;
    for replica in replicas {
        runs += replica.await.expect("replica");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(runs, PERIODS, "once per period\n{}", store.log());
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
