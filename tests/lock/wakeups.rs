//! Wake-up subscriptions under churn (TESTPLAN 27): waiters that join, leave and are
//! cancelled at any poll point never leave the client's other waiters on a channel the server
//! does not have, and a release wakes a listening waiter at once, never a ttl later.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::Poll;
use std::time::Duration;

use distlock::Client;
use rand::Rng;
use tokio::time::Instant;

use crate::support::fixture::Fixture;
use crate::support::server::subscribers;

/// The holder's ttl: a waiter that missed the release sleeps until its key would expire. The
/// watchdog renews it every 20 s, so that is at least 40 s after the waiter's last attempt.
const HOLDER_TTL: Duration = Duration::from_secs(60);
/// How soon a listening waiter must have the lock after a release: a waiter woken by the
/// release message takes a round trip or two; one that missed it, tens of seconds. The bound
/// tells the two apart with seconds to spare for a busy machine, which delays the wake-up and
/// the waiter's attempt by an amount nothing bounds (a tight bound measures speed, which is
/// the benchmarks' job).
const WOKEN_WITHIN: Duration = Duration::from_secs(5);
/// How long the server may take to show a subscription sent by a waiter: only outlasts a
/// busy machine; a subscription that is never made fails at it.
const SUBSCRIBED_WITHIN: Duration = Duration::from_secs(10);

/// Polls `future` up to `polls` times, yielding in between so its I/O can progress, then
/// drops it.
async fn poll_then_drop<F: Future>(future: F, polls: usize) {
    let mut future = std::pin::pin!(future);
    for _ in 0..polls {
        let ready =
            std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx).is_ready())).await;
        if ready {
            return;
        }
        tokio::task::yield_now().await;
    }
}

async fn numsub(fx: &Fixture, channel: &str) -> i64 {
    let server = fx.server.as_ref().expect("redis fixture");
    let mut conn = server.conn().await;
    i64::try_from(subscribers(&mut conn, channel).await).expect("fits")
}

/// A waiter that waits long, spawned on `client`.
fn spawn_waiter(
    client: &Client,
    name: &'static str,
) -> tokio::task::JoinHandle<(distlock::Lease, Instant)> {
    let client = client.clone();
    tokio::spawn(async move {
        let lease = client
            .lock(name)
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .expect("waiter");
        (lease, Instant::now())
    })
}

/// Releases `holder` and says how long `waiter` took to get the lock after it.
async fn release_and_time(
    holder: distlock::Lease,
    waiter: tokio::task::JoinHandle<(distlock::Lease, Instant)>,
) -> Duration {
    let released = Instant::now();
    holder.release().await.expect("release");
    let (lease, got) = tokio::time::timeout(HOLDER_TTL, waiter)
        .await
        .expect("the waiter was never woken")
        .expect("waiter task");
    lease.release().await.expect("release");
    got - released
}

/// Releases `holder` and asserts that `waiter` got the lock within [`WOKEN_WITHIN`] after it
/// (`who` names the waiter in the message).
async fn assert_woken_within(
    holder: distlock::Lease,
    waiter: tokio::task::JoinHandle<(distlock::Lease, Instant)>,
    who: &str,
) {
    let took = release_and_time(holder, waiter).await;
    assert!(
        took < WOKEN_WITHIN,
        "{who} got the lock {took:?} after the release"
    );
}

/// Lock `name`, held by the fixture's client for [`HOLDER_TTL`].
async fn hold(fx: &Fixture, name: &str) -> distlock::Lease {
    fx.client
        .lock(name)
        .ttl(HOLDER_TTL)
        .acquire()
        .await
        .expect("holder")
}

/// The release channel of lock `name`.
fn channel_of(fx: &Fixture, name: &str) -> String {
    fx.client.__inspect().release_channel(name).expect("name")
}

/// Waits (bounded) until the server shows a subscriber on `channel`.
async fn until_subscribed(fx: &Fixture, channel: &str, what: &str) {
    let deadline = Instant::now() + SUBSCRIBED_WITHIN;
    while numsub(fx, channel).await < 1 {
        assert!(
            Instant::now() < deadline,
            "{what}: the channel is not subscribed on the server"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The defect as reported: a first waiter, polled a few times (its SUBSCRIBE under way on a
/// pub/sub connection still connecting), then a second waiter of the same client joins, then
/// the first is dropped. The second must not be left deaf. Every number of polls from 1 to 8,
/// each on a fresh client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_waiter_cancelled_mid_subscribe_leaves_no_one_deaf() {
    let fx = Fixture::redis().await;
    let channel = channel_of(&fx, "deaf");
    for polls in 1..=8 {
        let waiters = fx.another_client().await;
        let holder = hold(&fx, "deaf").await;
        let mut first = Box::pin(waiters.lock("deaf").wait(Duration::from_secs(30)).acquire());
        for _ in 0..polls {
            let _ =
                std::future::poll_fn(|cx| Poll::Ready(first.as_mut().poll(cx).is_ready())).await;
            tokio::task::yield_now().await;
        }
        let second = spawn_waiter(&waiters, "deaf");
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(first);
        until_subscribed(
            &fx,
            &channel,
            &format!("first waiter dropped after {polls} polls"),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_woken_within(
            holder,
            second,
            &format!("after {polls} polls of a cancelled first waiter, the second waiter"),
        )
        .await;
    }
}

/// The last waiter on a channel leaves (its client unsubscribes) and a new one joins at once:
/// the UNSUBSCRIBE must not overtake the new SUBSCRIBE. 200 rounds, each checking the server
/// while the new waiter listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leave_never_overtakes_the_next_join() {
    const ROUNDS: usize = 200;
    let fx = Fixture::redis().await;
    let waiters = fx.another_client().await;
    let channel = channel_of(&fx, "overtake");
    let holder = hold(&fx, "overtake").await;
    for round in 0..ROUNDS {
        let leaving = spawn_waiter(&waiters, "overtake");
        until_subscribed(&fx, &channel, &format!("round {round}, first waiter")).await;
        leaving.abort();
        let _ = leaving.await;
        let joining = spawn_waiter(&waiters, "overtake");
        // An UNSUBSCRIBE that overtook the SUBSCRIBE would leave the server with none for
        // good, while the new waiter listens.
        until_subscribed(
            &fx,
            &channel,
            &format!("round {round}: a waiter listens, but the server has no subscription"),
        )
        .await;
        joining.abort();
        let _ = joining.await;
    }
    let waiter = spawn_waiter(&waiters, "overtake");
    until_subscribed(&fx, &channel, "last waiter").await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_woken_within(holder, waiter, "the last waiter").await;
}

/// TESTPLAN 27: tasks churn waiters on one name (join, leave, cancellation at every poll
/// point) while one waiter listens throughout: the server shows its channel at every sample,
/// and once the churn stops a release wakes the listener at once. Afterwards no subscription
/// is left on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churning_waiters_never_unsubscribe_a_listener() {
    const CHURNERS: usize = 6;
    const CHURN: Duration = Duration::from_secs(3);
    const MIN_CHURN: u32 = 100;
    let fx = Fixture::redis().await;
    let waiters = fx.another_client().await;
    let channel = channel_of(&fx, "churn");
    let holder = hold(&fx, "churn").await;
    let listener = spawn_waiter(&waiters, "churn");
    until_subscribed(&fx, &channel, "the listener").await;

    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU32::new(0));
    let churners: Vec<_> = (0..CHURNERS)
        .map(|_| {
            let waiters = waiters.clone();
            let stop = stop.clone();
            let rounds = rounds.clone();
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let polls = rand::rng().random_range(0..10);
                    let wait = Duration::from_millis(rand::rng().random_range(1..50));
                    let acquire = waiters.lock("churn").wait(wait).acquire();
                    if rand::rng().random_bool(0.2) {
                        // Left to time out on its own.
                        let _ = acquire.await;
                    } else {
                        poll_then_drop(acquire, polls).await;
                    }
                    rounds.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let started = Instant::now();
    let mut samples = 0u32;
    // At least CHURN, and as long as it takes a slow machine to make enough churn rounds
    // and samples for the check to mean something.
    while started.elapsed() < CHURN
        || samples <= MIN_CHURN
        || rounds.load(Ordering::Relaxed) <= MIN_CHURN
    {
        assert!(
            started.elapsed() < 20 * CHURN,
            "only {} churn rounds and {samples} samples in {:?}",
            rounds.load(Ordering::Relaxed),
            started.elapsed()
        );
        let subscribers = numsub(&fx, &channel).await;
        assert!(
            subscribers >= 1,
            "the listener's channel is gone from the server after {:?} of churn",
            started.elapsed()
        );
        samples += 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for churner in churners {
        churner.await.expect("churner");
    }

    assert_woken_within(holder, listener, "the listener").await;
    assert_eq!(
        waiters.__inspect().waiting_channels(),
        0,
        "registrations leaked"
    );
    let deadline = Instant::now() + SUBSCRIBED_WITHIN;
    while numsub(&fx, &channel).await != 0 {
        assert!(
            Instant::now() < deadline,
            "a subscription was left on the server"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // A fresh waiter after all that is still heard.
    let holder = hold(&fx, "churn").await;
    let waiter = spawn_waiter(&waiters, "churn");
    until_subscribed(&fx, &channel, "the fresh waiter").await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_woken_within(holder, waiter, "the fresh waiter").await;
}
