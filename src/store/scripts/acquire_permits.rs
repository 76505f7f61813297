//! `acquire_permits.lua`, after `fence.lua` and `holders.lua`: take permits of a semaphore and
//! mint the grant's fence (contract in the `.lua` header).

use std::sync::LazyLock;
use std::time::Duration;

use super::acquire::{AcquireReply, Waits};
use super::{Conn, Lua, millis};
use crate::error::StoreError;
use crate::keys::SetKeys;
use crate::token::Token;

static SCRIPT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("fence.lua"),
        include_str!("holders.lua"),
        include_str!("acquire_permits.lua")
    ))
});

/// One semaphore acquire.
pub(crate) struct PermitsItem<'a> {
    pub(crate) keys: &'a SetKeys,
    pub(crate) token: &'a Token,
    /// Permits asked for.
    pub(crate) count: u32,
    /// The most that may be held at once.
    pub(crate) permits: u32,
    pub(crate) ttl: Duration,
    pub(crate) waits: Waits,
}

/// Takes `item.count` permits if they are free. Not batched: each acquire is one call.
pub(crate) async fn run<C: Conn>(
    conn: &C,
    item: &PermitsItem<'_>,
) -> Result<AcquireReply, StoreError> {
    let mut cmd = SCRIPT.call(4, 5, 256);
    cmd.arg(&item.keys.set)
        .arg(&*item.keys.fence)
        .arg(&item.keys.waited)
        .arg(&item.keys.claim);
    cmd.arg(item.token.as_str())
        .arg(item.count)
        .arg(item.permits)
        .arg(millis(item.ttl))
        .arg(match item.waits {
            Waits::No => "0",
            Waits::Listening | Waits::WithOthers => "1",
            Waits::Starving => "2",
        });
    let code: i64 = SCRIPT.invoke(&cmd, conn).await?;
    Ok(AcquireReply::from_code(code))
}
