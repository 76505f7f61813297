//! The Lua scripts, one module per script: each owns its source (the `.lua` file beside it,
//! which opens with its KEYS / ARGV / reply contract), the encoding of its arguments, and the
//! decoding of its reply, so a script's contract lives in one place. The batched ones also
//! provide their [`Batch`](super::batch::Batch) operation, over any [`Conn`]ection, so the
//! single primary and the cluster send the very same calls (the cluster one slot at a time).
//!
//! Rules every script keeps (DESIGN §1): time only from `redis.call('TIME')`, never from the
//! client (the one exception, the rate-limit script's injected clock, exists only with the
//! `test-util` feature and is a separate script text); only keys passed in KEYS, all of them in
//! one hash slot per item; no unbounded loops.

pub(crate) mod acquire;
pub(crate) mod acquire_all;
pub(crate) mod acquire_permits;
pub(crate) mod acquire_rw;
pub(crate) mod bloom;
pub(crate) mod bloom_native;
pub(crate) mod handoff;
mod lua;
pub(crate) mod release;
pub(crate) mod release_entries;
pub(crate) mod release_writer;
pub(crate) mod renew;
pub(crate) mod unmark;

use std::time::Duration;

use redis::Value;

pub(crate) use self::lua::{Conn, Lua};
use crate::error::StoreError;

/// How a script publishes a release wake-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Publish {
    /// `PUBLISH` (a single primary).
    Plain,
    /// `SPUBLISH`: sharded pub/sub on the channel's slot (a cluster, Redis 7).
    Sharded,
}

/// The script text's prelude that tells it how to publish.
macro_rules! publish_prelude {
    (Plain) => {
        "local PUBLISH = 'PUBLISH'\n"
    };
    (Sharded) => {
        "local PUBLISH = 'SPUBLISH'\n"
    };
}
pub(crate) use publish_prelude;

/// Replica acknowledgement: after a write, `WAIT count timeout` on the same connection, and
/// the write counts only if at least `count` replicas acknowledged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replicas {
    pub(crate) count: u32,
    pub(crate) timeout: Duration,
}

impl Replicas {
    /// The strongest of several requirements (a batch waits once, for all its items).
    pub(crate) fn strongest(all: impl Iterator<Item = Option<Self>>) -> Option<Self> {
        all.flatten().reduce(|a, b| Self {
            count: a.count.max(b.count),
            timeout: a.timeout.max(b.timeout),
        })
    }
}

/// Milliseconds for Redis, at least 1.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The per-item replies of a many-item script: an array, or the bare reply when one item was
/// sent (a bare value is cheaper to parse than an array of one).
pub(crate) fn per_item(reply: Value, items: usize, script: &str) -> Result<Vec<Value>, StoreError> {
    let replies = match reply {
        Value::Array(replies) => replies,
        reply => vec![reply],
    };
    if replies.len() != items {
        return Err(StoreError::Protocol {
            message: format!("{script} answered {} items for {items}", replies.len()),
        });
    }
    Ok(replies)
}

/// The per-item integers of a many-item script.
pub(crate) fn codes(reply: Value, items: usize, script: &str) -> Result<Vec<i64>, StoreError> {
    per_item(reply, items, script)?
        .into_iter()
        .map(|v| match v {
            Value::Int(code) => Ok(code),
            other => Err(StoreError::Protocol {
                message: format!("{script} answered {other:?} where an integer was expected"),
            }),
        })
        .collect()
}

/// Whether a key held the expected token (the reply of release and renew, per lock), or a
/// holder set the lease's live entries (`Other` never happens there: entries are per token).
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
    /// `1`, `0` or `-1`, as `release.lua`, `renew.lua` and `handoff.lua` answer.
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
