//! Waiters: what a missed wake-up costs, that many leave no subscription behind, and that a
//! release wakes the next one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::support::fixture::Fixture;
use crate::support::lateness::LatenessProbe;

/// TESTPLAN 15: a release nobody hears about (here: the key deleted without a message) costs a
/// waiter at most the holder's remaining ttl, not its whole wait.
pub(super) async fn missed_wakeup_costs_at_most_one_pttl(fx: Fixture) {
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
    // On the real clock: how late this runtime ran its timers meanwhile.
    let probe = (!fx.paused()).then(LatenessProbe::start);
    let mark = probe.as_ref().map(LatenessProbe::mark);
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
    // Where nothing runs late, that is the bound (plus 1 ms: tokio's timers have millisecond
    // resolution). On the real clock, the same plus the round trips and how late the runtime
    // ran its timers meanwhile (the lateness probe).
    let promise = TTL + (TTL / 10).min(Duration::from_millis(50)) + Duration::from_millis(1);
    let bound = match (&probe, mark) {
        (Some(probe), Some(mark)) => probe.bound(mark, promise),
        _ => promise,
    };
    assert!(
        waited <= bound,
        "waited {waited:?}; the bound is the holder's ttl and its jitter ({bound:?} here)"
    );
    lease.release().await.expect("release");
    drop(holder);
}

/// TESTPLAN 15: 200 waiters on one key all get their turn; afterwards no subscription remains,
/// locally or on the server.
pub(super) async fn many_waiters_leave_no_subscription_behind(fx: Fixture) {
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
        server.until_no_subscriptions().await;
    }
}

/// Waiters of one client asleep on a lock are each woken by a release, not by their timers,
/// however many there are: a release wakes one of them, and the one woken marks the lock it
/// is granted so that its own release wakes the next. The holder's ttl (30 s) is what a
/// missed wake-up would cost.
pub(super) async fn waiters_of_one_client_are_woken_release_by_release(fx: Fixture) {
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
