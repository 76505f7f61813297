//! `release_path.lua`, after `holders.lua`: give back every level's entry of a hierarchical
//! lock's lease, waking the hierarchy's waiters if a level was waited for (contract in the
//! `.lua` header).

use std::sync::LazyLock;

use super::{Conn, Lua, Ownership, Publish, publish_prelude};
use crate::error::StoreError;
use crate::store::requests::PathRelease;

static PLAIN: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        publish_prelude!(Plain),
        include_str!("holders.lua"),
        include_str!("release_path.lua")
    ))
});
static SHARDED: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        publish_prelude!(Sharded),
        include_str!("holders.lua"),
        include_str!("release_path.lua")
    ))
});

/// Removes `req.token`'s entry from every level of `req.keys`' path taken in `req.mode`. Not
/// batched.
pub(crate) async fn run<C: Conn>(
    conn: &C,
    publish: Publish,
    req: &PathRelease<'_>,
) -> Result<Ownership, StoreError> {
    let script = match publish {
        Publish::Plain => &PLAIN,
        Publish::Sharded => &SHARDED,
    };
    let (keys, mode) = (req.keys, req.mode);
    let levels = keys.levels.len();
    let mut cmd = script.call(2 * levels, 2, 120 * levels + 96);
    for (i, level) in keys.levels.iter().enumerate() {
        cmd.arg(level.holders_of(mode.on_level(i, levels)))
            .arg(&level.waited);
    }
    cmd.arg(req.token.as_str()).arg(&keys.channel);
    let code: i64 = script.invoke(&cmd, conn).await?;
    Ownership::from_reply(code)
}
