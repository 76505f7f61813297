//! Waiting across clients (TESTPLAN 40): a client that releases and re-takes a lock in a tight
//! loop cannot keep another client's waiter out for longer than a short bound, and a waiter
//! that vanishes cannot block the lock for longer than the short claim it was given.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::support::fixture::{Fixture, on_both_stores};
use crate::support::lateness::LatenessProbe;

on_both_stores!(
    paused_memory: a_tight_loop_cannot_starve_another_clients_waiter,
    vanished_starving_waiters_block_the_lock_for_a_claim_at_most,
    a_waiter_that_gives_up_takes_its_mark_back,
);

/// The longest a waiter of another client may wait while the lock is released every few
/// hundred microseconds: the starvation threshold (20 ms) plus a few releases and round
/// trips. Exact where nothing runs late (tokio's paused clock); on Redis each wait may also
/// hold how late the runtime ran its timers during it (the lateness probe) and the
/// probe's round trips ([`LatenessProbe::bound`]).
const BOUND: Duration = Duration::from_millis(150);

/// The holders' ttl in the tests where waiters must retry on their timers to mark the lock:
/// short where nothing runs late; on the real clock long enough that a busy machine cannot
/// make the holder's renewals miss its deadline (2/3 of it less the margin: ~600 ms).
fn holder_ttl(fx: &Fixture) -> Duration {
    if fx.paused() {
        Duration::from_millis(100)
    } else {
        Duration::from_secs(1)
    }
}

/// TESTPLAN 40: two tasks of client A re-take the lock in a tight loop (hold, release, acquire
/// again at once); client B takes it 30 times, each time waiting for it. B's longest wait stays under
/// [`BOUND`], and A keeps making progress too.
async fn a_tight_loop_cannot_starve_another_clients_waiter(fx: Fixture) {
    const TURNS: usize = 30;
    let a = fx.another_client().await;
    let b = fx.another_client().await;
    let stop = Arc::new(AtomicBool::new(false));
    let a_sections = Arc::new(AtomicU64::new(0));
    // Two tasks of A, so A's releases also hand the lock to A's own waiter.
    let loopers: Vec<_> = (0..2)
        .map(|_| {
            tokio::spawn({
                let stop = stop.clone();
                let a_sections = a_sections.clone();
                let a = a.clone();
                async move {
                    while !stop.load(Ordering::Relaxed) {
                        let lease = a
                            .lock("fair")
                            .ttl(Duration::from_secs(5))
                            .wait(Duration::from_secs(10))
                            .acquire()
                            .await
                            .expect("looper");
                        a_sections.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_micros(200)).await;
                        lease.release().await.expect("release");
                    }
                }
            })
        })
        .collect();
    // Let the loop get going.
    while a_sections.load(Ordering::Relaxed) < 20 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let probe = (!fx.paused()).then(LatenessProbe::start);
    let mut longest = Duration::ZERO;
    // The turn that came closest to its bound: (wait, bound).
    let mut closest = (Duration::ZERO, BOUND);
    for turn in 0..TURNS {
        let mark = probe.as_ref().map(LatenessProbe::mark);
        let asked = Instant::now();
        let lease = b
            .lock("fair")
            .ttl(Duration::from_secs(5))
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "turn {turn}: B never got the lock while A looped ({} sections): {e}",
                    a_sections.load(Ordering::Relaxed)
                )
            });
        let waited = asked.elapsed();
        let bound = match (&probe, mark) {
            (Some(probe), Some(mark)) => probe.bound(mark, BOUND),
            _ => BOUND,
        };
        assert!(
            waited < bound,
            "turn {turn}: B waited {waited:?} (bound {bound:?}); A ran {} sections",
            a_sections.load(Ordering::Relaxed)
        );
        if waited.as_secs_f64() / bound.as_secs_f64()
            > closest.0.as_secs_f64() / closest.1.as_secs_f64()
        {
            closest = (waited, bound);
        }
        longest = longest.max(waited);
        tokio::time::sleep(Duration::from_millis(1)).await;
        lease.release().await.expect("release");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for looper in loopers {
        looper.await.expect("looper");
    }
    eprintln!(
        "B's longest wait {longest:?}; closest to its bound: {:?} of {:?}",
        closest.0, closest.1
    );
}

/// TESTPLAN 40: waiters that waited long (and so marked the lock for themselves) and then
/// vanish never block the lock for longer than the short claim their mark earns them, however
/// often it happens, and nobody deadlocks.
async fn vanished_starving_waiters_block_the_lock_for_a_claim_at_most(fx: Fixture) {
    // The claim (250 ms), where nothing runs late, plus the latecomer's sleep jitter (up to
    // a tenth of that) and tokio's 1 ms timer resolution. On the real clock, that plus the
    // round trips and how late the runtime ran its timers during the round.
    let promise = Duration::from_millis(250 + 25 + 1);
    let probe = (!fx.paused()).then(LatenessProbe::start);
    let holder_client = fx.another_client().await;
    let waiter_client = fx.another_client().await;
    let latecomer = fx.another_client().await;
    for round in 0..5 {
        // A short ttl (renewed by the watchdog), so the waiters retry on their timers and,
        // past the starvation threshold, mark the lock for themselves.
        let holder = holder_client
            .lock("vanish")
            .ttl(holder_ttl(&fx))
            .acquire()
            .await
            .expect("holder");
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let client = waiter_client.clone();
                tokio::spawn(async move {
                    client
                        .lock("vanish")
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await
                })
            })
            .collect();
        let key = fx.lock_key("vanish");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let value = fx.client.__inspect().get(&key).await.expect("GET");
            if value.is_some_and(|v| v.ends_with('!')) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: the waiters never starved"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for waiter in &waiters {
            waiter.abort();
        }
        for waiter in waiters {
            let _ = waiter.await;
        }
        let mark = probe.as_ref().map(LatenessProbe::mark);
        let released = Instant::now();
        holder.release().await.expect("release");
        let lease = latecomer
            .lock("vanish")
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let took = released.elapsed();
        let free_within = match (&probe, mark) {
            (Some(probe), Some(mark)) => probe.bound(mark, promise),
            _ => promise,
        };
        assert!(
            took < free_within,
            "round {round}: the lock stayed blocked {took:?} after its release"
        );
        lease.release().await.expect("release");
    }
}

/// Acquire attempts the server has run: each attempt of `acquire.lua` makes exactly one `SET`
/// (and nothing else here does, but the holder's grant and its fence).
async fn set_calls(fx: &Fixture) -> u64 {
    let mut conn = fx.server.as_ref().expect("redis").conn().await;
    crate::support::server::command_calls(&mut conn, "set").await
}

/// TESTPLAN 16: 500 waiters (5 clients) on one hot key held for 5 s: the attempts stay within
/// 2× of what the waiting rule predicts (two attempts each to start, then one per holder's
/// remaining ttl), starving marks included; then all of them get the lock, one at a time,
/// and leave no subscription behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_retry_storm_on_a_hot_key() {
    const WAITERS: usize = 500;
    const CLIENTS: usize = 5;
    const HOLD: Duration = Duration::from_secs(5);
    const TTL: Duration = Duration::from_secs(1);
    let fx = Fixture::redis().await;
    let holder = fx
        .client
        .lock("hot")
        .ttl(TTL)
        .acquire()
        .await
        .expect("holder");
    let before = set_calls(&fx).await;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(fx.another_client().await);
    }
    let waiters: Vec<_> = (0..WAITERS)
        .map(|i| {
            let client = clients[i % CLIENTS].clone();
            tokio::spawn(async move {
                let lease = client
                    .lock("hot")
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("waiter");
                lease.release().await.expect("release");
            })
        })
        .collect();
    tokio::time::sleep(HOLD).await;
    let attempts = set_calls(&fx).await - before;
    // The watchdog renews at ttl/3, so a waiter's sleep (the PTTL it was told) is at least
    // two thirds of the ttl.
    let min_sleep = TTL * 2 / 3;
    let per_waiter = 2.0 + HOLD.as_secs_f64() / min_sleep.as_secs_f64() + 1.0;
    let predicted = per_waiter * WAITERS as f64;
    assert!(
        (attempts as f64) <= 2.0 * predicted,
        "{attempts} attempts in {HOLD:?}; the waiting rule predicts at most {predicted:.0}"
    );
    assert!(
        attempts >= 2 * WAITERS as u64,
        "{attempts} attempts: the waiters did not all try"
    );
    holder.release().await.expect("release");
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .expect("every waiter gets the lock in turn")
            .expect("waiter task");
    }
    fx.server
        .as_ref()
        .expect("redis")
        .until_no_subscriptions()
        .await;
}

/// A waiter that waited long enough to mark the lock for itself and then times out (or is
/// cancelled) takes the mark back: the holder's next release frees the lock for anyone at
/// once, instead of reserving it for nobody.
async fn a_waiter_that_gives_up_takes_its_mark_back(fx: Fixture) {
    let holder_client = fx.another_client().await;
    let waiter_client = fx.another_client().await;
    let key = fx.lock_key("giving-up");
    // The waiter retries once the holder's pttl has passed, and marks the lock then: its
    // wait must outlast that (and, on the real clock, a busy machine's delays).
    let wait = if fx.paused() {
        Duration::from_millis(400)
    } else {
        Duration::from_secs(2)
    };
    for cancel in [false, true] {
        let holder = holder_client
            .lock("giving-up")
            .ttl(holder_ttl(&fx))
            .acquire()
            .await
            .expect("holder");
        let waiter = tokio::spawn({
            let client = waiter_client.clone();
            async move { client.lock("giving-up").wait(wait).acquire().await }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let value = fx.client.__inspect().get(&key).await.expect("GET");
            if value.is_some_and(|v| v.ends_with('!')) {
                break;
            }
            assert!(Instant::now() < deadline, "the waiter never starved");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if cancel {
            waiter.abort();
            let _ = waiter.await;
        } else {
            let timed_out = waiter.await.expect("waiter task");
            assert!(
                matches!(timed_out, Err(distlock::LockError::Timeout { .. })),
                "{timed_out:?}"
            );
        }
        // The cancelled waiter takes it back in the background (the timed-out one did before
        // it returned); the deadline only outlasts a busy machine.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let value = fx.client.__inspect().get(&key).await.expect("GET");
            // (No key at all is no mark either: on a loaded machine the holder's 100 ms lease
            // may have run out.)
            if !value.as_deref().is_some_and(|v| v.ends_with('!')) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "cancel {cancel}: the mark stayed: {value:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        holder.release().await.expect("release");
        assert!(
            fx.is_free("giving-up").await,
            "cancel {cancel}: released, yet not free"
        );
    }
}
