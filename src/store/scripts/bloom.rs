//! `bloom.lua`: one operation on Bloom filter shards kept in Redis bitmaps (contract in the
//! `.lua` header); the types here are shared with `bloom_native.rs`, the RedisBloom twin.

use std::sync::LazyLock;

use redis::Value;

use super::{Conn, Lua};
use crate::error::StoreError;

pub(crate) static SCRIPT: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("bloom.lua")));

/// Bytes of configuration in front of a bitmap shard's bits.
pub(crate) const HEADER_LEN: usize = 128;

/// What one call does to its shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BloomOp {
    /// Create the shards that are missing, check the others' configuration.
    Open,
    /// Empty the shards (delete and create them again).
    Clear,
    Add,
    Contains,
    /// Bits set (bitmaps) or items added (the module).
    Count,
}

impl BloomOp {
    fn word(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Clear => "clear",
            Self::Add => "add",
            Self::Contains => "contains",
            Self::Count => "count",
        }
    }

    fn has_items(self) -> bool {
        matches!(self, Self::Add | Self::Contains)
    }
}

/// A filter's shape as every shard call needs it.
#[derive(Debug, Clone)]
pub(crate) struct BloomShape {
    /// The configuration text: exactly [`HEADER_LEN`] bytes for bitmaps.
    pub(crate) header: String,
    /// 0: no ttl.
    pub(crate) ttl_ms: u64,
    /// Bits per shard (bitmaps).
    pub(crate) bits: u64,
    /// Positions per item (bitmaps).
    pub(crate) hashes: u32,
    /// Items per shard (the module's capacity).
    pub(crate) capacity: u64,
    /// The module's error rate, as text.
    pub(crate) error_rate: String,
}

/// One shard's part of a call.
#[derive(Debug, Clone, Default)]
pub(crate) struct ShardCall {
    /// The shard's key (the module's filter).
    pub(crate) key: String,
    /// The module's configuration key (unused for bitmaps).
    pub(crate) config_key: String,
    /// Bitmaps: `hashes` positions per item, flattened.
    pub(crate) positions: Vec<u64>,
    /// The module: the items themselves.
    pub(crate) items: Vec<Vec<u8>>,
}

impl ShardCall {
    /// Items in this shard's part.
    pub(crate) fn len(&self, shape: &BloomShape) -> usize {
        if self.items.is_empty() {
            self.positions.len() / usize::try_from(shape.hashes.max(1)).unwrap_or(1)
        } else {
            self.items.len()
        }
    }
}

/// One Bloom filter operation on `shards`, kept in bitmaps (`bloom.lua`) or, when `native`,
/// by the RedisBloom module (`bloom_native.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BloomCall<'a> {
    pub(crate) native: bool,
    pub(crate) op: BloomOp,
    pub(crate) shape: &'a BloomShape,
    pub(crate) shards: &'a [ShardCall],
}

/// One shard's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ShardReply {
    /// The shard does not exist (expired, deleted): nothing was changed.
    Missing,
    /// The shard was made with another configuration, this one.
    Mismatch(String),
    /// open / clear: whether it was created.
    Opened { created: bool },
    /// add: new per item; contains: maybe present per item.
    Items(Vec<bool>),
    /// count: bits set, or items added.
    Count(u64),
}

/// Runs one call over its shards (all in one slot on a cluster): on bitmaps (`bloom.lua`), or,
/// when `native`, on the RedisBloom module (`bloom_native.lua`).
pub(crate) async fn run<C: Conn>(
    conn: &C,
    call: &BloomCall<'_>,
) -> Result<Vec<ShardReply>, StoreError> {
    let BloomCall {
        native,
        op,
        shape,
        shards,
    } = *call;
    let script: &Lua = if native {
        &super::bloom_native::SCRIPT
    } else {
        &SCRIPT
    };
    let keys = if native {
        2 * shards.len()
    } else {
        shards.len()
    };
    let args: usize = shards
        .iter()
        .map(|s| 1 + s.positions.len() + s.items.len())
        .sum();
    let mut cmd = script.call(keys, 6 + args, 64 * keys + 16 * args);
    for shard in shards {
        cmd.arg(&shard.key);
        if native {
            cmd.arg(&shard.config_key);
        }
    }
    cmd.arg(op.word()).arg(&shape.header).arg(shape.ttl_ms);
    if native {
        cmd.arg(shape.capacity).arg(&shape.error_rate);
    } else {
        cmd.arg(shape.bits).arg(shape.hashes);
    }
    if op.has_items() {
        for shard in shards {
            cmd.arg(shard.len(shape));
            if native {
                for item in &shard.items {
                    cmd.arg(item.as_slice());
                }
            } else {
                for p in &shard.positions {
                    cmd.arg(*p);
                }
            }
        }
    }
    let reply: Value = script.invoke(&cmd, conn).await?;
    let Value::Array(texts) = reply else {
        return Err(protocol(format!("bloom answered {reply:?}")));
    };
    if texts.len() != shards.len() {
        return Err(protocol(format!(
            "bloom answered {} shards for {}",
            texts.len(),
            shards.len()
        )));
    }
    texts
        .iter()
        .zip(shards)
        .map(|(text, shard)| parse(op, text, shard.len(shape)))
        .collect()
}

fn protocol(message: String) -> StoreError {
    StoreError::Protocol { message }
}

/// One shard's text.
pub(crate) fn parse(op: BloomOp, text: &Value, items: usize) -> Result<ShardReply, StoreError> {
    let bytes = match text {
        Value::BulkString(bytes) => bytes.as_slice(),
        Value::SimpleString(s) => s.as_bytes(),
        Value::Okay => b"OK",
        other => return Err(protocol(format!("bloom answered {other:?} for a shard"))),
    };
    match bytes {
        b"M" => return Ok(ShardReply::Missing),
        [b'X', stored @ ..] => {
            return Ok(ShardReply::Mismatch(
                String::from_utf8_lossy(stored).trim_end().to_owned(),
            ));
        }
        _ => {}
    }
    let bad = || {
        protocol(format!(
            "bloom answered {text:?} to {op:?} of {items} items"
        ))
    };
    match op {
        BloomOp::Open | BloomOp::Clear => match bytes {
            b"C" => Ok(ShardReply::Opened { created: true }),
            b"E" => Ok(ShardReply::Opened { created: false }),
            _ => Err(bad()),
        },
        BloomOp::Count => std::str::from_utf8(bytes)
            .ok()
            .and_then(|n| n.parse().ok())
            .map(ShardReply::Count)
            .ok_or_else(bad),
        BloomOp::Add | BloomOp::Contains => {
            if bytes.len() != items || !bytes.iter().all(|b| matches!(b, b'0' | b'1')) {
                return Err(bad());
            }
            Ok(ShardReply::Items(
                bytes.iter().map(|b| *b == b'1').collect(),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn shard_replies_parse() {
        let ok = |op, t: &str, n| parse(op, &text(t), n).expect("valid");
        assert_eq!(ok(BloomOp::Add, "M", 2), ShardReply::Missing);
        assert_eq!(
            ok(BloomOp::Open, "Xdistlock-bloom v1   ", 0),
            ShardReply::Mismatch("distlock-bloom v1".to_owned())
        );
        assert_eq!(
            ok(BloomOp::Contains, "101", 3),
            ShardReply::Items(vec![true, false, true])
        );
        assert_eq!(ok(BloomOp::Count, "42", 0), ShardReply::Count(42));
        assert!(parse(BloomOp::Contains, &text("10"), 3).is_err());
        assert!(parse(BloomOp::Contains, &text("1x1"), 3).is_err());
        assert!(parse(BloomOp::Open, &text("Q"), 0).is_err());
    }
}
