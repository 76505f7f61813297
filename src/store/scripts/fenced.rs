//! `fenced.lua`: a fenced write to one resource (refused when its fence is lower than the
//! highest one the resource accepted), or a read of it (contract in the `.lua` header). The
//! calls and replies here are the backend seam's: the in-memory store answers the same ones
//! (`memory/fenced.rs`).

use std::sync::LazyLock;
use std::time::Duration;

use redis::Value;

use super::{Conn, Lua, millis};
use crate::error::StoreError;
use crate::keys::FencedKeys;

pub(crate) static SCRIPT: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("fenced.lua")));

/// Why a store refuses fenced writes: a Redlock quorum has no single store to write to.
pub(crate) const UNSUPPORTED: &str = "fenced writes need one store that holds the resource (a \
    Redlock quorum's independent primaries would each keep a different last fence): keep the \
    quorum for locks and build its client with ClientBuilder::counting_on(<a client of a \
    single primary or a Cluster>) (`counting_on` in a configuration file's [client]), or \
    connect a single primary (Client::connect, or Client::connect_sentinel) or a Cluster \
    (Client::connect_cluster)";

/// One call on a fenced resource.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FencedCall<'a> {
    Write(&'a FencedWrite),
    Read(&'a FencedRead),
}

/// What a backend answers to a [`FencedCall`]: the reply of its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FencedReply {
    Write(WriteReply),
    Read(ReadReply),
}

/// A write: its conditions, then its changes, all or nothing, under `fence`.
#[derive(Debug, Clone)]
pub(crate) struct FencedWrite {
    pub(crate) keys: FencedKeys,
    pub(crate) fence: u64,
    /// The resource's ttl after the write; `None`: no expiry.
    pub(crate) ttl: Option<Duration>,
    pub(crate) conditions: Vec<Condition>,
    pub(crate) changes: Vec<Change>,
}

/// A condition on the values before a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Condition {
    /// The key has no value.
    Absent(String),
    /// The key holds this value.
    Holds(String, Vec<u8>),
}

/// One change a write makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    Set(String, Vec<u8>),
    Delete(String),
    /// Deletes every value (the guard stays).
    Clear,
}

/// How a write went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteReply {
    /// The fence was recorded and every change applied.
    Accepted,
    /// The resource had accepted `last`, a higher fence: nothing changed.
    Stale { last: u64 },
    /// Condition `index` (0-based) did not hold: nothing changed.
    Unmet { index: usize },
}

/// A read: the listed keys, or every value.
#[derive(Debug, Clone)]
pub(crate) struct FencedRead {
    pub(crate) keys: FencedKeys,
    /// `None`: every value.
    pub(crate) fields: Option<Vec<String>>,
}

/// What a read found: the highest fence accepted, and the values asked for that exist (by
/// key, in the order asked for; every value in key order for a read of all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadReply {
    pub(crate) last: Option<u64>,
    pub(crate) values: Vec<(String, Vec<u8>)>,
}

/// Runs `call` on one connection target (the resource's slot on a cluster).
pub(crate) async fn run<C: Conn>(
    conn: &C,
    call: &FencedCall<'_>,
) -> Result<FencedReply, StoreError> {
    match call {
        FencedCall::Write(write) => run_write(conn, write).await.map(FencedReply::Write),
        FencedCall::Read(read) => run_read(conn, read).await.map(FencedReply::Read),
    }
}

async fn run_write<C: Conn>(conn: &C, write: &FencedWrite) -> Result<WriteReply, StoreError> {
    let args = 4 + 3 * (write.conditions.len() + write.changes.len());
    let bytes = write
        .changes
        .iter()
        .map(|change| match change {
            Change::Set(key, value) => key.len() + value.len(),
            Change::Delete(key) => key.len(),
            Change::Clear => 0,
        })
        .sum::<usize>()
        + 64 * args;
    let mut cmd = SCRIPT.call(2, args, bytes);
    cmd.arg(&write.keys.guard).arg(&write.keys.values);
    cmd.arg("w")
        .arg(write.fence.to_string())
        .arg(write.ttl.map_or(0, millis))
        .arg(write.conditions.len());
    for condition in &write.conditions {
        match condition {
            Condition::Absent(key) => cmd.arg("a").arg(key).arg(""),
            Condition::Holds(key, value) => cmd.arg("e").arg(key).arg(value.as_slice()),
        };
    }
    for change in &write.changes {
        match change {
            Change::Set(key, value) => cmd.arg("s").arg(key).arg(value.as_slice()),
            Change::Delete(key) => cmd.arg("d").arg(key).arg(""),
            Change::Clear => cmd.arg("c").arg("").arg(""),
        };
    }
    let reply: Value = SCRIPT.invoke(&cmd, conn).await?;
    write_reply(reply, write.conditions.len())
}

/// Reads `{1}`, `{0, last}` or `{-1, i}`.
fn write_reply(reply: Value, conditions: usize) -> Result<WriteReply, StoreError> {
    let bad = |what: &dyn std::fmt::Debug| StoreError::Protocol {
        message: format!("fenced.lua answered {what:?} to a write"),
    };
    let Value::Array(items) = reply else {
        return Err(bad(&reply));
    };
    match items.as_slice() {
        [Value::Int(1)] => Ok(WriteReply::Accepted),
        [Value::Int(0), last] => Ok(WriteReply::Stale {
            last: fence_of(last)?.ok_or_else(|| bad(&items))?,
        }),
        [Value::Int(-1), Value::Int(i)] => match usize::try_from(*i) {
            Ok(i) if (1..=conditions).contains(&i) => Ok(WriteReply::Unmet { index: i - 1 }),
            _ => Err(bad(&items)),
        },
        _ => Err(bad(&items)),
    }
}

async fn run_read<C: Conn>(conn: &C, read: &FencedRead) -> Result<ReadReply, StoreError> {
    let fields = read.fields.as_deref();
    let args = 1 + fields.map_or(0, <[String]>::len);
    let mut cmd = SCRIPT.call(2, args, 64 * args);
    cmd.arg(&read.keys.guard).arg(&read.keys.values);
    match fields {
        None => {
            cmd.arg("a");
        }
        Some(fields) => {
            cmd.arg("r");
            for field in fields {
                cmd.arg(field);
            }
        }
    }
    let reply: Value = SCRIPT.invoke(&cmd, conn).await?;
    read_reply(reply, fields)
}

/// Reads `{last, values}`.
fn read_reply(reply: Value, fields: Option<&[String]>) -> Result<ReadReply, StoreError> {
    let bad = |what: &dyn std::fmt::Debug| StoreError::Protocol {
        message: format!("fenced.lua answered {what:?} to a read"),
    };
    let Value::Array(items) = reply else {
        return Err(bad(&reply));
    };
    let [last, values] = items.as_slice() else {
        return Err(bad(&items));
    };
    let last = fence_of(last)?;
    let values = match values {
        Value::Array(values) => values,
        // RESP3 answers HGETALL with a map.
        Value::Map(pairs) => {
            let mut out = Vec::with_capacity(pairs.len());
            for (key, value) in pairs {
                out.push((text_of(key)?, bytes_of(value)?.ok_or_else(|| bad(value))?));
            }
            out.sort_by(|a, b| a.0.cmp(&b.0));
            return Ok(ReadReply { last, values: out });
        }
        other => return Err(bad(other)),
    };
    let mut out = Vec::with_capacity(values.len());
    match fields {
        Some(fields) => {
            if values.len() != fields.len() {
                return Err(bad(&items));
            }
            for (field, value) in fields.iter().zip(values) {
                if let Some(value) = bytes_of(value)? {
                    out.push((field.clone(), value));
                }
            }
        }
        None => {
            if values.len() % 2 != 0 {
                return Err(bad(&items));
            }
            for pair in values.chunks_exact(2) {
                let value = bytes_of(&pair[1])?.ok_or_else(|| bad(&pair[1]))?;
                out.push((text_of(&pair[0])?, value));
            }
            out.sort_by(|a, b| a.0.cmp(&b.0));
        }
    }
    Ok(ReadReply { last, values: out })
}

/// A guard's text as a fence; `None` for `''` (no guard).
fn fence_of(value: &Value) -> Result<Option<u64>, StoreError> {
    let text = bytes_of(value)?.unwrap_or_default();
    if text.is_empty() {
        return Ok(None);
    }
    std::str::from_utf8(&text)
        .ok()
        .and_then(|t| t.parse::<u64>().ok())
        .map(Some)
        .ok_or_else(|| StoreError::Protocol {
            message: format!(
                "a fenced resource's guard holds {:?}, not a fence (a key of ours overwritten \
                 by something else?)",
                String::from_utf8_lossy(&text)
            ),
        })
}

/// A value's bytes; `None` for nil.
fn bytes_of(value: &Value) -> Result<Option<Vec<u8>>, StoreError> {
    match value {
        Value::Nil => Ok(None),
        Value::BulkString(bytes) => Ok(Some(bytes.clone())),
        Value::SimpleString(text) => Ok(Some(text.clone().into_bytes())),
        Value::Int(n) => Ok(Some(n.to_string().into_bytes())),
        other => Err(StoreError::Protocol {
            message: format!("fenced.lua answered {other:?} where a value was expected"),
        }),
    }
}

/// A key's text. Keys are written from Rust strings, so they are UTF-8 unless something else
/// wrote to the hash.
fn text_of(value: &Value) -> Result<String, StoreError> {
    let bytes = bytes_of(value)?.unwrap_or_default();
    String::from_utf8(bytes).map_err(|e| StoreError::Protocol {
        message: format!("a fenced resource holds a key that is not UTF-8: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn write_replies_are_read_as_documented() {
        let reply = |items: Vec<Value>| write_reply(Value::Array(items), 2);
        assert_eq!(reply(vec![Value::Int(1)]).ok(), Some(WriteReply::Accepted));
        assert_eq!(
            reply(vec![Value::Int(0), bulk("18446744073709551615")]).ok(),
            Some(WriteReply::Stale { last: u64::MAX })
        );
        assert_eq!(
            reply(vec![Value::Int(-1), Value::Int(2)]).ok(),
            Some(WriteReply::Unmet { index: 1 })
        );
        // A condition that was never sent, a guard that is not a number, anything else.
        assert!(reply(vec![Value::Int(-1), Value::Int(3)]).is_err());
        assert!(reply(vec![Value::Int(0), bulk("x")]).is_err());
        assert!(reply(vec![Value::Int(2)]).is_err());
        assert!(write_reply(Value::Int(1), 0).is_err());
    }

    #[test]
    fn read_replies_keep_present_values_in_order() {
        let fields = ["b".to_owned(), "a".to_owned()];
        let reply = Value::Array(vec![bulk("7"), Value::Array(vec![Value::Nil, bulk("1")])]);
        assert_eq!(
            read_reply(reply, Some(&fields)).ok(),
            Some(ReadReply {
                last: Some(7),
                values: vec![("a".to_owned(), b"1".to_vec())],
            })
        );
        let all = Value::Array(vec![
            bulk(""),
            Value::Array(vec![bulk("z"), bulk("2"), bulk("a"), bulk("1")]),
        ]);
        assert_eq!(
            read_reply(all, None).ok(),
            Some(ReadReply {
                last: None,
                values: vec![
                    ("a".to_owned(), b"1".to_vec()),
                    ("z".to_owned(), b"2".to_vec())
                ],
            })
        );
    }
}
