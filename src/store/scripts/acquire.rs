//! `acquire.lua`, after `fence.lua`: take locks and mint their fences (contract in the
//! `.lua` header).

use std::sync::LazyLock;

use redis::{Cmd, Value};

use super::release::ReleaseItem;
use super::{Calls, Lua, Replicas, codes};
use crate::error::StoreError;
use crate::keys::LockKeys;
use crate::token::Token;

pub(crate) static SCRIPT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("fence.lua"),
        include_str!("acquire.lua")
    ))
});

/// The same, for a node of a Redlock quorum: `boot.lua` first checks that the node has not
/// lost its data since the client last saw it.
static ON_QUORUM_NODE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("fence.lua"),
        include_str!("boot.lua"),
        include_str!("acquire.lua")
    ))
});

/// What one node of a quorum answered to an acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeAcquire {
    Replied(AcquireReply),
    /// The node's boot value is not the one the client saw: it lost its data since (restart
    /// without persistence, flush), or the client never saw it. Nothing was done.
    Restarted(Boot),
}

/// A node's boot value, and how long ago (on its clock) it was seeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Boot {
    pub(crate) value: String,
    pub(crate) age: std::time::Duration,
}

impl Boot {
    /// From `'<random>@<seeded ms>'` and the server's time in ms.
    pub(crate) fn parse(value: &str, now_ms: u64) -> Self {
        let seeded = value
            .rsplit_once('@')
            .and_then(|(_, ms)| ms.parse::<u64>().ok())
            .unwrap_or(0);
        Self {
            value: value.to_owned(),
            age: std::time::Duration::from_millis(now_ms.saturating_sub(seeded)),
        }
    }
}

/// Acquires on one node of a quorum, many per call: the call first checks the node's boot
/// value `seen` (seeding it with `fresh` if missing), once for every item in it. A node whose
/// boot value is not `seen` runs none of them and answers [`NodeAcquire::Restarted`] for all.
pub(crate) fn on_quorum_node(
    items: &[&AcquireItem],
    boot_key: &str,
    seen: &str,
    fresh: &str,
) -> (&'static Lua, Cmd) {
    let mut cmd = ON_QUORUM_NODE.call(2 * items.len() + 1, 3 * items.len() + 2, 128 * items.len());
    for item in items {
        cmd.arg(&item.keys.lock).arg(&*item.keys.fence);
    }
    cmd.arg(boot_key);
    for item in items {
        cmd.arg(item.token.as_str())
            .arg(item.ttl_ms)
            .arg(item.waits.arg());
    }
    cmd.arg(seen).arg(fresh);
    (&ON_QUORUM_NODE, cmd)
}

/// The reply of [`on_quorum_node`]'s call (its error reply included): one answer per item.
pub(crate) fn on_quorum_node_reply(
    reply: Result<Value, redis::RedisError>,
    items: usize,
) -> Result<Vec<NodeAcquire>, StoreError> {
    match reply {
        Ok(reply) => Ok(codes(reply, items, "acquire")?
            .into_iter()
            .map(|code| NodeAcquire::Replied(AcquireReply::from_code(code)))
            .collect()),
        Err(err) if err.code() == Some("DISTLOCK_RESTARTED") => {
            let detail = err.detail().unwrap_or_default().trim();
            let (value, now) = detail.rsplit_once(' ').unwrap_or((detail, "0"));
            let boot = Boot::parse(value, now.parse().unwrap_or(0));
            Ok(vec![NodeAcquire::Restarted(boot); items])
        }
        Err(err) => Err(err.into()),
    }
}

/// The answer to one acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    Granted {
        fence: u64,
    },
    /// `pttl` is the holder's remaining ttl; `None` if the key has no expiry.
    Busy {
        pttl: Option<std::time::Duration>,
    },
    /// Granted, but fewer replicas than required acknowledged it in time: the caller must
    /// not use it (and releases it).
    Unreplicated {
        acked: u32,
        wanted: u32,
    },
}

impl AcquireReply {
    /// One item of the reply: a fence (> 0), or −(pttl + 1) when busy.
    pub(crate) fn from_code(code: i64) -> Self {
        match u64::try_from(code) {
            Ok(fence) if fence > 0 => Self::Granted { fence },
            _ => Self::Busy {
                pttl: u64::try_from(-(code + 1))
                    .ok()
                    .map(std::time::Duration::from_millis),
            },
        }
    }
}

/// Whether an acquire's caller waits for the lock's release, which decides whether its holder
/// publishes a wake-up when it releases, and whether the release reserves the lock for a
/// waiter that has waited long. The in-memory store wakes its local waiters on every release
/// and only looks at [`Waits::Starving`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waits {
    /// A first attempt, or a caller that does not wait.
    No,
    /// The caller listens on the release channel: a busy lock is marked as waited for.
    Listening,
    /// As `Listening`, and other local waiters listen too: a granted lock is also marked, as
    /// they may be asleep on a mark its releaser consumed.
    WithOthers,
    /// As `WithOthers`, and the caller has waited longer than the starvation threshold: a
    /// busy lock is marked so that its release reserves it for such a waiter, and a reserved
    /// lock is taken.
    Starving,
}

impl Waits {
    pub(crate) fn arg(self) -> &'static str {
        match self {
            Self::No => "0",
            Self::Listening => "1",
            Self::WithOthers => "2",
            Self::Starving => "3",
        }
    }
}

/// One lock to acquire, owned so it can wait in a batch.
#[derive(Clone)]
pub(crate) struct AcquireItem {
    pub(crate) keys: LockKeys,
    pub(crate) token: Token,
    pub(crate) ttl_ms: u64,
    pub(crate) waits: Waits,
    /// Replica acknowledgement the grant needs, if any.
    pub(crate) replicas: Option<Replicas>,
}

/// Acquires, many per call.
#[derive(Clone)]
pub(crate) struct Acquires;

impl Acquires {
    /// Replies to a call that ran with `WAIT` behind it: a grant counts only if at least
    /// `acked` replicas is what its item asked for.
    pub(crate) fn acknowledged(
        replies: Vec<AcquireReply>,
        items: &[&AcquireItem],
        acked: u32,
    ) -> Vec<AcquireReply> {
        replies
            .into_iter()
            .zip(items)
            .map(|(reply, item)| match (reply, item.replicas) {
                (AcquireReply::Granted { .. }, Some(r)) if acked < r.count => {
                    AcquireReply::Unreplicated {
                        acked,
                        wanted: r.count,
                    }
                }
                (reply, _) => reply,
            })
            .collect()
    }
}

impl Calls for Acquires {
    type Item = AcquireItem;
    type Reply = AcquireReply;
    /// Measured with 32 and 64 tasks cycling acquire/release on distinct keys (peer bench
    /// W2): 16 splits a client's acquires into calls that take turns on the server; 32 (each
    /// kind sees about half the tasks) put them all in one call, 6 paid a call per few items.
    const FLUSH_AT: usize = 16;

    fn slot_key(item: &AcquireItem) -> &str {
        &item.keys.lock
    }

    fn encode(&self, items: &[&AcquireItem]) -> (&'static Lua, Cmd) {
        let mut cmd = SCRIPT.call(2 * items.len(), 3 * items.len(), 128 * items.len());
        for item in items {
            cmd.arg(&item.keys.lock).arg(&*item.keys.fence);
        }
        for item in items {
            cmd.arg(item.token.as_str())
                .arg(item.ttl_ms)
                .arg(item.waits.arg());
        }
        (&SCRIPT, cmd)
    }

    fn decode(
        &self,
        reply: Value,
        items: &[&AcquireItem],
    ) -> Result<Vec<AcquireReply>, StoreError> {
        Ok(codes(reply, items.len(), "acquire")?
            .into_iter()
            .map(AcquireReply::from_code)
            .collect())
    }

    /// A grant nobody waits for any more: give it back at once rather than at its ttl.
    fn undo(&self, item: AcquireItem, reply: &AcquireReply) -> Option<ReleaseItem> {
        matches!(
            reply,
            AcquireReply::Granted { .. } | AcquireReply::Unreplicated { .. }
        )
        .then_some(ReleaseItem {
            keys: item.keys,
            token: item.token,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn codes_decode_to_grants_and_busy_replies() {
        let busy = |ms| AcquireReply::Busy {
            pttl: Some(Duration::from_millis(ms)),
        };
        assert_eq!(
            AcquireReply::from_code(1_700_000_000_000_001),
            AcquireReply::Granted {
                fence: 1_700_000_000_000_001
            }
        );
        assert_eq!(
            AcquireReply::from_code(1),
            AcquireReply::Granted { fence: 1 }
        );
        assert_eq!(AcquireReply::from_code(-1), busy(0));
        assert_eq!(AcquireReply::from_code(-30_001), busy(30_000));
        assert_eq!(
            AcquireReply::from_code(0),
            AcquireReply::Busy { pttl: None },
            "a key without expiry"
        );
        assert_eq!(AcquireReply::from_code(i64::MIN), busy(i64::MAX as u64));
    }
}
