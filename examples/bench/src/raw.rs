//! The baseline: what a careful user writes by hand with the `redis` crate. One multiplexed
//! connection (on a cluster, redis-rs's `cluster_async::ClusterConnection`, which routes each
//! command to its key's node); `SET NX PX` to acquire, an EVALSHA compare-and-delete to
//! release, polling every millisecond while a lock is busy.

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
