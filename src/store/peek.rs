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

/// One holder of a holder set (a semaphore's, a read-write lock's readers): its token, how
/// many entries (permits) it holds, and how long until its latest entry expires unless
/// renewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SetHolder {
    pub(crate) token: String,
    pub(crate) count: u32,
    pub(crate) remaining_ttl: Duration,
}

/// The live holders of holder set `key` (see `holders.lua`: entries `<token>:<i>` scored by
/// their expiry on the server's clock), by token, in no particular order.
pub(crate) async fn set_holders<C: ConnectionLike + Send>(
    conn: &mut C,
    key: &str,
) -> Result<Vec<SetHolder>, StoreError> {
    const LIVE: &str = "
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        return {now, redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')}
    ";
    let (now, entries): (i64, Vec<(String, f64)>) =
        redis::Script::new(LIVE).key(key).invoke_async(conn).await?;
    let mut holders: Vec<SetHolder> = Vec::new();
    for (entry, expiry) in entries {
        let Some((token, _)) = entry.rsplit_once(':') else {
            continue;
        };
        // Whole milliseconds on the server's clock, above `now` (the script's range).
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let left = Duration::from_millis((expiry as i64).saturating_sub(now).max(0) as u64);
        match holders.iter_mut().find(|h| h.token == token) {
            Some(h) => {
                h.count = h.count.saturating_add(1);
                h.remaining_ttl = h.remaining_ttl.max(left);
            }
            None => holders.push(SetHolder {
                token: token.to_owned(),
                count: 1,
                remaining_ttl: left,
            }),
        }
    }
    Ok(holders)
}

/// What [`scan`] found: keys, and whether the whole keyspace was covered.
#[derive(Debug, Default)]
pub(crate) struct KeyScan {
    /// The keys found, sorted, without repeats.
    pub(crate) keys: Vec<String>,
    /// Whether every node's scan reached its end (false: `max` keys were found first, or a
    /// node's scan needed more calls than the walk allows).
    pub(crate) complete: bool,
}

/// How many keys one `SCAN` call looks at.
pub(crate) const SCAN_COUNT: u32 = 500;

/// What a walk of the keyspace looks for, and how far it goes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyWalk<'a> {
    /// Keys that start with this (a literal: glob characters in it match only themselves).
    pub(crate) prefix: &'a str,
    /// Keys that also start with this are passed over (not counted, not listed).
    pub(crate) skip: Option<&'a str>,
    /// At most this many keys.
    pub(crate) max: usize,
    /// At most this many `SCAN` calls on one node (each looks at [`SCAN_COUNT`] keys).
    pub(crate) calls: u32,
}

/// `SCAN`s one node for the keys `walk` looks for, adding them to `found` until it holds
/// `walk.max` keys or the scan ends, within `walk.calls` calls. `call` sends one command to
/// that node. Returns whether the scan reached its end.
pub(crate) async fn scan<F, Fut>(
    mut call: F,
    walk: &KeyWalk<'_>,
    found: &mut std::collections::BTreeSet<String>,
) -> Result<bool, StoreError>
where
    F: FnMut(redis::Cmd) -> Fut,
    Fut: Future<Output = redis::RedisResult<redis::Value>>,
{
    let (prefix, max) = (walk.prefix, walk.max);
    let mut pattern = String::with_capacity(prefix.len() + 1);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('*');
    let mut cursor = 0u64;
    for _ in 0..walk.calls {
        if found.len() >= max {
            return Ok(false);
        }
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let (next, keys): (u64, Vec<String>) =
            redis::from_redis_value(call(cmd).await?).map_err(redis::RedisError::from)?;
        let room = max - found.len();
        let mut keys = keys;
        if let Some(skip) = walk.skip {
            keys.retain(|key| !key.starts_with(skip));
        }
        let more = keys.len() > room;
        found.extend(keys.into_iter().take(room));
        if next == 0 {
            return Ok(!more);
        }
        cursor = next;
    }
    Ok(false)
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
