//! Case 17 (and case 4): connection faults between the client and the server, through the
//! harness proxy, and an acquire whose outcome is unknown to the client.

use std::time::Duration;

use distlock::{Client, LockError, LossReason, ReleaseOutcome, StoreError};
use tokio::time::Instant;

use crate::common::{
    LatenessProbe, RESPONSE_TIMEOUT, SLACK, calm_client, command_stats, drift, is_timeout,
    is_unavailable, just_after_a_renewal, pttl, short_client, timed, warm_up,
};
use crate::support::{Proxy, RedisServer};

/// A server, a proxy in front of it, and a client (short deadlines) connected through it.
async fn proxied() -> (RedisServer, Proxy, Client) {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr()).await;
    let client = short_client(&proxy.url()).await;
    (server, proxy, client)
}

/// Asserts that `result` is `Store(Timeout)` and came within the response timeout + slack
/// (+ how late this runtime ran its timers meanwhile, `late`).
fn assert_timed_out<T: std::fmt::Debug>(
    what: &str,
    (result, took, late): &(Result<T, LockError>, Duration, Duration),
) {
    match result {
        // It names the deadline that passed, never a zero placeholder (issue 30 §5).
        Err(LockError::Store(StoreError::Timeout { after })) => {
            assert_eq!(*after, RESPONSE_TIMEOUT, "{what}: the deadline it names");
        }
        other => panic!("{what}: expected Store(Timeout), got {other:?}"),
    }
    assert!(
        *took <= RESPONSE_TIMEOUT + SLACK + *late,
        "{what} took {took:?}; the response timeout is {RESPONSE_TIMEOUT:?} (timers {late:?} \
         late meanwhile)"
    );
}

/// Connecting through a proxy that never answers fails within twice the connect timeout
/// (the library's bound on `connect`), with a typed error.
async fn assert_connect_bounded(proxy: &Proxy) {
    let connect_timeout = Duration::from_millis(300);
    let (result, took, late) = timed(
        Client::builder()
            .connect_timeout(connect_timeout)
            .response_timeout(RESPONSE_TIMEOUT)
            .reconnect_retries(1)
            .connect(&proxy.url()),
    )
    .await;
    match &result {
        Err(StoreError::Timeout { .. } | StoreError::Unreachable { .. }) => {}
        other => {
            panic!("connect through a stalled proxy: expected Timeout/Unreachable, got {other:?}")
        }
    }
    assert!(
        took <= connect_timeout * 2 + SLACK + late,
        "connect through a stalled proxy took {took:?} (connect timeout {connect_timeout:?}; \
         timers {late:?} late meanwhile)"
    );
}

/// (a) Every round trip is delayed by ~1 s, far beyond the 300 ms response timeout:
/// acquire, extend and release each return `Store(Timeout)` within the response timeout +
/// slack (a waiting acquire at the end of its wait), and connect within its own bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_beyond_response_timeout() {
    let (_server, proxy, client) = proxied().await;
    warm_up(&client).await;
    let lease = client
        .lock("delay:held")
        .ttl(Duration::from_secs(3))
        .watchdog(false)
        .acquire()
        .await
        .expect("acquire before the delay");

    proxy.delay(Duration::from_secs(1));
    let acquired = timed(
        client
            .lock("delay:new")
            .ttl(Duration::from_secs(1))
            .acquire(),
    )
    .await;
    assert_timed_out("acquire", &acquired);
    // A waiting acquire retries the timeouts within its wait and ends with the last one, no
    // later than one response timeout past the wait.
    let wait = Duration::from_secs(1);
    let (acquired, took, late) = timed(
        client
            .lock("delay:waiting")
            .ttl(Duration::from_secs(1))
            .wait(wait)
            .acquire(),
    )
    .await;
    match &acquired {
        Err(err) if is_timeout(err) => {}
        other => panic!("waiting acquire: expected Store(Timeout), got {other:?}"),
    }
    assert!(
        took >= wait && took <= wait + RESPONSE_TIMEOUT + SLACK + late,
        "waiting acquire took {took:?}; wait {wait:?}, response timeout {RESPONSE_TIMEOUT:?} \
         (timers {late:?} late meanwhile)"
    );
    assert_timed_out("extend", &timed(lease.extend(Duration::from_secs(3))).await);
    assert_timed_out("release", &timed(lease.release()).await);
    assert_connect_bounded(&proxy).await;
}

/// (b) The proxy swallows everything and answers nothing (half-open peer): acquire, extend
/// and release each return `Store(Timeout)` within the response timeout + slack, connect
/// within its bound, and a lease held with the watchdog is lost (reason `Expired`) at its
/// local deadline: not before it, no later than K + ttl − drift + slack for a blackhole
/// starting at K, and before K + ttl (the last two give or take how late this runtime ran
/// its timers: the signal is a timer, the README's limits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackhole() {
    let (_server, proxy, client) = proxied().await;
    warm_up(&client).await;
    let ttl = Duration::from_secs(1);
    let watched = client
        .lock("blackhole:watched")
        .ttl(ttl)
        .acquire()
        .await
        .expect("acquire");
    let other = client
        .lock("blackhole:other")
        .ttl(Duration::from_secs(3))
        .watchdog(false)
        .acquire()
        .await
        .expect("acquire");
    just_after_a_renewal(&client, Duration::from_millis(100)).await;
    let probe = LatenessProbe::start();

    proxy.blackhole();
    let mark = probe.mark();
    let start = Instant::now();
    let deadline = Instant::now() + watched.valid_for();
    let handle = watched.handle();
    let lost = tokio::spawn(async move {
        handle.lost().await;
        Instant::now()
    });

    assert_timed_out(
        "acquire",
        &timed(client.lock("blackhole:new").ttl(ttl).acquire()).await,
    );
    assert_timed_out("extend", &timed(other.extend(Duration::from_secs(3))).await);
    assert_timed_out("release", &timed(other.release()).await);
    assert_connect_bounded(&proxy).await;

    let lost_at = tokio::time::timeout(ttl + Duration::from_secs(10), lost)
        .await
        .expect("no lost signal within ttl + 10 s of the blackhole")
        .expect("lost task");
    let since = lost_at - start;
    let late = probe.since(mark);
    println!(
        "deadline {:?} after the blackhole, lost {since:?} after it",
        deadline - start
    );
    assert!(
        lost_at + Duration::from_millis(5) >= deadline,
        "lost {since:?} after the blackhole, before the deadline ({:?})",
        deadline - start
    );
    assert!(
        lost_at <= start + ttl - drift(ttl) + SLACK + late,
        "lost {since:?} after the blackhole: later than ttl - drift + {SLACK:?} + {late:?} (how \
         late the timers ran)"
    );
    assert!(
        lost_at < start + ttl + late,
        "lost {since:?} after the blackhole: not before the ttl plus how late the timers ran \
         ({late:?})"
    );
    assert_eq!(watched.lost_reason(), Some(LossReason::Expired));
}

/// (c) A release that reaches Redis after the lock expired and was taken by another holder
/// changes nothing. A (through the proxy, ttl 300 ms, no watchdog) holds; every chunk is then
/// delayed 3 s, so A's release times out client-side and arrives ~3 s later; meanwhile the
/// key expires and B (direct) acquires with ttl 5 s. After the delayed release has surely
/// run (seen in `INFO commandstats`), B's key still exists with B's ttl and B's release
/// reports `Released`. (The 3 s leave B seconds to get in first on a busy machine.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_release_after_reacquire_is_a_no_op() {
    let (server, proxy, a_client) = proxied().await;
    let b_client = calm_client(&server.url()).await;
    // The release script must be cached, or the delayed EVALSHA would only hit NOSCRIPT.
    warm_up(&b_client).await;
    let mut conn = server.conn().await;
    let name = "delayed-release";
    let key = b_client.__inspect().lock_key(name).expect("key");

    let a = a_client
        .lock(name)
        .ttl(Duration::from_millis(300))
        .watchdog(false)
        .acquire()
        .await
        .expect("A acquires");
    const DELAY: Duration = Duration::from_secs(3);
    proxy.delay(DELAY);
    let released_at = Instant::now();
    assert_timed_out("A's release", &timed(a.release()).await);

    let b_ttl = Duration::from_secs(5);
    let b_called = Instant::now();
    let b = b_client
        .lock(name)
        .ttl(b_ttl)
        .watchdog(false)
        .wait(Duration::from_secs(2))
        .acquire()
        .await
        .expect("B acquires once A's key expired");
    let b_acquired_at = Instant::now();
    assert!(
        b_acquired_at < released_at + DELAY - Duration::from_millis(200),
        "B acquired {:?} after A's release was sent: too late to race the delayed release \
         (the test did not exercise its case)",
        b_acquired_at - released_at
    );
    let (calls_before, failed_before) = command_stats(&mut conn, "evalsha").await;

    // The release reaches Redis DELAY after it was sent; give it half a second more.
    tokio::time::sleep_until(released_at + DELAY + Duration::from_millis(500)).await;
    let (calls_after, failed_after) = command_stats(&mut conn, "evalsha").await;
    assert_eq!(
        (calls_after - calls_before, failed_after - failed_before),
        (1, 0),
        "expected exactly A's delayed release to have run meanwhile"
    );
    let left = pttl(&mut conn, &key).await;
    let read_at = Instant::now();
    let held_for = b_acquired_at.elapsed();
    // B's expiry untouched: granted after `b_called`, B's key lives until b_ttl after that
    // at least, and this read (answered at `read_at`) bounds it from above (1 ms: PTTL's
    // whole milliseconds).
    assert!(
        left.is_some_and(
            |l| l <= b_ttl && read_at + l + Duration::from_millis(1) >= b_called + b_ttl
        ),
        "B's key after A's delayed release: pttl {left:?}, B acquired {held_for:?} ago with ttl {b_ttl:?}"
    );
    println!(
        "B acquired {:?} after A's release was sent; B's pttl {left:?} {held_for:?} later",
        b_acquired_at - released_at
    );
    let outcome = b.release().await;
    assert!(
        matches!(outcome, Ok(ReleaseOutcome::Released)),
        "B's release: expected Released, got {outcome:?}"
    );
}

/// (d) Every proxied connection is reset (RST both ways): the client is usable again within
/// 1 s (the first successful acquire is at most 1 s after the reset), every error seen
/// meanwhile is `Store(Unreachable | Timeout)`, and a lease held across the reset with the
/// watchdog on is not lost and releases as `Released`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_within_a_second_of_a_reset() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr()).await;
    let client = Client::builder()
        .response_timeout(RESPONSE_TIMEOUT)
        .connect(&proxy.url())
        .await
        .expect("connect");
    warm_up(&client).await;
    let held = client
        .lock("reset:held")
        .ttl(Duration::from_secs(1))
        .acquire()
        .await
        .expect("acquire");
    let connections = proxy.connections();

    let probe = LatenessProbe::start();
    proxy.reset_all().await;
    let mark = probe.mark();
    let reset_at = Instant::now();
    let mut errors = Vec::new();
    let mut attempt = 0;
    let first_ok = loop {
        attempt += 1;
        match client
            .lock(format!("reset:{attempt}"))
            .ttl(Duration::from_secs(1))
            .acquire()
            .await
        {
            Ok(lease) => {
                let at = Instant::now();
                lease.release().await.expect("release after reconnect");
                break at;
            }
            Err(err) => {
                assert!(
                    is_unavailable(&err),
                    "attempt {attempt}: untyped error {err:?}"
                );
                errors.push(err);
            }
        }
        assert!(
            reset_at.elapsed() < Duration::from_secs(10),
            "no successful acquire within 10 s of the reset; errors: {errors:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    println!(
        "first acquire {:?} after the reset, errors before: {errors:?}",
        first_ok - reset_at
    );
    // Within 1 s: the reconnect is paced by timers, so give or take how late they ran.
    let late = probe.since(mark);
    assert!(
        first_ok - reset_at <= Duration::from_secs(1) + late,
        "first successful acquire {:?} after the reset (timers {late:?} late meanwhile); \
         errors: {errors:?}",
        first_ok - reset_at
    );
    assert!(
        proxy.connections() > connections,
        "the client did not reconnect"
    );

    // The held lease's renewals ride over the reset.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(
        !held.is_lost(),
        "held lease lost across the reset: {:?}",
        held.lost_reason()
    );
    let outcome = held.release().await;
    assert!(
        matches!(outcome, Ok(ReleaseOutcome::Released)),
        "release of the held lease: {outcome:?}"
    );
}

/// (e) TESTPLAN 4, ambiguous acquire: `CLIENT PAUSE 1000 WRITE` is longer than the 300 ms
/// response timeout, so the client never learns whether its acquire was applied. Acquire
/// returns an error (`Store(Timeout)`), never a lease; no lease is watched and no renewal is
/// sent; the server does apply the acquire after the pause (its fence key appears: the lease
/// is eager, so that the grant leaves that trace), and the lock key never outlives the ttl:
/// its pttl never exceeds it, and it is gone by the end of the pause + ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_acquire_is_an_error_and_leaves_no_lock() {
    let server = RedisServer::start();
    let client = short_client(&server.url()).await;
    // Warm the script cache from another client: a released lease stays in its client's
    // watchdog map until the watchdog's next wake-up, which would blur `watched_leases`.
    warm_up(&calm_client(&server.url()).await).await;
    let mut conn = server.conn().await;
    let name = "ambiguous";
    let key = client.__inspect().lock_key(name).expect("key");
    let fence_key = client.__inspect().fence_key(name).expect("key");
    let ttl = Duration::from_secs(1);
    let pause = Duration::from_millis(1000);
    let renewals = client.__inspect().renewal_calls();
    let fence_before = get(&mut conn, &fence_key).await;

    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(pause.as_millis().to_string())
        .arg("WRITE")
        .query_async(&mut conn)
        .await
        .expect("CLIENT PAUSE");
    let paused_at = Instant::now();
    let acquired = timed(client.lock(name).ttl(ttl).fenced().acquire()).await;
    assert_timed_out("acquire during CLIENT PAUSE", &acquired);
    assert_eq!(
        client.__inspect().watched_leases(),
        0,
        "a watchdog was started"
    );

    // The server applies the acquire when the pause ends (on a busy machine, some time
    // after): from then on the key is gone within the ttl. Every read shows at most the ttl
    // left, until the acquire has been applied (its fence key moved) and the key is gone.
    let pause_end = paused_at + pause;
    loop {
        let left = pttl(&mut conn, &key).await;
        assert!(
            left.is_none_or(|l| l <= ttl),
            "the lock key has pttl {left:?}, more than the ttl {ttl:?}"
        );
        if left.is_none() && get(&mut conn, &fence_key).await != fence_before {
            break;
        }
        assert!(
            Instant::now() < pause_end + ttl + Duration::from_secs(10),
            "the lock key outlived the ttl, or the paused acquire was never applied (the \
             test did not exercise an ambiguous grant): pttl {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(client.__inspect().watched_leases(), 0);
    assert_eq!(
        client.__inspect().renewal_calls(),
        renewals,
        "renewals were sent"
    );
}

async fn get(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .expect("GET")
}
