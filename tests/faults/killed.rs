//! Case 7: the server is SIGKILLed while leases are held.

use std::time::Duration;

use distlock::{LockError, LossReason, ReleaseOutcome};
use tokio::time::Instant;

use crate::common::{
    LatenessProbe, RESPONSE_TIMEOUT, SLACK, drift, is_unavailable, just_after_a_renewal,
    poll_until, poll_until_async, short_client, timed,
};
use crate::support::RedisServer;

/// Two leases (ttl 1 s, watchdog on) are held and renewed; the server is killed at K.
///
/// * each lease's lost signal fires at its local deadline: not before it, no later than
///   K + ttl − drift + slack, and before K + ttl, give or take how late this runtime ran its
///   timers (the signal is a timer; the README's limits); `is_lost()`, which reads the clock,
///   says lost exactly from the deadline on; the reason is `Expired`;
/// * the watchdog then stops: `renewal_calls` stays put over a whole ttl, and it watches
///   no lease;
/// * releasing one lease while the server is down fails fast with `Store(Unreachable |
///   Timeout)`; after a restart, releasing the other reports `AlreadyExpired`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_mid_hold() {
    let mut server = RedisServer::start();
    let client = short_client(&server.url()).await;
    let ttl = Duration::from_secs(1);
    let a = client
        .lock("killed:a")
        .ttl(ttl)
        .acquire()
        .await
        .expect("acquire a");
    let b = client
        .lock("killed:b")
        .ttl(ttl)
        .acquire()
        .await
        .expect("acquire b");
    let inspect = client.__inspect();
    assert!(
        poll_until(Duration::from_secs(3), Duration::from_millis(5), || {
            inspect.renewal_calls() >= 2
        })
        .await,
        "the watchdog did not renew within 3 s"
    );
    // Mid-way between two renewals (they come every ttl/3), so the deadline is inside
    // (K, K + ttl) with room to spare on both sides.
    just_after_a_renewal(&client, Duration::from_millis(100)).await;
    let probe = LatenessProbe::start();

    server.kill();
    let mark = probe.mark();
    let killed_at = Instant::now();
    let deadline_a = Instant::now() + a.valid_for();
    let deadline_b = Instant::now() + b.valid_for();
    assert!(!a.is_lost() && !b.is_lost(), "lost before the deadline");
    // Each deadline exactly, as far as reading the clock around `valid_for()` can tell.
    let bracket = |lease: &distlock::Lease| {
        let before = Instant::now();
        let valid_for = lease.valid_for();
        (before + valid_for, Instant::now() + valid_for)
    };
    let (exact_a, exact_b) = (bracket(&a), bracket(&b));

    // `is_lost()` reads the clock: not lost while the clock is before the deadline, lost from
    // it on, whenever it is asked (here every 5 ms until both are lost).
    let sampler = async {
        loop {
            let before = Instant::now();
            let lost = (a.is_lost(), b.is_lost());
            let after = Instant::now();
            for (name, lost, (earliest, latest)) in [("a", lost.0, exact_a), ("b", lost.1, exact_b)]
            {
                assert!(
                    if lost {
                        after >= earliest
                    } else {
                        before < latest
                    },
                    "lease {name}: is_lost() {lost} {:?} after the kill, deadline {:?} after it",
                    before - killed_at,
                    earliest - killed_at
                );
            }
            if lost.0 && lost.1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let signals = async {
        tokio::join!(
            async {
                a.lost().await;
                Instant::now()
            },
            async {
                b.lost().await;
                Instant::now()
            }
        )
    };
    let ((), (lost_a, lost_b)) = tokio::time::timeout(ttl + Duration::from_secs(10), async {
        tokio::join!(sampler, signals)
    })
    .await
    .expect("the lost signals did not fire within ttl + 10 s of the kill");

    let late = probe.since(mark);
    let bound = killed_at + ttl - drift(ttl) + SLACK + late;
    for (name, lost_at, deadline) in [("a", lost_a, deadline_a), ("b", lost_b, deadline_b)] {
        let since_kill = lost_at - killed_at;
        println!(
            "lease {name}: deadline {:?} after the kill, lost {since_kill:?} after it",
            deadline - killed_at
        );
        assert!(
            lost_at + Duration::from_millis(5) >= deadline,
            "lease {name}: lost {since_kill:?} after the kill, before its deadline ({:?} after the kill)",
            deadline - killed_at
        );
        assert!(
            lost_at <= bound,
            "lease {name}: lost {since_kill:?} after the kill, later than ttl - drift + \
             {SLACK:?} + {late:?} (how late the timers ran)"
        );
        assert!(
            lost_at < killed_at + ttl + late,
            "lease {name}: lost {since_kill:?} after the kill, not before the ttl ({ttl:?}) \
             plus how late the timers ran ({late:?})"
        );
    }
    assert_eq!(a.lost_reason(), Some(LossReason::Expired));
    assert_eq!(b.lost_reason(), Some(LossReason::Expired));

    // No renewals after the signal, and nothing left to watch.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        poll_until(Duration::from_millis(500), Duration::from_millis(5), || {
            inspect.watched_leases() == 0
        })
        .await,
        "the watchdog still watches {} lease(s) after they were lost",
        inspect.watched_leases()
    );
    let calls = inspect.renewal_calls();
    tokio::time::sleep(ttl).await;
    assert_eq!(
        inspect.renewal_calls(),
        calls,
        "the watchdog kept renewing after the lost signal"
    );

    // Server down: release fails fast and typed.
    let (released, took, late) = timed(a.release()).await;
    match released {
        Err(err) if is_unavailable(&err) => {}
        other => panic!(
            "release with the server down: expected Store(Unreachable|Timeout), got {other:?}"
        ),
    }
    assert!(
        took <= RESPONSE_TIMEOUT + SLACK + late,
        "release with the server down took {took:?} (timers {late:?} late meanwhile)"
    );

    // Server back (empty): once the client has reconnected, release says the key is gone.
    server.restart();
    let key = inspect.lock_key("killed:b").expect("key");
    assert!(
        poll_until_async(
            Duration::from_secs(5),
            Duration::from_millis(50),
            || async { inspect.pttl(&key).await.is_ok() }
        )
        .await,
        "the client did not reconnect within 5 s of the restart\nserver log:\n{}",
        server.log()
    );
    let outcome = b.release().await;
    assert!(
        matches!(outcome, Ok(ReleaseOutcome::AlreadyExpired)),
        "release after the restart: expected AlreadyExpired, got {outcome:?}"
    );
    // A fresh lock works again.
    let again = client.lock("killed:a").ttl(ttl).acquire().await;
    assert!(again.is_ok(), "acquire after the restart: {again:?}");
    let _: Result<ReleaseOutcome, LockError> = again.expect("checked").release().await;
}

/// A waiting acquire against a killed server: with the default store patience it keeps
/// retrying within its wait and takes the lock once the server is back; with
/// `store_patience(ZERO)` it returns the store error at once, not after its wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_acquire_rides_out_a_restart_unless_told_not_to() {
    let mut server = RedisServer::start();
    let client = short_client(&server.url()).await;
    client
        .lock("patience")
        .acquire()
        .await
        .expect("acquire before the kill")
        .release()
        .await
        .expect("release");
    server.kill();

    let wait = Duration::from_secs(10);
    let (result, took, late) = timed(
        client
            .lock("patience")
            .wait(wait)
            .store_patience(Duration::ZERO)
            .acquire(),
    )
    .await;
    assert!(
        matches!(&result, Err(e) if is_unavailable(e)),
        "no patience: {result:?}"
    );
    assert!(
        took <= RESPONSE_TIMEOUT * 2 + SLACK + late,
        "no patience: the store error took {took:?}, not at once (timers {late:?} late \
         meanwhile)"
    );

    let waiter = {
        let client = client.clone();
        tokio::spawn(async move { client.lock("patience").wait(wait).acquire().await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.restart();
    let lease = tokio::time::timeout(wait + Duration::from_secs(2), waiter)
        .await
        .expect("the waiter ends within its wait")
        .expect("waiter task")
        .expect("the waiter takes the lock once the server is back");
    lease.release().await.expect("release");
}
