//! `release_entries.lua`, after `holders.lua`: give back a lease's entries of a holder set (a
//! semaphore's permits, a read-write lock's reader), waking the waiters that listen (contract
//! in the `.lua` header).

use std::sync::LazyLock;

use super::{Conn, Lua, Ownership, Publish, publish_prelude};
use crate::error::StoreError;
use crate::store::requests::EntriesRelease;

static PLAIN: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        publish_prelude!(Plain),
        include_str!("holders.lua"),
        include_str!("release_entries.lua")
    ))
});
static SHARDED: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        publish_prelude!(Sharded),
        include_str!("holders.lua"),
        include_str!("release_entries.lua")
    ))
});

/// Removes `req.count` entries of `req.token` from the set of `req.keys`. Not batched.
pub(crate) async fn run<C: Conn>(
    conn: &C,
    publish: Publish,
    req: &EntriesRelease<'_>,
) -> Result<Ownership, StoreError> {
    let script = match publish {
        Publish::Plain => &PLAIN,
        Publish::Sharded => &SHARDED,
    };
    let mut cmd = script.call(2, 3, 256);
    cmd.arg(&req.keys.set)
        .arg(&req.keys.waited)
        .arg(req.token.as_str())
        .arg(req.count)
        .arg(&req.keys.channel);
    let code: i64 = script.invoke(&cmd, conn).await?;
    Ownership::from_reply(code)
}
