//! `leader.lua`: an election's leader record beside its lock key: written by the lease that
//! holds the lock, read only while that lease still does, dropped by it (contract in the
//! `.lua` header).

use std::sync::LazyLock;

use redis::Value;

use super::{Conn, Lua, Publish, millis, publish_prelude};
use crate::error::StoreError;
pub(crate) use crate::store::requests::Record;
use crate::store::requests::{LeaderKeys, LeaderPut};
use crate::token::Token;

static PLAIN: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(concat!(publish_prelude!(Plain), include_str!("leader.lua"))));
static SHARDED: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        publish_prelude!(Sharded),
        include_str!("leader.lua")
    ))
});

fn script(publish: Publish) -> &'static Lua {
    match publish {
        Publish::Plain => &PLAIN,
        Publish::Sharded => &SHARDED,
    }
}

/// Writes the record of the lease holding `req.keys` under `req.token`, if it still does:
/// whether it did.
pub(crate) async fn put<C: Conn>(
    conn: &C,
    publish: Publish,
    req: &LeaderPut<'_>,
) -> Result<bool, StoreError> {
    let script = script(publish);
    let mut cmd = script.call(2, 6, 128 + req.record.1.len());
    cmd.arg(&req.keys.lock.lock)
        .arg(req.keys.record_key)
        .arg("put")
        .arg(&req.keys.lock.channel)
        .arg(req.token.as_str())
        .arg(req.record.0)
        .arg(&req.record.1)
        .arg(millis(req.ttl));
    let written: i64 = script.invoke(&cmd, conn).await?;
    Ok(written == 1)
}

/// The record, if the lease that wrote it holds the lock now.
pub(crate) async fn read<C: Conn>(
    conn: &C,
    publish: Publish,
    keys: &LeaderKeys<'_>,
) -> Result<Option<Record>, StoreError> {
    Ok(read_with_digest(conn, publish, keys)
        .await?
        .map(|(record, _)| record))
}

/// The record with the SHA-1 of the token of the lease that wrote it, if that lease holds the
/// lock now: nodes of a quorum agree on a leader only if they agree on its lease too.
pub(crate) async fn read_with_digest<C: Conn>(
    conn: &C,
    publish: Publish,
    keys: &LeaderKeys<'_>,
) -> Result<Option<(Record, String)>, StoreError> {
    let script = script(publish);
    let mut cmd = script.call(2, 2, 128);
    cmd.arg(&keys.lock.lock)
        .arg(keys.record_key)
        .arg("read")
        .arg(&keys.lock.channel);
    let reply: Value = script.invoke(&cmd, conn).await?;
    decode(reply)
}

/// Deletes the record if `token`'s lease wrote it: whether it did.
pub(crate) async fn drop<C: Conn>(
    conn: &C,
    publish: Publish,
    keys: &LeaderKeys<'_>,
    token: &Token,
) -> Result<bool, StoreError> {
    let script = script(publish);
    let mut cmd = script.call(2, 3, 128);
    cmd.arg(&keys.lock.lock)
        .arg(keys.record_key)
        .arg("drop")
        .arg(&keys.lock.channel)
        .arg(token.as_str());
    let dropped: i64 = script.invoke(&cmd, conn).await?;
    Ok(dropped == 1)
}

fn decode(reply: Value) -> Result<Option<(Record, String)>, StoreError> {
    let protocol = |what: &str| StoreError::Protocol {
        message: format!("leader.lua read answered {what}"),
    };
    match reply {
        Value::Nil | Value::Boolean(false) => Ok(None),
        Value::Array(items) => {
            let [term, identity, digest]: [Value; 3] = items
                .try_into()
                .map_err(|_| protocol("an array that is not {term, identity, digest}"))?;
            let text = |v: Value| match v {
                Value::BulkString(bytes) => String::from_utf8(bytes).ok(),
                Value::SimpleString(s) => Some(s),
                _ => None,
            };
            let term = text(term)
                .and_then(|t| t.parse::<u64>().ok())
                .ok_or_else(|| protocol("a term that is not a number"))?;
            let identity =
                text(identity).ok_or_else(|| protocol("an identity that is not text"))?;
            let digest = text(digest).ok_or_else(|| protocol("a digest that is not text"))?;
            Ok(Some(((term, identity), digest)))
        }
        other => Err(protocol(&format!("{other:?}"))),
    }
}
