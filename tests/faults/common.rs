//! Helpers shared by the fault tests: clients with short deadlines, typed-error checks, a
//! poller, `INFO` parsing, and the timing bounds the tests assert.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use distlock::{Client, LockError, StoreError};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

pub use crate::support::lateness::LatenessProbe;

/// Allowed on top of a specified deadline for the work around it (a round trip to a killed or
/// blackholed server, a reconnect attempt, building the error) before a test calls it late,
/// besides how late this runtime ran its timers meanwhile, which [`timed`] measures: a
/// deadline is a timer, kept to within that lateness (the README's limits). A hang takes
/// seconds.
pub const SLACK: Duration = Duration::from_millis(200);

/// The client response timeout used by the fault tests (every operation is bounded by it).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_millis(300);

/// How far before the store's expiry a lease's local deadline lies (the library's own figure).
pub fn drift(ttl: Duration) -> Duration {
    distlock::safety_margin(ttl)
}

/// Turns on log output when `FAULTS_LOG` is set (e.g. `FAULTS_LOG=debug`).
pub fn init_tracing() {
    let Ok(level) = std::env::var("FAULTS_LOG") else {
        return;
    };
    let level = level
        .parse()
        .unwrap_or(tracing_subscriber::filter::LevelFilter::DEBUG);
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_max_level(level)
        .try_init();
}

/// A client with the fault tests' short response timeout and few reconnect retries, so a
/// dead server is noticed quickly.
pub async fn short_client(url: &str) -> Client {
    init_tracing();
    Client::builder()
        .response_timeout(RESPONSE_TIMEOUT)
        .connect_timeout(Duration::from_millis(500))
        .reconnect_retries(1)
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// A client with roomy deadlines, for the side of a test that is not under fault.
pub async fn calm_client(url: &str) -> Client {
    init_tracing();
    Client::builder()
        .response_timeout(Duration::from_secs(2))
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// `Store(Unreachable)` or `Store(Timeout)`: the two errors a connection fault may produce.
pub fn is_unavailable(err: &LockError) -> bool {
    matches!(
        err,
        LockError::Store(StoreError::Unreachable { .. } | StoreError::Timeout { .. })
    )
}

/// Whether `err` is `Store(Timeout)`.
pub fn is_timeout(err: &LockError) -> bool {
    matches!(err, LockError::Store(StoreError::Timeout { .. }))
}

/// Polls `cond` every `every` until it holds or `within` has passed; returns whether it held.
pub async fn poll_until(within: Duration, every: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(every).await;
    }
}

/// Like [`poll_until`] for an async condition.
pub async fn poll_until_async<F, Fut>(within: Duration, every: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = Instant::now() + within;
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(every).await;
    }
}

/// Runs `fut` and returns its output, how long it took, and how late this runtime ran its
/// timers meanwhile (a [`LatenessProbe`]'s measure): a deadline inside `fut` is met when
/// `took <= deadline + SLACK + late`.
pub async fn timed<T>(fut: impl Future<Output = T>) -> (T, Duration, Duration) {
    let probe = LatenessProbe::start();
    let mark = probe.mark();
    let start = Instant::now();
    let out = fut.await;
    (out, start.elapsed(), probe.since(mark))
}

/// Waits until the client's watchdog has sent a renewal, then `after` more, and returns.
/// Used to inject a fault mid-way between two renewals, so that the lease's deadline lies
/// clearly inside (K, K + ttl) for a fault at K.
pub async fn just_after_a_renewal(client: &Client, after: Duration) {
    let inspect = client.__inspect();
    let before = inspect.renewal_calls();
    assert!(
        poll_until(Duration::from_secs(3), Duration::from_millis(2), || {
            inspect.renewal_calls() > before
        })
        .await,
        "the watchdog sent no renewal within 3 s"
    );
    tokio::time::sleep(after).await;
}

/// One section of `INFO`, as `field -> value`.
pub async fn info(conn: &mut MultiplexedConnection, section: &str) -> HashMap<String, String> {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .expect("INFO");
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

/// Executions of one command from `INFO commandstats`: `(calls, failed_calls)`, zeros if it
/// never ran.
pub async fn command_stats(conn: &mut MultiplexedConnection, command: &str) -> (u64, u64) {
    let stats = info(conn, "commandstats").await;
    let Some(line) = stats.get(&format!("cmdstat_{command}")) else {
        return (0, 0);
    };
    let field = |name: &str| {
        line.split(',')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .map_or(0, |(_, v)| v.parse().unwrap_or(0))
    };
    (field("calls"), field("failed_calls"))
}

/// Successful executions of the script commands (`EVALSHA` and `EVAL`): calls minus
/// failed calls.
pub async fn script_runs(conn: &mut MultiplexedConnection) -> u64 {
    let mut total = 0;
    for command in ["evalsha", "eval"] {
        let (calls, failed) = command_stats(conn, command).await;
        total += calls - failed;
    }
    total
}

/// Remaining ttl of `key` on the server (`None` if it does not exist).
pub async fn pttl(conn: &mut MultiplexedConnection, key: &str) -> Option<Duration> {
    let ms: i64 = redis::cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("PTTL");
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// Acquires and releases a throw-away lock, so that every script is in the server's script
/// cache (a later `EVALSHA` then runs at once instead of answering NOSCRIPT).
pub async fn warm_up(client: &Client) {
    // Eager, so that the acquire script is loaded (a lazy grant is a plain SET), then a lazy
    // lease that mints, for the mint script.
    let lease = client
        .lock("warm-up")
        .ttl(Duration::from_secs(2))
        .fenced()
        .acquire()
        .await
        .expect("warm-up acquire");
    lease
        .extend(Duration::from_secs(2))
        .await
        .expect("warm-up extend");
    lease.release().await.expect("warm-up release");
    let lazy = client
        .lock("warm-up")
        .ttl(Duration::from_secs(2))
        .acquire()
        .await
        .expect("warm-up acquire");
    lazy.fence().await.expect("warm-up mint");
    lazy.release().await.expect("warm-up release");
}
