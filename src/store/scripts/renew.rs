//! `renew.lua`, after `holders.lua`: compare-and-`PEXPIRE` many leases (lock keys and holder-set
//! entries alike), never re-creating a key (contract in the `.lua` header). Used by the
//! watchdog's batched renewals, by `Lease::extend`, and to keep a lease with a minimum hold
//! until its end.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Cmd, Value};

use super::{Conn, Lua, Ownership, Replicas, millis};
use crate::error::StoreError;
use crate::token::Token;

pub(crate) static SCRIPT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("holders.lua"),
        include_str!("renew.lua")
    ))
});

/// One lease in a renewal batch.
#[derive(Clone)]
pub(crate) struct RenewItem<'a> {
    pub(crate) key: &'a str,
    pub(crate) token: &'a Token,
    pub(crate) ttl: Duration,
    /// 0: `key` is a lock key holding `token`; k ≥ 1: the lease is k entries of the holder
    /// set `key`.
    pub(crate) entries: u32,
    /// Replica acknowledgement the renewal needs, if any.
    pub(crate) replicas: Option<Replicas>,
}

/// The call that renews `items` (all in one hash slot on a cluster).
pub(crate) fn encode(items: &[&RenewItem<'_>]) -> (&'static Lua, Cmd) {
    // Lock keys only (the common case): the shorter form, without the entry counts.
    let shaped = items.iter().any(|item| item.entries > 0);
    let args = if shaped { 3 } else { 2 } * items.len();
    let mut cmd = SCRIPT.call(items.len(), args, 96 * items.len());
    for item in items {
        cmd.arg(item.key);
    }
    for item in items {
        cmd.arg(item.token.as_str());
    }
    for item in items {
        cmd.arg(millis(item.ttl));
    }
    if shaped {
        for item in items {
            cmd.arg(item.entries);
        }
    }
    (&SCRIPT, cmd)
}

/// The reply of [`encode`]'s call: one answer per item.
pub(crate) fn decode(reply: Value, items: usize) -> Result<Vec<Ownership>, StoreError> {
    let codes: Vec<i64> = redis::from_redis_value(reply).map_err(redis::RedisError::from)?;
    if codes.len() != items {
        return Err(StoreError::Protocol {
            message: format!("renew answered {} items for {items}", codes.len()),
        });
    }
    codes.into_iter().map(Ownership::from_reply).collect()
}

/// Renews `items` (all in one hash slot on a cluster) in one call on `conn`, with `WAIT` behind
/// it when any item needs replica acknowledgement (then `conn` must be one whose last write is
/// this call's: see `scripted/lanes.rs`).
pub(crate) async fn run<C: Conn>(
    conn: &C,
    items: &[RenewItem<'_>],
) -> Result<Vec<Ownership>, StoreError> {
    let refs: Vec<&RenewItem<'_>> = items.iter().collect();
    let (script, cmd) = encode(&refs);
    let reply: Value = match Replicas::strongest(items.iter().map(|i| i.replicas)) {
        None => script.invoke(&cmd, conn).await?,
        Some(wanted) => {
            let (reply, acked): (Value, u32) = script.invoke_then_wait(&cmd, wanted, conn).await?;
            // Too few acknowledgements: the renewals are applied on the primary but may not
            // survive a failover, so none of them counts (the watchdog tries again).
            if acked < wanted.count {
                return Err(StoreError::NotReplicated {
                    acked,
                    wanted: wanted.count,
                });
            }
            reply
        }
    };
    decode(reply, items.len())
}
