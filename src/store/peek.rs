//! Reads of a key on any Redis connection, for the operators' view of a lock and (with the
//! `test-util` feature) for this crate's tests. Not on any hot path.

use std::time::Duration;

use redis::aio::ConnectionLike;

use crate::error::StoreError;

/// A key's value and remaining ttl, if it exists (`GET` and `PTTL` in one pipeline).
pub(crate) async fn value_and_ttl<C: ConnectionLike + Send>(
    conn: &mut C,
    key: &str,
) -> Result<Option<(String, Duration)>, StoreError> {
    let (value, pttl): (Option<String>, i64) =
        redis::pipe().get(key).pttl(key).query_async(conn).await?;
    Ok(match (value, u64::try_from(pttl)) {
        (Some(value), Ok(ms)) => Some((value, Duration::from_millis(ms))),
        // Gone, or expired between the two reads; a key of ours always has a ttl.
        _ => None,
    })
}

#[cfg(feature = "test-util")]
pub(crate) use self::hooks::*;

#[cfg(feature = "test-util")]
mod hooks {
    use std::time::Duration;

    use redis::AsyncCommands;
    use redis::aio::ConnectionLike;

    use crate::error::StoreError;

    pub(crate) async fn get<C: ConnectionLike + Send + Sync>(
        conn: &mut C,
        key: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(conn.get(key).await?)
    }

    pub(crate) async fn pttl<C: ConnectionLike + Send + Sync>(
        conn: &mut C,
        key: &str,
    ) -> Result<Option<Duration>, StoreError> {
        let ms: i64 = conn.pttl(key).await?;
        Ok(u64::try_from(ms).ok().map(Duration::from_millis))
    }

    pub(crate) async fn delete<C: ConnectionLike + Send + Sync>(
        conn: &mut C,
        key: &str,
    ) -> Result<bool, StoreError> {
        let n: i64 = conn.del(key).await?;
        Ok(n > 0)
    }

    /// `KEYS <prefix>:*` (on a cluster connection it goes to every primary and the answers
    /// are joined).
    pub(crate) async fn keys<C: ConnectionLike + Send + Sync>(
        conn: &mut C,
        prefix: &str,
    ) -> Result<Vec<String>, StoreError> {
        Ok(conn.keys(format!("{prefix}:*")).await?)
    }

    pub(crate) async fn live_entries<C: ConnectionLike + Send + Sync>(
        conn: &mut C,
        key: &str,
    ) -> Result<u64, StoreError> {
        const COUNT: &str = "
            local t = redis.call('TIME')
            local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
            return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
        ";
        Ok(redis::Script::new(COUNT)
            .key(key)
            .invoke_async(conn)
            .await?)
    }
}
