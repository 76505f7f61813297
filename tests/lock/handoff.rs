//! Hand-off (Redis): a release passes a contended lock straight to a waiter of the same client,
//! in one round trip and without a published wake-up, a bounded number of times in a row.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use distlock::{LockError, ReleaseOutcome};

use crate::support::fixture::Fixture;
use crate::traces::Capture;

/// PUBLISH calls the server has run so far.
async fn publishes(fx: &Fixture) -> u64 {
    let mut conn = fx.server.as_ref().expect("redis").conn().await;
    crate::support::server::command_calls(&mut conn, "publish").await
}

/// Waits until lock `name` is marked as waited for (a listening waiter's attempt did it).
async fn until_marked(fx: &Fixture, name: &str) {
    let key = fx.lock_key(name);
    for _ in 0..500 {
        let value = fx.client.__inspect().get(&key).await.expect("GET");
        // `*`, or `!` from a waiter that has already waited 20 ms (a busy machine).
        if value.is_some_and(|v| v.ends_with(['*', '!'])) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("nobody started waiting for {name}");
}

/// The waiter is handed the lock by the release: it holds it under a new token and a higher
/// fence, nothing was published, and the queue is empty afterwards.
///
/// A waiter that has waited 20 ms (`STARVE_AFTER`) before the release marks the lock as
/// starving, and then, as documented, the release reserves the lock for it and publishes
/// instead of handing off. On a busy machine that can happen to a round (its attempt that
/// marks the lock came late); such a round is checked for that behaviour and the scenario
/// runs again, up to 8 times, until one hands off.
#[tokio::test]
async fn a_release_hands_the_lock_to_a_waiter_of_its_client() {
    let fx = Fixture::redis().await;
    let capture = Capture::start(tracing::Level::DEBUG);
    for round in 0..8 {
        let name = format!("job-{round}");
        let holder = fx.client.lock(&name).acquire().await.expect("holder");
        let waiter = tokio::spawn({
            let client = fx.client.clone();
            let name = name.clone();
            async move {
                client
                    .lock(&name)
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await
            }
        });
        until_marked(&fx, &name).await;
        assert_eq!(fx.client.__inspect().queued_for_handoff(), 1);
        let published = publishes(&fx).await;
        let handoffs = capture.text().matches("woken_by=\"handoff\"").count();

        let fence = holder.fence().await.expect("fence");
        assert_eq!(
            holder.release().await.expect("release"),
            ReleaseOutcome::Released
        );
        let lease = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("handed over well before the holder's ttl")
            .expect("waiter task")
            .expect("acquired");
        assert!(
            lease.fence().await.expect("fence") > fence,
            "{} after {fence}",
            lease.fence().await.expect("fence")
        );
        assert_eq!(fx.client.__inspect().queued_for_handoff(), 0);
        let handed = capture.text().matches("woken_by=\"handoff\"").count() > handoffs;
        let after = publishes(&fx).await;
        if handed {
            assert_eq!(after, published, "a hand-off publishes nothing");
        } else {
            // Declined for a starving waiter: released and reserved, with one '!' published.
            assert_eq!(
                after,
                published + 1,
                "round {round}: neither a hand-off nor a reservation"
            );
        }
        // The store holds the waiter's token: its release is its own.
        assert_eq!(
            lease.release().await.expect("release"),
            ReleaseOutcome::Released
        );
        assert!(!fx.is_held(&name).await);
        if handed {
            return;
        }
    }
    panic!(
        "in 8 rounds the waiter had always waited past 20 ms before the release, so no \
         hand-off ran; traces:\n{}",
        capture.text()
    );
}

/// A lock is handed off at most 8 times in a row: then an ordinary release (which publishes,
/// the lock being marked by its waiters) lets the waiters of every client compete for it.
#[tokio::test]
async fn hand_offs_in_a_row_are_bounded() {
    const TASKS: u64 = 3;
    const SECTIONS: u64 = 30;
    let fx = Fixture::redis().await;
    let published = publishes(&fx).await;
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let client = fx.client.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..SECTIONS {
                let lease = client
                    .lock("busy")
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("acquire");
                tokio::time::sleep(Duration::from_millis(2)).await;
                lease.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let ordinary = publishes(&fx).await - published;
    let releases = TASKS * SECTIONS;
    assert!(
        ordinary >= releases / 9 - 2,
        "{ordinary} ordinary releases of {releases}: more than 8 hand-offs in a row"
    );
    assert!(
        ordinary <= releases / 2,
        "{ordinary} ordinary releases of {releases}: hardly any hand-off"
    );
}

/// Waiters that stopped waiting (timed out, or cancelled) leave the queue: the release frees
/// the lock instead of handing it to nobody. (Having waited long, they marked it for the
/// waiters that starve, so it may stay reserved for them for the short claim time, no longer.)
#[tokio::test]
async fn waiters_that_gave_up_are_not_handed_the_lock() {
    let fx = Fixture::redis().await;
    let holder = fx.client.lock("gone").acquire().await.expect("holder");
    let cancelled = tokio::spawn({
        let client = fx.client.clone();
        async move { client.lock("gone").wait_forever().acquire().await }
    });
    let timed_out = fx
        .client
        .lock("gone")
        .wait(Duration::from_millis(300))
        .acquire()
        .await;
    assert!(
        matches!(timed_out, Err(LockError::Timeout { .. })),
        "{timed_out:?}"
    );
    cancelled.abort();
    assert!(cancelled.await.expect_err("aborted").is_cancelled());
    assert_eq!(fx.client.__inspect().queued_for_handoff(), 0);

    assert_eq!(
        holder.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let value = fx
        .client
        .__inspect()
        .get(&fx.lock_key("gone"))
        .await
        .expect("GET");
    assert!(
        value.is_none() || value.as_deref() == Some("!"),
        "the lock was handed to nobody: {value:?}"
    );
    assert!(
        fx.wait_free("gone", Duration::from_millis(400)).await,
        "still reserved after the claim time"
    );
}

/// Eight tasks of one client, 200 sections each, every hand-over but a few a hand-off: never
/// two in a section at once, and no update lost.
#[tokio::test]
async fn handed_off_sections_never_overlap() {
    const TASKS: u64 = 8;
    const SECTIONS: u64 = 200;
    let fx = Fixture::redis().await;
    let inside = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let client = fx.client.clone();
        let inside = inside.clone();
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            let mut last_fence = 0;
            for _ in 0..SECTIONS {
                let lease = client
                    .lock("shared")
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("acquire");
                assert!(lease.fence().await.expect("fence") > last_fence);
                last_fence = lease.fence().await.expect("fence");
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                inside.store(false, Ordering::SeqCst);
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
    assert_eq!(counter.load(Ordering::SeqCst), TASKS * SECTIONS);
    assert_eq!(fx.client.__inspect().queued_for_handoff(), 0);
    assert!(!fx.is_held("shared").await);
}
