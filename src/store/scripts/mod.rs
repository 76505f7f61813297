//! The Lua scripts, one module per script: each owns its source (the `.lua` file beside it,
//! which opens with its KEYS / ARGV / reply contract), the encoding of its arguments, and the
//! decoding of its reply, so a script's contract lives in one place. The ones that carry many
//! items per call implement [`Calls`]: they write a call for any items of one hash slot and
//! read its reply, and the backend decides how calls travel (one call per batch to a primary;
//! one call per slot, pipelined, to a cluster node; one call per batch to each node of a
//! quorum).
//!
//! Rules every script keeps (DESIGN §1): time only from `redis.call('TIME')`, never from the
//! client (the one exception, the rate-limit script's injected clock, exists only with the
//! `test-util` feature and is a separate script text); only keys passed in KEYS, all of them in
//! one hash slot per item; no unbounded loops.

pub(crate) mod acquire;
pub(crate) mod acquire_all;
pub(crate) mod acquire_path;
pub(crate) mod acquire_permits;
pub(crate) mod acquire_rw;
pub(crate) mod adaptive;
pub(crate) mod bloom;
pub(crate) mod bloom_native;
pub(crate) mod fair;
pub(crate) mod fenced;
pub(crate) mod handoff;
pub(crate) mod idempotency;
pub(crate) mod leader;
mod lua;
pub(crate) mod mint;
pub(crate) mod release;
pub(crate) mod release_entries;
pub(crate) mod release_path;
pub(crate) mod release_writer;
pub(crate) mod renew;
pub(crate) mod unmark;

use std::time::Duration;

use redis::Value;

use redis::Cmd;

pub(crate) use self::lua::{Conn, Lua, Pipe};
use self::release::ReleaseItem;
use super::batch::{Batch, Batcher, batcher};
use crate::error::StoreError;

/// A script that carries many items per call. It writes one call for any of its items (all
/// of one hash slot) and reads that call's reply, so the same items can travel as one call
/// (to a primary) or split into one call per slot, pipelined (to a cluster node).
pub(crate) trait Calls: Clone + Send + Sync + 'static {
    type Item: Send + Sync + 'static;
    type Reply: Send + 'static;
    /// A queue this long is sent at once (see `batch.rs`).
    const FLUSH_AT: usize;

    /// The key whose hash slot every key of `item` shares.
    fn slot_key(item: &Self::Item) -> &str;

    /// The script and the `EVALSHA` command of one call that carries `items`.
    fn encode(&self, items: &[&Self::Item]) -> (&'static Lua, Cmd);

    /// That call's reply: one per item, in order.
    fn decode(&self, reply: Value, items: &[&Self::Item]) -> Result<Vec<Self::Reply>, StoreError>;

    /// What to give back when `reply` reaches nobody (its caller gave up): a grant to release.
    fn undo(&self, item: Self::Item, reply: &Self::Reply) -> Option<ReleaseItem> {
        let _ = (item, reply);
        None
    }
}

/// A [`Calls`] script batched on one connection: each batch is one call (a primary, or a
/// node of a quorum). A grant whose caller is gone is released in the background on the
/// same connection, publishing as `publish` says.
#[derive(Clone)]
pub(crate) struct OnConn<K, C> {
    pub(crate) calls: K,
    pub(crate) conn: C,
    pub(crate) publish: Publish,
}

impl<K: Calls, C: Conn> OnConn<K, C> {
    /// `calls` batched on `conn` (a primary, or a node of a quorum), a grant whose caller is
    /// gone released with a plain publish: the one way both build their batchers.
    pub(crate) fn plain(calls: K, conn: C, timeout: Duration) -> Batcher<Self> {
        batcher(
            Self {
                calls,
                conn,
                publish: Publish::Plain,
            },
            timeout,
        )
    }
}

impl<K: Calls, C: Conn> Batch for OnConn<K, C> {
    type Item = K::Item;
    type Reply = K::Reply;
    const FLUSH_AT: usize = K::FLUSH_AT;

    async fn run(&self, items: &[K::Item]) -> Result<Vec<K::Reply>, StoreError> {
        call(&self.calls, &self.conn, items).await
    }

    fn abandoned(&self, item: K::Item, reply: K::Reply) {
        if let Some(undo) = self.calls.undo(item, &reply) {
            release::in_background(self.conn.clone(), self.publish, undo);
        }
    }
}

/// Runs `items` as one call on `conn` (a primary, or a cluster connection when they share a
/// slot): one reply per item, or one error for all.
pub(crate) async fn call<K: Calls, C: Conn>(
    calls: &K,
    conn: &C,
    items: &[K::Item],
) -> Result<Vec<K::Reply>, StoreError> {
    let refs: Vec<&K::Item> = items.iter().collect();
    let (script, cmd) = calls.encode(&refs);
    let reply: Value = script.invoke(&cmd, conn).await?;
    calls.decode(reply, &refs)
}

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

pub(crate) use crate::digits::decimal;

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
    // One item (the common case): its bare integer, without a list around it first.
    if let (Value::Int(code), 1) = (&reply, items) {
        return Ok(vec![*code]);
    }
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

/// Whose a key was when release or renew asked with a lease's token (per lock), or whether
/// a holder set still had the lease's live entries (`Theirs` never happens there: entries
/// are per token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ownership {
    /// Ours: it held the token (and the operation was applied).
    Ours,
    /// The key is gone: it expired (or was deleted).
    Expired,
    /// Another token holds it.
    Theirs,
}

impl Ownership {
    /// `1`, `0` or `-1`, as `release.lua`, `renew.lua` and `handoff.lua` answer.
    pub(crate) fn from_reply(code: i64) -> Result<Self, StoreError> {
        match code {
            1 => Ok(Self::Ours),
            0 => Ok(Self::Expired),
            -1 => Ok(Self::Theirs),
            other => Err(StoreError::Protocol {
                message: format!("expected 1, 0 or -1 from a lock script, got {other}"),
            }),
        }
    }
}
