//! Case 18: memory pressure (`maxmemory`), without and with eviction.

use std::time::Duration;

use distlock::{LockError, LossReason, RefusedKind, StoreError};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::common::{calm_client, timed, warm_up};
use crate::support::RedisServer;

const JUNK: usize = 10 * 1024;
const MAX_JUNK_WRITES: usize = 5000;

fn limited_server(policy: &str) -> RedisServer {
    RedisServer::builder()
        .arg("--maxmemory", "2mb")
        .arg("--maxmemory-policy", policy)
        .start()
}

/// Writes a 10 KiB junk key (with `EX 3600` when `with_ttl`); the error if refused.
async fn write_junk(
    conn: &mut MultiplexedConnection,
    i: usize,
    with_ttl: bool,
) -> redis::RedisResult<()> {
    let mut cmd = redis::cmd("SET");
    cmd.arg(format!("junk:{i}")).arg(vec![b'x'; JUNK]);
    if with_ttl {
        cmd.arg("EX").arg(3600);
    }
    cmd.query_async(conn).await
}

/// Lowers `maxmemory` to 256 KiB below current usage (`noeviction` keeps everything), and
/// checks that a tiny write is refused with OOM.
async fn pin_out_of_memory(conn: &mut MultiplexedConnection) {
    let used: u64 = crate::common::info(conn, "memory")
        .await
        .get("used_memory")
        .and_then(|v| v.parse().ok())
        .expect("used_memory in INFO memory");
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(used - 256 * 1024)
        .query_async(conn)
        .await
        .expect("CONFIG SET maxmemory");
    let probe: redis::RedisResult<()> = redis::cmd("SET")
        .arg("probe")
        .arg("x")
        .query_async(conn)
        .await;
    assert!(
        probe.as_ref().is_err_and(|e| e.code() == Some("OOM")),
        "a tiny write was not refused with OOM: {probe:?}"
    );
}

fn is_oom(err: &LockError) -> bool {
    matches!(
        err,
        LockError::Store(StoreError::Refused {
            kind: RefusedKind::OutOfMemory,
            ..
        })
    )
}

/// `maxmemory 2mb` with `noeviction`, filled with junk until the server refuses writes with
/// OOM: acquiring a free lock then fails with `Store(Refused { kind: OutOfMemory })`, never
/// `Busy` — also when asked to wait, and promptly (it does not wait out the wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noeviction_acquire_reports_out_of_memory() {
    let server = limited_server("noeviction");
    let client = calm_client(&server.url()).await;
    warm_up(&client).await;
    let mut conn = server.conn().await;

    let mut refused = None;
    for i in 0..MAX_JUNK_WRITES {
        if let Err(err) = write_junk(&mut conn, i, false).await {
            refused = Some(err);
            break;
        }
    }
    let refused = refused.unwrap_or_else(|| {
        panic!(
            "{MAX_JUNK_WRITES} junk writes never hit maxmemory\nserver log:\n{}",
            server.log()
        )
    });
    assert_eq!(
        refused.code(),
        Some("OOM"),
        "junk write refused with {refused}"
    );
    // Right at the limit, a few bytes may come free again (client buffers shrink), and a
    // lock key is tiny: pin the server below its usage so every write is refused.
    pin_out_of_memory(&mut conn).await;

    let try_once = client
        .lock("oom:once")
        .ttl(Duration::from_secs(1))
        .acquire()
        .await;
    match &try_once {
        Err(err) if is_oom(err) => {}
        other => panic!("acquire under OOM: expected Refused(OutOfMemory), got {other:?}"),
    }
    let (waiting, took, late) = timed(
        client
            .lock("oom:wait")
            .ttl(Duration::from_secs(1))
            .wait(Duration::from_secs(3))
            .acquire(),
    )
    .await;
    match &waiting {
        Err(err) if is_oom(err) => {}
        other => panic!("waiting acquire under OOM: expected Refused(OutOfMemory), got {other:?}"),
    }
    // At once, not after its 3 s wait (less how late this runtime ran its timers).
    assert!(
        took < Duration::from_secs(1) + late,
        "waiting acquire under OOM took {took:?} (timers {late:?} late meanwhile)"
    );
}

/// `maxmemory 2mb` with `volatile-ttl`: a lease (ttl 2 s, watchdog on) is held, then junk
/// keys with a 1 h ttl are written until the server evicts the lock key (the key with the
/// shortest ttl). The holder's watchdog learns of it at its next renewal: `lost()` resolves
/// with reason `NotHeld` within ttl/3 + slack of the eviction, well before the lease's local
/// deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_is_noticed_by_the_watchdog() {
    let server = limited_server("volatile-ttl");
    let client = calm_client(&server.url()).await;
    let mut conn = server.conn().await;
    let ttl = Duration::from_secs(2);
    let name = "evicted";
    let key = client.__inspect().lock_key(name).expect("key");
    let lease = client.lock(name).ttl(ttl).acquire().await.expect("acquire");
    let probe = crate::common::LatenessProbe::start();

    // The key is evicted by one of the writes: after the write began (`evicted_at`, the
    // earliest it can have gone) and before the EXISTS that finds it gone. The watchdog may
    // notice in between (a busy machine can make that window long), so the lease is checked
    // only while the key demonstrably exists.
    let mut evicted = None;
    for i in 0..MAX_JUNK_WRITES {
        assert!(
            !lease.is_lost(),
            "lost while its key exists: {:?}",
            lease.lost_reason()
        );
        let before_write = Instant::now();
        let valid_until = before_write + lease.valid_for();
        write_junk(&mut conn, i, true)
            .await
            .unwrap_or_else(|e| panic!("junk write {i}: {e}\nserver log:\n{}", server.log()));
        let exists: bool = redis::cmd("EXISTS")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .expect("EXISTS");
        if !exists {
            evicted = Some((before_write, before_write.elapsed(), valid_until));
            break;
        }
    }
    let Some((evicted_at, window, deadline)) = evicted else {
        let stats = crate::common::info(&mut conn, "memory").await;
        panic!("the lock key was not evicted after {MAX_JUNK_WRITES} junk writes; {stats:?}");
    };
    let mark = probe.mark();

    let waited = tokio::time::timeout(ttl, lease.lost()).await;
    let lost_at = Instant::now();
    assert!(
        waited.is_ok(),
        "no lost signal within the ttl of the eviction"
    );
    assert_eq!(
        lease.lost_reason(),
        Some(LossReason::NotHeld),
        "the watchdog did not learn of the eviction"
    );
    let since = lost_at - evicted_at;
    println!(
        "lost {since:?} after the eviction; deadline was {:?} after it",
        deadline - evicted_at
    );
    // At the next renewal (every ttl/3), give or take the work around it and how late this
    // runtime ran its timers meanwhile.
    let late = probe.since(mark);
    // `since` counts from the start of the write that evicted it, so that write and its
    // EXISTS (`window`) are added.
    assert!(
        since <= ttl / 3 + Duration::from_millis(200) + late + window,
        "the loss was noticed {since:?} after the eviction (renewals come every {:?}; timers \
         {late:?} late meanwhile; the evicting write and its check took {window:?})",
        ttl / 3
    );
    // Before the deadline: `NotHeld` says a renewal found it (once past the deadline the
    // lease would have ended `Expired` first).
    assert!(
        lost_at < deadline,
        "the loss was noticed {since:?} after the eviction, not before the deadline ({:?})",
        deadline - evicted_at
    );
}

/// A server whose eviction policy can delete lock keys before their ttl (any policy but
/// `noeviction`: `volatile-ttl` picks exactly the short-lived keys locks are) is reported:
/// a warning at connect, its policy in `ping`, and a typed refusal at connect for a client
/// built with `require_noeviction(true)`. Under `noeviction` none of that happens.
#[tokio::test(flavor = "current_thread")]
async fn an_evicting_server_is_reported_at_connect_and_by_ping() {
    for (policy, evicts) in [
        ("volatile-ttl", true),
        ("allkeys-lru", true),
        ("noeviction", false),
    ] {
        let server = RedisServer::builder()
            .arg("--maxmemory", "64mb")
            .arg("--maxmemory-policy", policy)
            .start();
        let capture = crate::traces::Capture::start(tracing::Level::WARN);
        let client = distlock::Client::connect(&server.url())
            .await
            .expect("a warning, not an error");
        let warned = capture.text();
        drop(capture);
        assert_eq!(
            warned.contains("maxmemory-policy"),
            evicts,
            "{policy}: {warned:?}"
        );
        let health = client.ping().await;
        assert_eq!(
            health.nodes[0].eviction_policy.as_deref(),
            Some(policy),
            "{health:?}"
        );
        assert_eq!(health.evicting().len(), usize::from(evicts), "{health:?}");

        let strict = distlock::Client::builder()
            .require_noeviction(true)
            .connect(&server.url())
            .await;
        match strict {
            Err(StoreError::Evicting { policy: reported }) if evicts => {
                assert_eq!(reported, policy);
            }
            Ok(_) if !evicts => {}
            other => panic!("{policy}: {other:?}"),
        }
    }
}
