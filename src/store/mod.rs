//! The store boundary: what locks and rate limits need from a backend, and the backends
//! behind it.
//!
//! [`Store`] is an enum rather than a generic parameter so that no user-facing type carries a
//! backend parameter. Every backend implements the same semantics (see the scripts under
//! `src/scripts/` for the contract); the in-memory one does it in Rust under a mutex.
//!
//! Redis Cluster and a Redlock quorum will be further variants. A lock key and its channel share
//! the name's hash tag, and batched acquires, releases, renewals and rate-limit checks are
//! per-item results that a cluster backend can split by slot. The single-primary backend mints
//! fences from one key per prefix; a cluster backend needs one fence key per slot instead (a
//! key whose tag hashes to the lock's slot), with the same `max(last + 1, TIME)` rule.

mod batch;
mod lua;
mod memory;
pub(crate) mod redis;
mod wakeups;

use std::sync::Arc;
use std::time::Duration;

pub(crate) use self::memory::MemoryStore;
pub(crate) use self::redis::RedisStore;
pub(crate) use self::wakeups::{Subscription, Wakeups};

use crate::error::StoreError;
use crate::keys::LockKeys;
use crate::ratelimit::Spec;
use crate::token::Token;

/// A backend: a single Redis primary, or memory.
#[derive(Clone)]
pub(crate) enum Store {
    Redis(RedisStore),
    Memory(MemoryStore),
}

/// The answer to an acquire attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    Granted {
        fence: u64,
    },
    /// `pttl` is the holder's remaining ttl; `None` if the key has no expiry.
    Busy {
        pttl: Option<Duration>,
    },
}

impl AcquireReply {
    /// One item of `acquire.lua`'s reply: a fence (> 0), or −(pttl + 1) when busy.
    pub(crate) fn from_code(code: i64) -> Self {
        match u64::try_from(code) {
            Ok(fence) if fence > 0 => Self::Granted { fence },
            _ => Self::Busy {
                pttl: u64::try_from(-(code + 1)).ok().map(Duration::from_millis),
            },
        }
    }
}

/// Whether an acquire's caller waits for the lock's release, which decides whether its holder
/// publishes a wake-up when it releases, and whether the release reserves the lock for a
/// waiter that has waited long (`acquire.lua`). The in-memory store wakes its local waiters on
/// every release and only looks at [`Waits::Starving`].
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

/// Whether a key held the expected token (the reply of release and renew).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    /// It did (and the operation was applied).
    Yes,
    /// The key is gone.
    Gone,
    /// Another token holds it.
    Other,
}

impl Held {
    pub(crate) fn from_reply(code: i64) -> Result<Self, StoreError> {
        match code {
            1 => Ok(Self::Yes),
            0 => Ok(Self::Gone),
            -1 => Ok(Self::Other),
            other => Err(StoreError::Protocol {
                message: format!("expected 1, 0 or -1 from a lock script, got {other}"),
            }),
        }
    }
}

/// The answer to a hand-off (`handoff.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandoffReply {
    /// The lock passed to the new token, under this fence.
    Passed { fence: u64 },
    /// It did not pass: the key was gone, or another token held it.
    Not(Held),
    /// It did not pass: a waiter had waited long, so the lock was released to the starving
    /// waiters of every client instead (reserved for them, and `!` published).
    Reserved,
}

impl HandoffReply {
    pub(crate) fn from_code(code: i64) -> Result<Self, StoreError> {
        match u64::try_from(code) {
            Ok(fence) if fence > 0 => Ok(Self::Passed { fence }),
            _ if code == -2 => Ok(Self::Reserved),
            _ => Held::from_reply(code).map(Self::Not),
        }
    }
}

/// One lease in a renewal batch.
pub(crate) struct RenewItem<'a> {
    pub(crate) key: &'a str,
    pub(crate) token: &'a Token,
    pub(crate) ttl: Duration,
}

/// One rate-limit check: one key and one policy per entry, all keys in one hash slot.
pub(crate) struct RateRequest<'a> {
    pub(crate) keys: &'a [String],
    pub(crate) specs: &'a [Spec],
    /// Cost units to consume; 0 peeks (decides for a cost of 1, consumes nothing).
    pub(crate) cost: u32,
    /// Test-only: decide at this time (µs since the epoch) instead of the store's clock.
    pub(crate) now_us: Option<u64>,
}

/// The answer to a rate-limit check: whether it was applied (every policy allowed and the
/// cost was above zero), and each policy's verdict, in request order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RateReply {
    pub(crate) applied: bool,
    pub(crate) verdicts: Vec<Verdict>,
}

/// One policy's verdict; times in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub(crate) allowed: bool,
    pub(crate) remaining: u64,
    pub(crate) retry_us: u64,
    pub(crate) reset_us: u64,
}

impl Verdict {
    /// From the algorithms' signed arithmetic; negatives (never produced) clamp to zero.
    pub(crate) fn new(allowed: bool, remaining: i64, retry_us: i64, reset_us: i64) -> Self {
        let clamp = |x: i64| u64::try_from(x).unwrap_or(0);
        Self {
            allowed,
            remaining: clamp(remaining),
            retry_us: clamp(retry_us),
            reset_us: clamp(reset_us),
        }
    }
}

/// Milliseconds for Redis, at least 1.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl Store {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Redis(_) => "redis",
            Self::Memory(_) => "memory",
        }
    }

    pub(crate) async fn acquire(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl: Duration,
        waits: Waits,
    ) -> Result<AcquireReply, StoreError> {
        self.bounded(async {
            match self {
                Self::Redis(s) => s.acquire(keys, token, ttl, waits).await,
                Self::Memory(s) => Ok(s.acquire(keys, token, ttl, waits)),
            }
        })
        .await
    }

    pub(crate) async fn release(&self, keys: &LockKeys, token: &Token) -> Result<Held, StoreError> {
        self.bounded(async {
            match self {
                Self::Redis(s) => s.release(keys, token).await,
                Self::Memory(s) => Ok(s.release(keys, token)),
            }
        })
        .await
    }

    /// Takes back the mark a waiter that waited long left on a lock, when it gives up and no
    /// other waiter of this client starves on it (`unmark.lua`).
    pub(crate) async fn unmark(&self, keys: &LockKeys) -> Result<(), StoreError> {
        self.bounded(async {
            match self {
                Self::Redis(s) => s.unmark(keys).await,
                Self::Memory(s) => {
                    s.unmark(keys);
                    Ok(())
                }
            }
        })
        .await
    }

    /// Whether a holder can pass its lock straight to a local waiter
    /// ([`handoff`](Self::handoff)). The in-memory store wakes its waiters at once anyway.
    pub(crate) fn hands_off(&self) -> bool {
        matches!(self, Self::Redis(_))
    }

    /// Passes a held lock from token `from` to token `to`, with a new ttl and fence. Only on
    /// a store that [`hands_off`](Self::hands_off).
    pub(crate) async fn handoff(
        &self,
        keys: &LockKeys,
        from: &Token,
        to: &Token,
        ttl: Duration,
    ) -> Result<HandoffReply, StoreError> {
        self.bounded(async {
            match self {
                Self::Redis(s) => s.handoff(keys, from, to, ttl).await,
                Self::Memory(_) => Err(StoreError::Protocol {
                    message: "the in-memory store does not hand locks off".to_owned(),
                }),
            }
        })
        .await
    }

    pub(crate) async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<Held>, StoreError> {
        self.bounded(async {
            match self {
                Self::Redis(s) => s.renew(items).await,
                Self::Memory(s) => Ok(s.renew(items)),
            }
        })
        .await
    }

    /// Runs one rate-limit check atomically (one script on Redis).
    pub(crate) async fn rate_limit(&self, req: &RateRequest<'_>) -> Result<RateReply, StoreError> {
        match self {
            Self::Redis(s) => s.rate_limit(req).await,
            Self::Memory(s) => Ok(s.rate_limit(req)),
        }
    }

    pub(crate) fn wakeups(&self) -> &Arc<Wakeups> {
        match self {
            Self::Redis(s) => s.wakeups(),
            Self::Memory(s) => s.wakeups(),
        }
    }

    /// Runs one store operation within [`op_timeout`](Self::op_timeout): every operation is
    /// bounded here, so no caller can forget it.
    async fn bounded<T>(
        &self,
        op: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let limit = self.op_timeout();
        tokio::time::timeout(limit, op)
            .await
            .map_err(|_| StoreError::Timeout { after: limit })?
    }

    /// The deadline for one operation on this store.
    pub(crate) fn op_timeout(&self) -> Duration {
        match self {
            Self::Redis(s) => s.op_timeout(),
            Self::Memory(_) => Duration::from_secs(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_codes_decode_to_grants_and_busy_replies() {
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
