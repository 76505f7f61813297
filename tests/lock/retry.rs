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

/// `retry_backoff(first, largest)`, as documented: a waiter that no release can wake (a
/// client on the application's own connection manager polls) sleeps `first`, then twice as
/// long each time, never more than `largest`, each sleep with at most a tenth more of jitter
/// (50 ms at most). Read from the server: `MONITOR` stamps each attempt's arrival, and the
/// gap between two arrivals is at least the sleep between them, and at most that sleep's
/// jitter plus how late this runtime ran its timers (the lateness probe) and a round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backoff_between_polling_attempts_is_as_documented() {
    use futures_util::StreamExt as _;

    use crate::support::RedisServer;
    use crate::support::lateness::LatenessProbe;

    // Doubling from 10 ms reaches the 80 ms cap at the fourth sleep; were it not capped, the
    // last three would be 160, 320 and 640 ms, past any allowance below.
    const FIRST: Duration = Duration::from_millis(10);
    const LARGEST: Duration = Duration::from_millis(80);
    const ATTEMPTS: u32 = 8;
    let server = RedisServer::start();
    let holder = crate::support::fixture::connect(&server.url()).await;
    // Eager, so that its grant runs the acquire script and the server has it cached: each
    // attempt below is then one EVALSHA, never an EVALSHA refused with NOSCRIPT and its EVAL.
    let held = holder
        .lock("backoff")
        .fenced()
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("hold");
    let key = holder.__inspect().lock_key("backoff").expect("a lock name");

    // A round trip on this machine now, for the upper bounds.
    let mut conn = server.conn().await;
    let mut round_trip = Duration::ZERO;
    for _ in 0..5 {
        let sent = Instant::now();
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .expect("PING");
        round_trip = round_trip.max(sent.elapsed());
    }

    let monitor = server.client().get_async_monitor().await.expect("MONITOR");
    let mut lines = monitor.into_on_message::<String>();
    let manager = redis::aio::ConnectionManager::new(server.client())
        .await
        .expect("a connection manager");
    let waiter = distlock::Client::builder()
        .connect_manager(manager)
        .await
        .expect("a client on the application's manager");

    let probe = LatenessProbe::start();
    let mark = probe.mark();
    let err = waiter
        .lock("backoff")
        .wait(Duration::from_secs(10))
        .max_attempts(ATTEMPTS)
        .retry_backoff(FIRST, LARGEST)
        .acquire()
        .await
        .expect_err("held for 30 s");
    let late = probe.since(mark);
    assert!(matches!(err, LockError::Timeout { .. }), "{err}");
    held.release().await.expect("release");

    // The attempts: every script call on the lock's key until the holder's release.
    let quoted_key = format!("\"{key}\"");
    let mut arrivals = Vec::new();
    while let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(2), lines.next()).await {
        if line.contains("\"EVALSHA\"") || line.contains("\"EVAL\"") {
            if !line.contains(&quoted_key) {
                continue;
            }
            if arrivals.len() == ATTEMPTS as usize {
                break; // the holder's release
            }
            let stamp: f64 = line
                .split_whitespace()
                .next()
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("a MONITOR line starts with its time: {line}"));
            arrivals.push(Duration::from_secs_f64(stamp));
        }
    }
    assert_eq!(
        arrivals.len(),
        ATTEMPTS as usize,
        "one script call per attempt"
    );
    let allowance = late + round_trip * 2 + Duration::from_millis(2);
    let mut base = FIRST;
    let mut report = Vec::new();
    for pair in arrivals.windows(2) {
        let gap = pair[1] - pair[0];
        let jitter = (base / 10).min(Duration::from_millis(50));
        report.push(format!("{gap:?} (sleep {base:?} + up to {jitter:?})"));
        assert!(
            gap >= base,
            "an attempt came {gap:?} after the last, before its {base:?} sleep: {report:?}"
        );
        assert!(
            gap <= base + jitter + allowance,
            "an attempt came {gap:?} after the last, past its {base:?} sleep, {jitter:?} of \
             jitter and {allowance:?} of lateness and round trips: {report:?}"
        );
        base = (base * 2).min(LARGEST);
    }
    eprintln!("gaps between attempts: {report:?}; allowance {allowance:?}");
}
