//! `idempotency.lua`: read an idempotency key's record, or store it while the key's claim (a
//! lock) is held (contract in the `.lua` header). The in-memory store answers the same calls.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Value;

use super::{Conn, Lua, millis};
use crate::error::StoreError;
use crate::token::Token;

pub(crate) static SCRIPT: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("idempotency.lua")));

/// Why a store refuses idempotency records: a Redlock quorum has no single store to keep them.
pub(crate) const UNSUPPORTED: &str = "idempotency records need one store that keeps them: \
    connect a single primary (Client::connect, or Client::connect_sentinel) or a Cluster \
    (Client::connect_cluster); a Redlock quorum's independent primaries would each keep a \
    different record";

/// One call on an idempotency key's record.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RecordCall<'a> {
    /// Read the record.
    Get { record: &'a str },
    /// The record if there is one; else, if `token` holds the lock `lock` (same hash tag),
    /// write `marker` (if any) with `ttl`.
    Start {
        record: &'a str,
        lock: &'a str,
        token: &'a Token,
        ttl: Duration,
        marker: Option<&'a [u8]>,
    },
    /// Store `value` with `ttl` if `token` holds the lock `lock` (same hash tag).
    Store {
        record: &'a str,
        lock: &'a str,
        token: &'a Token,
        ttl: Duration,
        value: &'a [u8],
    },
    /// Delete the record if `token` holds the lock `lock` (same hash tag).
    Discard {
        record: &'a str,
        lock: &'a str,
        token: &'a Token,
    },
}

/// What a backend answers to a [`RecordCall`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RecordReply {
    /// The record, if there is one (a read; a start that found one).
    Record(Option<Vec<u8>>),
    /// Whether the claim was held, so that the write was made (a start that found no
    /// record, a store, a discard).
    Stored(bool),
}

pub(crate) async fn run<C: Conn>(
    conn: &C,
    call: &RecordCall<'_>,
) -> Result<RecordReply, StoreError> {
    match *call {
        RecordCall::Get { record } => {
            let mut cmd = SCRIPT.call(1, 1, record.len() + 8);
            cmd.arg(record).arg("g");
            let reply: Value = SCRIPT.invoke(&cmd, conn).await?;
            match reply {
                Value::Nil => Ok(RecordReply::Record(None)),
                Value::BulkString(bytes) => Ok(RecordReply::Record(Some(bytes))),
                other => Err(StoreError::Protocol {
                    message: format!("idempotency.lua answered {other:?} to a read"),
                }),
            }
        }
        RecordCall::Start {
            record,
            lock,
            token,
            ttl,
            marker,
        } => {
            let marker = marker.unwrap_or_default();
            let mut cmd = SCRIPT.call(2, 4, record.len() + lock.len() + marker.len() + 64);
            cmd.arg(record)
                .arg(lock)
                .arg("b")
                .arg(token.as_str())
                .arg(millis(ttl).max(1))
                .arg(marker);
            let reply: Value = SCRIPT.invoke(&cmd, conn).await?;
            match reply {
                Value::BulkString(bytes) => Ok(RecordReply::Record(Some(bytes))),
                other => held(other, "start"),
            }
        }
        RecordCall::Discard {
            record,
            lock,
            token,
        } => {
            let mut cmd = SCRIPT.call(2, 2, record.len() + lock.len() + 48);
            cmd.arg(record).arg(lock).arg("d").arg(token.as_str());
            held(SCRIPT.invoke(&cmd, conn).await?, "discard")
        }
        RecordCall::Store {
            record,
            lock,
            token,
            ttl,
            value,
        } => {
            let mut cmd = SCRIPT.call(2, 4, record.len() + lock.len() + value.len() + 64);
            cmd.arg(record)
                .arg(lock)
                .arg("s")
                .arg(token.as_str())
                .arg(millis(ttl).max(1))
                .arg(value);
            held(SCRIPT.invoke(&cmd, conn).await?, "store")
        }
    }
}

/// The reply of a write made only under the claim: whether the claim was held.
fn held(reply: Value, what: &str) -> Result<RecordReply, StoreError> {
    match reply {
        Value::Int(1) => Ok(RecordReply::Stored(true)),
        Value::Int(0) => Ok(RecordReply::Stored(false)),
        other => Err(StoreError::Protocol {
            message: format!("idempotency.lua answered {other:?} to a {what}"),
        }),
    }
}
