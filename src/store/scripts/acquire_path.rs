//! `acquire_path.lua`, after `fence.lua` and `holders.lua`: take a hierarchical lock's path
//! top-down, all levels or none, and mint the grant's fence (contract in the `.lua` header).
//! A path's renewal is one holder-set renewal per level (`renew.lua`), its release
//! `release_path.lua`.

use std::sync::LazyLock;

use super::acquire::AcquireReply;
use super::{Conn, Lua, millis};
use crate::error::StoreError;
use crate::store::requests::PathAcquire;

static SCRIPT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("fence.lua"),
        include_str!("holders.lua"),
        include_str!("acquire_path.lua")
    ))
});

/// Takes `req.keys`' path in `req.mode` for `req.token`; `req.waiter` stays the same across
/// one waiter's attempts. Not batched.
pub(crate) async fn run<C: Conn>(
    conn: &C,
    req: &PathAcquire<'_>,
) -> Result<AcquireReply, StoreError> {
    let keys = req.keys;
    let levels = keys.levels.len();
    let mut cmd = SCRIPT.call(6 * levels + 1, 4 + levels, 200 * levels + 160);
    for level in &keys.levels {
        for set in &level.holders {
            cmd.arg(set);
        }
        cmd.arg(&level.intent).arg(&level.waited);
    }
    cmd.arg(&*keys.fence);
    cmd.arg(req.token.as_str())
        .arg(millis(req.ttl))
        .arg(req.waits.arg())
        .arg(req.waiter);
    for level in 0..levels {
        cmd.arg(req.mode.on_level(level, levels).index() + 1);
    }
    let code: i64 = SCRIPT.invoke(&cmd, conn).await?;
    Ok(AcquireReply::from_code(code))
}
