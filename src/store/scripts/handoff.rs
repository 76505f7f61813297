//! `handoff.lua`, after `fence.lua`: pass a held lock straight to a waiter of the holder's
//! client (contract in the `.lua` header; see `src/lock/handoff.rs`).

use std::sync::LazyLock;
use std::time::Duration;

use super::{Conn, Lua, Ownership, Publish, millis, publish_prelude};
use crate::error::StoreError;
use crate::keys::LockKeys;
use crate::token::Token;

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

/// Passes the lock of `keys` from token `from` to token `to`, with `ttl`, minting the new
/// lease's fence if `mint`. Not batched: it only runs for a contended lock.
pub(crate) async fn run<C: Conn>(
    conn: &C,
    publish: Publish,
    keys: &LockKeys,
    from: &Token,
    to: &Token,
    ttl: Duration,
    mint: bool,
) -> Result<HandoffReply, StoreError> {
    let script = match publish {
        Publish::Plain => &PLAIN,
        Publish::Sharded => &SHARDED,
    };
    let mut cmd = script.call(2, 5, 320);
    cmd.arg(&keys.lock)
        .arg(&*keys.fence)
        .arg(from.as_str())
        .arg(to.as_str())
        .arg(millis(ttl))
        .arg(&keys.channel)
        .arg(if mint { "1" } else { "0" });
    let code: i64 = script.invoke(&cmd, conn).await?;
    HandoffReply::from_code(code)
}
