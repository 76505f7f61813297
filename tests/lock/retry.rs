//! Retry knobs (issue 27 §5): `max_attempts` ends a wait once its tries are used up, on every
//! lease builder; `retry_backoff` and `max_attempts` refuse values they cannot work with.

use std::time::Duration;

use distlock::LockError;
use tokio::time::Instant;

use crate::support::fixture::{Fixture, on_both_stores};

on_both_stores!(
    max_attempts_ends_a_wait_before_its_time,
    retry_knobs_refuse_what_they_cannot_work_with,
);

/// The holder keeps the lock for the whole test; a waiter that may wait 20 s but try only
/// twice (the first try, and the one right after it subscribed to releases) gives up after
/// those two round trips instead of waiting out its 20 s.
async fn max_attempts_ends_a_wait_before_its_time(fx: Fixture) {
    const WAIT: Duration = Duration::from_secs(20);
    let held = fx.client.lock("tries").acquire().await.expect("acquire");
    let started = Instant::now();
    let err = fx
        .client
        .lock("tries")
        .wait(WAIT)
        .max_attempts(2)
        .acquire()
        .await
        .expect_err("held");
    assert!(matches!(err, LockError::Timeout { .. }), "{err}");
    assert!(
        started.elapsed() < WAIT,
        "gave up after its attempts, not its wait"
    );
    // The same on a wait without end, and on a semaphore.
    let err = fx
        .client
        .lock("tries")
        .wait_forever()
        .max_attempts(3)
        .acquire()
        .await
        .expect_err("held");
    assert!(matches!(err, LockError::Timeout { .. }), "{err}");
    let permit = fx
        .client
        .semaphore("tries-sem", 1)
        .acquire()
        .await
        .expect("permit");
    let err = fx
        .client
        .semaphore("tries-sem", 1)
        .wait(WAIT)
        .max_attempts(1)
        .acquire()
        .await
        .expect_err("full");
    assert!(matches!(err, LockError::Timeout { .. }), "{err}");
    // One attempt that finds the lock free is all it takes.
    held.release().await.expect("release");
    permit.release().await.expect("release");
    let lease = fx
        .client
        .lock("tries")
        .wait(WAIT)
        .max_attempts(1)
        .acquire()
        .await
        .expect("free: granted at the first try");
    lease.release().await.expect("release");
}

async fn retry_knobs_refuse_what_they_cannot_work_with(fx: Fixture) {
    let refused = |result: Result<distlock::Lease, LockError>| match result {
        Err(LockError::InvalidConfig { reason }) => reason,
        other => panic!("expected InvalidConfig, got {other:?}"),
    };
    let ms = Duration::from_millis;
    let reason = refused(fx.client.lock("knobs").max_attempts(0).acquire().await);
    assert!(reason.contains("max_attempts"), "{reason}");
    for (first, largest) in [
        (Duration::ZERO, ms(10)),
        (ms(20), ms(10)),
        (ms(5), Duration::from_secs(61)),
        (Duration::MAX, Duration::MAX),
    ] {
        let reason = refused(
            fx.client
                .lock("knobs")
                .retry_backoff(first, largest)
                .acquire()
                .await,
        );
        assert!(reason.contains("retry_backoff"), "{reason}");
    }
    // The bounds themselves are accepted.
    let lease = fx
        .client
        .lock("knobs")
        .max_attempts(u32::MAX)
        .retry_backoff(Duration::from_nanos(1), Duration::from_secs(60))
        .acquire()
        .await
        .expect("accepted");
    lease.release().await.expect("release");
}
