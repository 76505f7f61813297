//! Bloom filter shards in memory, with the semantics of `bloom.lua`: a shard is its
//! configuration, its bits and an optional expiry, created whole; the module (`BF.*`) is not
//! there, so a native call is refused.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::StoreError;
use crate::store::requests::BloomCall;
use crate::store::scripts::bloom::{BloomOp, BloomShape, ShardReply};

#[derive(Default)]
pub(crate) struct Blooms {
    shards: Mutex<HashMap<String, Shard>>,
}

struct Shard {
    header: String,
    words: Vec<u64>,
    expires_at: Option<Instant>,
}

impl Shard {
    fn new(shape: &BloomShape, now: Instant) -> Self {
        let words = usize::try_from(shape.bits.div_ceil(64)).unwrap_or(usize::MAX);
        Self {
            header: shape.header.clone(),
            words: vec![0; words],
            expires_at: (shape.ttl_ms > 0).then(|| now + Duration::from_millis(shape.ttl_ms)),
        }
    }

    /// Sets a bit; answers whether it was 0.
    fn set(&mut self, bit: u64) -> bool {
        let (word, mask) = locate(bit);
        match self.words.get_mut(word) {
            Some(w) => {
                let was_zero = *w & mask == 0;
                *w |= mask;
                was_zero
            }
            None => false,
        }
    }

    fn get(&self, bit: u64) -> bool {
        let (word, mask) = locate(bit);
        self.words.get(word).is_some_and(|w| w & mask != 0)
    }
}

fn locate(bit: u64) -> (usize, u64) {
    (
        usize::try_from(bit / 64).unwrap_or(usize::MAX),
        1 << (bit % 64),
    )
}

impl Blooms {
    /// Remaining ttl of a live shard (`Some(None)`: no ttl), for tests.
    #[cfg(feature = "test-util")]
    pub(crate) fn pttl(&self, key: &str) -> Option<Option<Duration>> {
        let shards = self.shards.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let shard = shards.get(key)?;
        match shard.expires_at {
            None => Some(None),
            Some(e) if e > now => Some(Some(e - now)),
            Some(_) => None,
        }
    }

    pub(crate) fn run(&self, call: &BloomCall<'_>) -> Result<Vec<ShardReply>, StoreError> {
        let (op, shape, calls) = (call.op, call.shape, call.shards);
        if call.native {
            return Err(StoreError::Config {
                message: "the in-memory store has no RedisBloom module".to_owned(),
            });
        }
        let mut shards = self.shards.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        shards.retain(|_, s| s.expires_at.is_none_or(|e| e > now));
        let k = usize::try_from(shape.hashes.max(1)).unwrap_or(1);
        let replies = calls
            .iter()
            .map(|call| {
                let existing = shards.get(&call.key);
                if let Some(s) = existing
                    && s.header != shape.header
                {
                    return ShardReply::Mismatch(s.header.trim_end().to_owned());
                }
                match op {
                    BloomOp::Open | BloomOp::Clear => {
                        let created = existing.is_none() || op == BloomOp::Clear;
                        if created {
                            shards.insert(call.key.clone(), Shard::new(shape, now));
                        }
                        ShardReply::Opened { created }
                    }
                    BloomOp::Count => match existing {
                        None => ShardReply::Missing,
                        Some(s) => ShardReply::Count(
                            s.words.iter().map(|w| u64::from(w.count_ones())).sum(),
                        ),
                    },
                    BloomOp::Add => match shards.get_mut(&call.key) {
                        None => ShardReply::Missing,
                        Some(s) => ShardReply::Items(
                            call.positions
                                .chunks(k)
                                .map(|item| item.iter().fold(false, |new, &p| s.set(p) | new))
                                .collect(),
                        ),
                    },
                    BloomOp::Contains => match existing {
                        None => ShardReply::Missing,
                        Some(s) => ShardReply::Items(
                            call.positions
                                .chunks(k)
                                .map(|item| item.iter().all(|&p| s.get(p)))
                                .collect(),
                        ),
                    },
                }
            })
            .collect();
        Ok(replies)
    }
}
