//! `acquire_read.lua` and `acquire_write.lua`, after `fence.lua`, `holders.lua` and
//! `writer_busy.lua` (the busy answer both give when a writer holds the lock): take a
//! read or the write hold of a read-write lock and mint the grant's fence. The two scripts
//! share one contract (KEYS, ARGV, reply; see the `.lua` headers), so one module owns both.
//! A writer's renewal is a lock's (`renew.lua`) and its release `release_writer.lua`, which
//! wakes both sides; a reader's are a holder set's (`renew.lua`, `release_entries.lua`).

use std::sync::LazyLock;

use super::acquire::AcquireReply;
use super::{Conn, Lua, millis};
use crate::error::StoreError;
use crate::store::requests::RwAcquire;
pub(crate) use crate::store::requests::Side;

static READ: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("fence.lua"),
        include_str!("holders.lua"),
        include_str!("writer_busy.lua"),
        include_str!("acquire_read.lua")
    ))
});
static WRITE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("fence.lua"),
        include_str!("holders.lua"),
        include_str!("writer_busy.lua"),
        include_str!("acquire_write.lua")
    ))
});

/// Takes one hold of `req.side` on the read-write lock of `req.keys`. Not batched.
pub(crate) async fn run<C: Conn>(
    conn: &C,
    req: &RwAcquire<'_>,
) -> Result<AcquireReply, StoreError> {
    let script = match req.side {
        Side::Read => &READ,
        Side::Write => &WRITE,
    };
    let (keys, token) = (req.keys, req.token);
    let mut cmd = script.call(5, 3, 320);
    cmd.arg(&keys.writer.lock)
        .arg(&keys.readers.set)
        .arg(&*keys.intent)
        .arg(&keys.readers.waited)
        .arg(&*keys.readers.fence);
    cmd.arg(token.as_str())
        .arg(millis(req.ttl))
        .arg(req.waits.arg());
    let code: i64 = script.invoke(&cmd, conn).await?;
    Ok(AcquireReply::from_code(code))
}
