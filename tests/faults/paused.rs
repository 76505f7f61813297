//! Case 10: the server frozen (SIGSTOP) past the ttl, and slow (`DEBUG SLEEP`) for less than
//! ttl/3.

use std::time::Duration;

use distlock::{LossReason, ReleaseOutcome};
use rand::Rng;
use tokio::time::Instant;

use crate::common::{LatenessProbe, SLACK, drift, just_after_a_renewal, short_client};
use crate::support::RedisServer;

/// The server is SIGSTOPped at K for longer than the ttl: the holder gets no reply at all,
/// and its lost signal fires at its local deadline (not before it; no later than
/// K + ttl − drift + slack; before K + ttl; both give or take how late this runtime ran its
/// timers: the signal is a timer, the README's limits) with reason `Expired`. Once the
/// server is resumed (after the key has expired there), release reports `AlreadyExpired`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_stopped_past_ttl_loses_at_local_deadline() {
    let server = RedisServer::start();
    let client = short_client(&server.url()).await;
    let ttl = Duration::from_secs(1);
    let lease = client
        .lock("stopped")
        .ttl(ttl)
        .acquire()
        .await
        .expect("acquire");
    just_after_a_renewal(&client, Duration::from_millis(100)).await;
    let probe = LatenessProbe::start();

    let lost_at;
    let stopped_at;
    let deadline;
    let mark;
    {
        let _frozen = server.stop_guard();
        mark = probe.mark();
        stopped_at = Instant::now();
        deadline = Instant::now() + lease.valid_for();
        let waited = tokio::time::timeout(ttl + Duration::from_secs(10), lease.lost()).await;
        lost_at = Instant::now();
        assert!(
            waited.is_ok(),
            "no lost signal within ttl + 10 s of SIGSTOP"
        );
        // Keep the server frozen past the ttl, so the key has expired there when it resumes.
        tokio::time::sleep_until(stopped_at + ttl + Duration::from_millis(300)).await;
    }

    let since_stop = lost_at - stopped_at;
    let late = probe.since(mark);
    println!(
        "deadline {:?} after SIGSTOP, lost {since_stop:?} after it",
        deadline - stopped_at
    );
    assert!(
        lost_at + Duration::from_millis(5) >= deadline,
        "lost {since_stop:?} after SIGSTOP, before the deadline ({:?})",
        deadline - stopped_at
    );
    assert!(
        lost_at <= stopped_at + ttl - drift(ttl) + SLACK + late,
        "lost {since_stop:?} after SIGSTOP: later than ttl - drift + {SLACK:?} + {late:?} (how \
         late the timers ran)"
    );
    assert!(
        lost_at < stopped_at + ttl + late,
        "lost {since_stop:?} after SIGSTOP: not before the ttl plus how late the timers ran \
         ({late:?})"
    );
    assert_eq!(lease.lost_reason(), Some(LossReason::Expired));

    let outcome = lease.release().await;
    assert!(
        matches!(outcome, Ok(ReleaseOutcome::AlreadyExpired)),
        "release after SIGCONT: expected AlreadyExpired, got {outcome:?}\nserver log:\n{}",
        server.log()
    );
}

/// `DEBUG SLEEP 0.4` (less than ttl/3 = 0.5 s) five times at random moments while a lease
/// with ttl 1.5 s is held for about 3.5 s: the lease is never reported lost, and release
/// then reports `Released`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_sleep_below_a_third_of_ttl_is_no_loss() {
    let server = RedisServer::start();
    let client = short_client(&server.url()).await;
    let ttl = Duration::from_millis(1500);
    let sleep = Duration::from_millis(400);
    let lease = client
        .lock("sleepy")
        .ttl(ttl)
        .acquire()
        .await
        .expect("acquire");
    let renewals_before = client.__inspect().renewal_calls();

    let mut conn = server.conn().await;
    let sleeper = tokio::spawn(async move {
        let mut slept = Vec::new();
        for _ in 0..5 {
            let gap = rand::rng().random_range(100..=400);
            tokio::time::sleep(Duration::from_millis(gap)).await;
            let started = Instant::now();
            let () = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg(sleep.as_secs_f64())
                .query_async(&mut conn)
                .await
                .expect("DEBUG SLEEP");
            slept.push(started.elapsed());
        }
        slept
    });

    let mut checks = 0u32;
    while !sleeper.is_finished() {
        assert!(
            !lease.is_lost(),
            "lease reported lost ({:?}) during DEBUG SLEEP {sleep:?} with ttl {ttl:?}",
            lease.lost_reason()
        );
        checks += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let slept = sleeper.await.expect("sleeper task");
    assert!(
        slept.iter().all(|d| *d >= sleep),
        "the server did not sleep as asked: {slept:?}"
    );
    assert!(checks > 100, "only {checks} checks of the lease");
    assert!(!lease.is_lost(), "lease lost: {:?}", lease.lost_reason());
    let renewals = client.__inspect().renewal_calls() - renewals_before;
    println!("DEBUG SLEEPs took {slept:?}; {renewals} renewals; {checks} checks");
    assert!(
        renewals >= 5,
        "only {renewals} renewals while held ~3.5 s with ttl {ttl:?}"
    );
    let outcome = lease.release().await;
    assert!(
        matches!(outcome, Ok(ReleaseOutcome::Released)),
        "release: expected Released, got {outcome:?}"
    );
}
