//! `renew.lua`, after `holders.lua`: compare-and-`PEXPIRE` many leases (lock keys and holder-set
//! entries alike), never re-creating a key (contract in the `.lua` header). Used by the
//! watchdog's batched renewals, by `Lease::extend`, and to keep a lease with a minimum hold
//! until its end.

use std::sync::LazyLock;
use std::time::Duration;

use super::{Conn, Held, Lua, Replicas, millis};
use crate::error::StoreError;
use crate::token::Token;

pub(crate) static SCRIPT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("holders.lua"),
        include_str!("renew.lua")
    ))
});

/// One lease in a renewal batch.
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

/// Renews `items` (all in one hash slot on a cluster) in one call.
pub(crate) async fn run<C: Conn>(
    conn: &C,
    items: &[RenewItem<'_>],
) -> Result<Vec<Held>, StoreError> {
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
    let codes: Vec<i64> = match Replicas::strongest(items.iter().map(|i| i.replicas)) {
        None => SCRIPT.invoke(&cmd, conn).await?,
        Some(wanted) => {
            let (codes, acked): (Vec<i64>, u32) =
                SCRIPT.invoke_then_wait(&cmd, wanted, conn).await?;
            // Too few acknowledgements: the renewals are applied on the primary but may not
            // survive a failover, so none of them counts (the watchdog tries again).
            if acked < wanted.count {
                return Err(StoreError::NotReplicated {
                    acked,
                    wanted: wanted.count,
                });
            }
            codes
        }
    };
    if codes.len() != items.len() {
        return Err(StoreError::Protocol {
            message: format!("renew answered {} items for {}", codes.len(), items.len()),
        });
    }
    codes.into_iter().map(Held::from_reply).collect()
}
