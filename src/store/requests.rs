//! The requests of the store operations that take more than a key and a token, one struct per
//! operation: the [`Backend`](super::Backend) seam, every backend and the script wrapper take
//! the request whole, so an operation's parameters are written here once.

use std::time::Duration;

use super::scripts::Replicas;
pub(crate) use super::scripts::bloom::BloomCall;
use crate::keys::{LockKeys, PathKeys, RwKeys, SetKeys};
use crate::mode::HierarchyMode;
use crate::token::Token;

/// Takes the lock of `keys` for `token` (`acquire.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Acquire<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) token: &'a Token,
    pub(crate) ttl: Duration,
    pub(crate) waits: Waits,
    /// Replica acknowledgement the grant needs, if any.
    pub(crate) replicas: Option<Replicas>,
    /// Mint the grant's fence with it (an eager lease); else the lease mints it when asked.
    pub(crate) mint: bool,
}

/// Takes the locks of one group of a multi-lock, each with its token, all or nothing
/// (`acquire_all.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AcquireAll<'a> {
    pub(crate) keys: &'a [&'a LockKeys],
    pub(crate) tokens: &'a [Token],
    pub(crate) ttl: Duration,
    pub(crate) waits: Waits,
}

/// Takes one hold of `side` on the read-write lock of `keys` (`acquire_read.lua`,
/// `acquire_write.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RwAcquire<'a> {
    pub(crate) side: Side,
    pub(crate) keys: &'a RwKeys,
    pub(crate) token: &'a Token,
    pub(crate) ttl: Duration,
    pub(crate) waits: Waits,
}

/// Takes a hierarchical lock's path in `mode` (intention modes above, `mode` on the last
/// level), all levels or none (`acquire_path.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PathAcquire<'a> {
    pub(crate) keys: &'a PathKeys,
    pub(crate) mode: HierarchyMode,
    pub(crate) token: &'a Token,
    /// The same across one waiter's attempts (its intent marks are its own).
    pub(crate) waiter: &'a str,
    pub(crate) ttl: Duration,
    pub(crate) waits: Waits,
}

/// Gives back `count` entries of `token` in the holder set of `keys`, waking its waiters
/// (`release_entries.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EntriesRelease<'a> {
    pub(crate) keys: &'a SetKeys,
    pub(crate) token: &'a Token,
    pub(crate) count: u32,
}

/// Gives back every level's entry of `token`'s lease on a hierarchical lock's path taken in
/// `mode`, waking the hierarchy's waiters (`release_path.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PathRelease<'a> {
    pub(crate) keys: &'a PathKeys,
    pub(crate) mode: HierarchyMode,
    pub(crate) token: &'a Token,
}

/// Passes the lock of `keys` from token `from` to a local waiter's `to`, with `ttl`, minting
/// the new lease's fence if `mint` (`handoff.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handoff<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) from: &'a Token,
    pub(crate) to: &'a Token,
    pub(crate) ttl: Duration,
    pub(crate) mint: bool,
}

/// An election's keys: its lock's, and its leader record's beside it (`leader.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaderKeys<'a> {
    pub(crate) lock: &'a LockKeys,
    pub(crate) record_key: &'a str,
}

/// Writes an election's leader `record` with `ttl`, if `token` holds its lock (`leader.lua`
/// `put`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaderPut<'a> {
    pub(crate) keys: LeaderKeys<'a>,
    pub(crate) token: &'a Token,
    pub(crate) record: &'a Record,
    pub(crate) ttl: Duration,
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

/// Which side of a read-write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// A reader: many at once, none while a writer holds or waits.
    Read,
    /// The writer: alone.
    Write,
}

/// A leader as its record names it: the term (the lease's fence) and the identity.
pub(crate) type Record = (u64, String);
