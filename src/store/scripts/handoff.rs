//! `handoff.lua`, after `fence.lua`: pass a held lock straight to a waiter of the holder's
//! client (contract in the `.lua` header; see `src/lock/handoff.rs`).

use std::sync::LazyLock;

use super::{Conn, Lua, Ownership, Publish, millis, publish_prelude};
use crate::error::StoreError;
use crate::store::requests::Handoff;

static PLAIN: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        publish_prelude!(Plain),
        include_str!("fence.lua"),
        include_str!("handoff.lua")
    ))
});
static SHARDED: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        publish_prelude!(Sharded),
        include_str!("fence.lua"),
        include_str!("handoff.lua")
    ))
});

/// The answer to a hand-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandoffReply {
    /// The lock passed to the new token, under this fence if one was minted with it.
    Passed { fence: Option<u64> },
    /// It did not pass: the key was gone, or another token held it.
    Not(Ownership),
    /// It did not pass: a waiter had waited long, so the lock was released to the starving
    /// waiters of every client instead (reserved for them, and `!` published).
    Reserved,
}

impl HandoffReply {
    pub(crate) fn from_code(code: i64) -> Result<Self, StoreError> {
        match u64::try_from(code) {
            Ok(fence) if fence > 0 => Ok(Self::Passed { fence: Some(fence) }),
            _ if code == -2 => Ok(Self::Reserved),
            _ if code == -3 => Ok(Self::Passed { fence: None }),
            _ => Ownership::from_reply(code).map(Self::Not),
        }
    }
}

/// Passes the lock of `req.keys` from token `req.from` to token `req.to`, with `req.ttl`,
/// minting the new lease's fence if `req.mint`. Not batched: it only runs for a contended
/// lock.
pub(crate) async fn run<C: Conn>(
    conn: &C,
    publish: Publish,
    req: &Handoff<'_>,
) -> Result<HandoffReply, StoreError> {
    let script = match publish {
        Publish::Plain => &PLAIN,
        Publish::Sharded => &SHARDED,
    };
    let mut cmd = script.call(2, 5, 320);
    cmd.arg(&req.keys.lock)
        .arg(&*req.keys.fence)
        .arg(req.from.as_str())
        .arg(req.to.as_str())
        .arg(millis(req.ttl))
        .arg(&req.keys.channel)
        .arg(if req.mint { "1" } else { "0" });
    let code: i64 = script.invoke(&cmd, conn).await?;
    HandoffReply::from_code(code)
}
