//! `bloom_native.lua`: one operation on Bloom filter shards kept by the RedisBloom module
//! (contract in the `.lua` header; the call and reply types are `bloom.rs`'s).

use std::sync::LazyLock;

use super::Conn;
use super::Lua;
use crate::error::StoreError;

/// The script; [`bloom::run`](super::bloom::run) calls it.
pub(crate) static SCRIPT: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("bloom_native.lua")));

/// Whether the server has the RedisBloom module (`COMMAND INFO BF.RESERVE` names it). An ACL
/// user without `+command|info` is answered "no": bitmaps need no module.
pub(crate) async fn available<C: Conn>(conn: &C) -> Result<bool, StoreError> {
    let mut conn = conn.clone();
    let info: Result<redis::Value, StoreError> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("BF.RESERVE")
        .query_async(&mut conn)
        .await
        .map_err(StoreError::from);
    let info = match info {
        Err(StoreError::Refused {
            kind: crate::error::RefusedKind::NoPermission,
            ..
        }) => return Ok(false),
        other => other?,
    };
    Ok(match info {
        redis::Value::Array(entries) => entries
            .first()
            .is_some_and(|e| !matches!(e, redis::Value::Nil)),
        _ => false,
    })
}
