//! `unmark.lua`: a starving waiter that gives up takes its mark back (contract in the `.lua`
//! header).

use std::sync::LazyLock;

use super::{Conn, Lua};
use crate::error::StoreError;
use crate::keys::LockKeys;

pub(crate) static SCRIPT: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("unmark.lua")));

/// Takes back the starving mark on the lock of `keys`, if any. Not batched: it only runs when
/// a waiter that waited long gives up.
pub(crate) async fn run<C: Conn>(conn: &C, keys: &LockKeys) -> Result<(), StoreError> {
    let mut cmd = SCRIPT.call(1, 0, 64);
    cmd.arg(&keys.lock);
    let _: i64 = SCRIPT.invoke(&cmd, conn).await?;
    Ok(())
}
