//! `release_path.lua`, after `holders.lua`: give back every level's entry of a hierarchical
//! lock's lease, waking the hierarchy's waiters if a level was waited for (contract in the
//! `.lua` header).

use std::sync::LazyLock;

use super::{Conn, Lua, Ownership, Publish, publish_prelude};
use crate::error::StoreError;
use crate::keys::PathKeys;
use crate::mode::HierarchyMode;
use crate::token::Token;

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

/// Removes `token`'s entry from every level of `keys`' path taken in `mode`. Not batched.
pub(crate) async fn run<C: Conn>(
    conn: &C,
    publish: Publish,
    keys: &PathKeys,
    mode: HierarchyMode,
    token: &Token,
) -> Result<Ownership, StoreError> {
    let script = match publish {
        Publish::Plain => &PLAIN,
        Publish::Sharded => &SHARDED,
    };
    let levels = keys.levels.len();
    let mut cmd = script.call(2 * levels, 2, 120 * levels + 96);
    for (i, level) in keys.levels.iter().enumerate() {
        cmd.arg(level.holders_of(mode.on_level(i, levels)))
            .arg(&level.waited);
    }
    cmd.arg(token.as_str()).arg(&keys.channel);
    let code: i64 = script.invoke(&cmd, conn).await?;
    Ownership::from_reply(code)
}
