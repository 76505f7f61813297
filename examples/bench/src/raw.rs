//! The baseline: what a careful user writes by hand with the `redis` crate. One multiplexed
//! connection (on a cluster, redis-rs's `cluster_async::ClusterConnection`, which routes each
//! command to its key's node); `SET NX PX` to acquire, an EVALSHA compare-and-delete to
//! release, polling every millisecond while a lock is busy. On a Redlock quorum, the same
//! two commands sent to every node at once, as the Redlock description has them: granted when
//! a majority said yes within what is left of the ttl, released everywhere.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    )
});

pub async fn connect(url: &str) -> Result<MultiplexedConnection, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(5)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| e.to_string())
}

/// A cluster connection through `seeds`, with the same response timeout.
pub async fn connect_cluster(seeds: &[String]) -> Result<ClusterConnection, String> {
    ClusterClient::builder(seeds.iter().map(String::as_str))
        .response_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| e.to_string())?
        .get_async_connection()
        .await
        .map_err(|e| e.to_string())
}

/// One attempt: `true` if granted.
pub async fn try_acquire(
    conn: &mut impl ConnectionLike,
    key: &str,
    token: &str,
    ttl_ms: u64,
) -> redis::RedisResult<bool> {
    let reply: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(ttl_ms)
        .query_async(conn)
        .await?;
    Ok(reply.is_some())
}

/// Polls every millisecond until granted.
pub async fn acquire_polling(
    conn: &mut impl ConnectionLike,
    key: &str,
    token: &str,
    ttl_ms: u64,
) -> redis::RedisResult<()> {
    while !try_acquire(conn, key, token, ttl_ms).await? {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

pub async fn release(
    conn: &mut impl ConnectionLike,
    key: &str,
    token: &str,
) -> redis::RedisResult<bool> {
    let n: i64 = RELEASE.key(key).arg(token).invoke_async(conn).await?;
    Ok(n == 1)
}

/// A token as unguessable as distlock's, so both peers pay for one.
pub fn token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Redlock's clock drift allowance: 1% of the ttl plus 2 ms.
fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// One Redlock attempt over `nodes` (one connection per independent primary): `SET NX PX` on
/// every node at once, each bounded by `node_timeout`; granted if a majority said yes and some
/// of the ttl is left after the time spent and the drift. A failed attempt releases whatever
/// it got. `true` if granted.
pub async fn quorum_try_acquire(
    nodes: &mut [MultiplexedConnection],
    key: &str,
    token: &str,
    ttl: Duration,
    node_timeout: Duration,
) -> bool {
    let start = std::time::Instant::now();
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    let granted = futures_util::future::join_all(nodes.iter_mut().map(|conn| async move {
        matches!(
            tokio::time::timeout(node_timeout, try_acquire(conn, key, token, ttl_ms)).await,
            Ok(Ok(true))
        )
    }))
    .await
    .into_iter()
    .filter(|&yes| yes)
    .count();
    let valid = ttl.saturating_sub(start.elapsed() + drift(ttl)) > Duration::ZERO;
    if granted > nodes.len() / 2 && valid {
        return true;
    }
    quorum_release(nodes, key, token).await;
    false
}

/// The compare-and-delete on every node at once (errors ignored: the ttl ends what is left).
/// How many nodes held it.
pub async fn quorum_release(nodes: &mut [MultiplexedConnection], key: &str, token: &str) -> usize {
    futures_util::future::join_all(
        nodes
            .iter_mut()
            .map(|conn| async move { matches!(release(conn, key, token).await, Ok(true)) }),
    )
    .await
    .into_iter()
    .filter(|&held| held)
    .count()
}
