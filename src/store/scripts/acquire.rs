//! `acquire.lua`, after `fence.lua`: take locks, and mint the fences of those that ask for
//! one now (contract in the `.lua` header).

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

/// The answer to one acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Granted; `fence` is the grant's fence if it was minted with it (an eager lease, and
    /// every grant of a semaphore, a read-write lock or a multi-lock), `None` if the lease
    /// mints it when first asked.
    Granted { fence: Option<u64> },
    /// `pttl` is the holder's remaining ttl; `None` if the key has no expiry.
    Busy { pttl: Option<std::time::Duration> },
    /// Granted, but fewer replicas than required acknowledged it in time: the caller must
    /// not use it (and releases it).
    Unreplicated { acked: u32, wanted: u32 },
}

impl AcquireReply {
    /// One reply of a script that always mints (`acquire_permits.lua`, `acquire_read.lua`,
    /// `acquire_write.lua`): a fence (> 0), or −(pttl + 1) when busy.
    pub(crate) fn from_code(code: i64) -> Self {
        match u64::try_from(code) {
            Ok(fence) if fence > 0 => Self::Granted { fence: Some(fence) },
            _ => Self::Busy {
                pttl: u64::try_from(-(code + 1))
                    .ok()
                    .map(std::time::Duration::from_millis),
            },
        }
    }

    /// One item of `acquire.lua`'s reply: a fence (> 0), 0 for a grant that minted none, or
    /// −(pttl + 2) when busy (−1: the key has no expiry).
    pub(crate) fn from_acquire_code(code: i64) -> Self {
        match u64::try_from(code) {
            Ok(0) => Self::Granted { fence: None },
            Ok(fence) => Self::Granted { fence: Some(fence) },
            Err(_) => Self::Busy {
                pttl: u64::try_from(-(code + 2))
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
    /// Mint the grant's fence with it (an eager lease); else the lease mints it when asked.
    pub(crate) mint: bool,
}

impl AcquireItem {
    /// The item's four arguments to `acquire.lua`.
    fn args(&self, cmd: &mut Cmd) {
        cmd.arg(self.token.as_str())
            .arg(self.ttl_ms)
            .arg(self.waits.arg())
            .arg(if self.mint { "1" } else { "0" });
    }
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
        let mut cmd = SCRIPT.call(2 * items.len(), 4 * items.len(), 128 * items.len());
        for item in items {
            cmd.arg(&item.keys.lock).arg(&*item.keys.fence);
        }
        for item in items {
            item.args(&mut cmd);
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
            .map(AcquireReply::from_acquire_code)
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
    fn acquire_codes_decode_to_grants_with_or_without_fence_and_busy_replies() {
        let busy = |ms| AcquireReply::Busy {
            pttl: Some(Duration::from_millis(ms)),
        };
        assert_eq!(
            AcquireReply::from_acquire_code(1_700_000_000_000_001),
            AcquireReply::Granted {
                fence: Some(1_700_000_000_000_001)
            }
        );
        assert_eq!(
            AcquireReply::from_acquire_code(0),
            AcquireReply::Granted { fence: None },
            "a grant that leaves its fence to the lease"
        );
        assert_eq!(
            AcquireReply::from_acquire_code(-1),
            AcquireReply::Busy { pttl: None },
            "a key without expiry"
        );
        assert_eq!(AcquireReply::from_acquire_code(-2), busy(0));
        assert_eq!(AcquireReply::from_acquire_code(-30_002), busy(30_000));
        assert_eq!(
            AcquireReply::from_acquire_code(i64::MIN),
            busy(i64::MAX as u64 - 1)
        );
    }

    #[test]
    fn codes_of_the_scripts_that_always_mint_decode_to_grants_and_busy_replies() {
        let busy = |ms| AcquireReply::Busy {
            pttl: Some(Duration::from_millis(ms)),
        };
        assert_eq!(
            AcquireReply::from_code(1_700_000_000_000_001),
            AcquireReply::Granted {
                fence: Some(1_700_000_000_000_001)
            }
        );
        assert_eq!(
            AcquireReply::from_code(1),
            AcquireReply::Granted { fence: Some(1) }
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
