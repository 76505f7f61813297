//! `release_writer.lua`: release a read-write lock's write hold, waking the writers and the
//! readers that listen (contract in the `.lua` header).

use std::sync::LazyLock;

use super::{Conn, Lua, Ownership, Publish, publish_prelude};
use crate::error::StoreError;
use crate::keys::RwKeys;
use crate::token::Token;

static PLAIN: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        publish_prelude!(Plain),
        include_str!("release_writer.lua")
    ))
});
static SHARDED: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        publish_prelude!(Sharded),
        include_str!("release_writer.lua")
    ))
});

/// Releases the write hold of `token` on the read-write lock of `keys`. Not batched.
pub(crate) async fn run<C: Conn>(
    conn: &C,
    publish: Publish,
    keys: &RwKeys,
    token: &Token,
) -> Result<Ownership, StoreError> {
    let script = match publish {
        Publish::Plain => &PLAIN,
        Publish::Sharded => &SHARDED,
    };
    let mut cmd = script.call(1, 3, 256);
    cmd.arg(&keys.writer.lock)
        .arg(token.as_str())
        .arg(&keys.writer.channel)
        .arg(&*keys.readable);
    let code: i64 = script.invoke(&cmd, conn).await?;
    Ownership::from_reply(code)
}
