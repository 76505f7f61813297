//! Bloom filters on the store: "have I seen this before?" for millions of items in a few bits
//! each, shared by every replica. A filter answers *certainly absent* or *probably present*,
//! with a false-positive rate set when it is made; items cannot be removed.
//!
//! The classic use is a guard against cache penetration: requests for keys that exist nowhere
//! go past the cache to the database every time; a filter of the keys that do exist turns them
//! away first.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = distlock::Client::in_memory(); // or Client::connect("redis://...").await?
//! let products = client
//!     .bloom_filter("product-ids")
//!     .expected_items(100_000)
//!     .false_positive_rate(0.01)
//!     .open()
//!     .await?;
//! products.add_many(["sku-1", "sku-2", "sku-3"]).await?;
//!
//! // Before the cache and the database: an id the filter has never seen does not exist.
//! async fn load(filter: &distlock::bloom::BloomFilter, id: &str) -> Result<Option<String>, Box<dyn std::error::Error>> {
//!     if !filter.contains(id).await? {
//!         return Ok(None); // certainly absent: no cache miss, no query
//!     }
//!     Ok(Some(format!("row for {id}"))) // probably present: cache, then database
//! }
//! assert!(load(&products, "sku-2").await?.is_some());
//! assert!(load(&products, "sku-404").await?.is_none());
//! # Ok(()) }
//! ```
//!
//! # How it is kept
//!
//! * **Sized from `n` and `p`**: `m = ⌈−n·ln p / (ln 2)²⌉` bits and `k = round(m/n · ln 2)`
//!   hash positions per item. At `n` items the false-positive rate is about `p`; past `n` it
//!   rises (a bitmap filter does not grow; the RedisBloom module's does).
//! * **On Redis bitmaps** by default: each shard is one string key, a 128-byte header with the
//!   filter's configuration, then its bits. The client hashes each item (xxh3-128, double
//!   hashing) and sends its bit positions; one script per operation sets or reads every
//!   position of every item of the call, so an item costs one round trip with all its
//!   positions, and `add_many` / `contains_many` send many items per call.
//! * **Sharded** past [`MAX_SHARD_BITS`] (16 MiB): an item belongs to one shard (by a second
//!   hash), each shard has its own hash tag, so on a Redis Cluster a large filter spreads over
//!   slots and nodes; shards of one call in different slots are asked at once.
//! * **Configuration checked on open**: every shard holds the configuration it was made with,
//!   and every operation checks it, so two services that open one name with different sizes
//!   get [`BloomError::ConfigMismatch`] instead of silently sharing a misread filter.
//! * **A ttl shared by every key**: with [`ttl`](BloomBuilder::ttl), all shards are created in
//!   one step with the same ttl (on a cluster, one step per slot, at once), so the filter
//!   expires whole; an `add` that finds it expired opens it again, as new.
//! * **The RedisBloom module** (`BF.*` commands), when the server has it, is used instead
//!   ([`BloomStorage::Auto`], the default), with the same configuration check and ttl; a
//!   filter that already exists in one form keeps that form.
//!   [`storage`](BloomFilter::storage) says which one a filter uses.
//!
//! A Redlock quorum client refuses Bloom filters ([`BloomError::UnsupportedStore`], when the
//! filter is opened): its independent primaries would each hold a different filter. A quorum
//! client made with [`ClientBuilder::counting_on`](crate::ClientBuilder::counting_on) keeps
//! its filters on the store it counts on.

mod hash;
mod sizing;

use std::time::Duration;

use self::sizing::Sizing;
pub use self::sizing::{MAX_BITS, MAX_SHARD_BITS};
use crate::core::Core;
use crate::error::{BloomError, StoreError};
use crate::keys::bloom_key;
use crate::store::{
    BloomCall, BloomOp, BloomShape, Capability, HEADER_LEN, ShardCall, ShardReply, Store,
};

/// The most items one call of `add_many` or `contains_many` sends to the store; larger lists
/// go in several calls, one after another, so no script runs long on the server.
pub const MAX_ITEMS_PER_CALL: usize = 1000;
/// The longest ttl a filter accepts (366 days).
pub const MAX_TTL: Duration = Duration::from_secs(366 * 24 * 3600);

/// Where a filter's bits live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum BloomStorage {
    /// The filter's existing form if it exists; otherwise the RedisBloom module when the
    /// server has it, else bitmaps. The default.
    #[default]
    Auto,
    /// Redis bitmaps, through this library's scripts (any Redis, and the in-memory store).
    Bitmaps,
    /// The RedisBloom module's filters (`BF.RESERVE`, `BF.MADD`, `BF.MEXISTS`, `BF.CARD`);
    /// opening fails with [`BloomError::ModuleMissing`] on a server without it.
    RedisBloom,
}

/// Opens (creating if needed) a [`BloomFilter`]; from [`Client::bloom_filter`](crate::Client::bloom_filter).
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `open` is awaited"]
pub struct BloomBuilder {
    client: Core,
    name: String,
    expected_items: Option<u64>,
    false_positive_rate: f64,
    ttl: Option<Duration>,
    storage: BloomStorage,
    shard_bits: u64,
}

impl BloomBuilder {
    /// A builder for the filter `name` on `client`'s store, with the defaults.
    pub(crate) fn new(client: Core, name: String) -> Self {
        Self {
            client,
            name,
            expected_items: None,
            false_positive_rate: 0.01,
            ttl: None,
            storage: BloomStorage::Auto,
            shard_bits: MAX_SHARD_BITS,
        }
    }
}

impl BloomBuilder {
    /// How many items the filter is sized for (required): 1 to 2^40.
    pub fn expected_items(mut self, n: u64) -> Self {
        self.expected_items = Some(n);
        self
    }

    /// The false-positive rate at `expected_items` (default 0.01): above 0 and at most 0.5,
    /// at least 1e-12.
    pub fn false_positive_rate(mut self, p: f64) -> Self {
        self.false_positive_rate = p;
        self
    }

    /// Expire the filter (every key of it) `ttl` after it is created: 1 ms to [`MAX_TTL`].
    /// Default: never.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Where the bits live (default [`BloomStorage::Auto`]).
    pub fn storage(mut self, storage: BloomStorage) -> Self {
        self.storage = storage;
        self
    }

    /// Test hook (`test-util`): shards of at most `bits` bits, to shard small filters.
    #[cfg(feature = "test-util")]
    #[doc(hidden)]
    pub fn __shard_bits(mut self, bits: u64) -> Self {
        self.shard_bits = bits.max(64);
        self
    }

    /// Validates the configuration, then creates the filter in the store or checks that the
    /// one there was made with the same configuration.
    ///
    /// Errors: [`InvalidConfig`](BloomError::InvalidConfig) for settings out of range (or
    /// no `expected_items`), [`InvalidName`](BloomError::InvalidName),
    /// [`ConfigMismatch`](BloomError::ConfigMismatch) when the filter exists with another
    /// configuration or in the other storage, [`ModuleMissing`](BloomError::ModuleMissing),
    /// [`UnsupportedStore`](BloomError::UnsupportedStore) on a Redlock quorum, and
    /// [`Store`](BloomError::Store).
    pub async fn open(self) -> Result<BloomFilter, BloomError> {
        let n = self
            .expected_items
            .ok_or_else(|| BloomError::InvalidConfig {
                reason: "expected_items(n) is required: the filter is sized from it".to_owned(),
            })?;
        let sizing = Sizing::new(n, self.false_positive_rate, self.shard_bits)?;
        let ttl_ms = match self.ttl {
            None => 0,
            Some(ttl) if (Duration::from_millis(1)..=MAX_TTL).contains(&ttl) => {
                u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
            }
            Some(ttl) => {
                return Err(BloomError::InvalidConfig {
                    reason: format!("ttl {ttl:?} is outside 1ms..={MAX_TTL:?}"),
                });
            }
        };
        self.client
            .supports(Capability::BloomFilters)
            .map_err(|refused| BloomError::UnsupportedStore {
                reason: refused.reason,
            })?;
        let prefix = self.client.prefix().to_owned();
        let keys = |kind: &str| -> Result<Vec<ShardCall>, BloomError> {
            (0..sizing.shards)
                .map(|i| {
                    let key = bloom_key(&prefix, kind, &self.name, i)?;
                    Ok(ShardCall {
                        config_key: format!("{key}:cfg"),
                        key,
                        ..ShardCall::default()
                    })
                })
                .collect()
        };
        let bitmaps = Layout {
            shards: keys("bloom")?,
            shape: sizing.bitmap_shape(ttl_ms),
        };
        let module = Layout {
            shards: keys("bf")?,
            shape: sizing.module_shape(ttl_ms),
        };
        let filter = |storage, layout: Layout| BloomFilter {
            client: self.client.clone(),
            name: self.name.clone(),
            storage,
            layout,
            sizing,
        };
        let store = self.client.store();
        // Which form exists already (an empty call only checks each shard).
        let module_present = store.bloom_module().await?;
        let has_bitmaps = exists(store, false, &bitmaps, &self.name).await?;
        let has_module = module_present && exists(store, true, &module, &self.name).await?;
        let storage = match (self.storage, has_bitmaps, has_module) {
            (BloomStorage::Auto | BloomStorage::Bitmaps, true, false) => BloomStorage::Bitmaps,
            (BloomStorage::Auto | BloomStorage::RedisBloom, false, true) => {
                BloomStorage::RedisBloom
            }
            (BloomStorage::Auto, false, false) => {
                if module_present {
                    BloomStorage::RedisBloom
                } else {
                    BloomStorage::Bitmaps
                }
            }
            (wanted @ (BloomStorage::Bitmaps | BloomStorage::RedisBloom), false, false) => wanted,
            (wanted, bitmaps, _) => {
                return Err(BloomError::ConfigMismatch {
                    name: self.name.clone(),
                    stored: if bitmaps {
                        "a filter kept in bitmaps".to_owned()
                    } else {
                        "a filter kept by the RedisBloom module".to_owned()
                    },
                    requested: format!("{wanted:?}"),
                });
            }
        };
        if storage == BloomStorage::RedisBloom && !module_present {
            return Err(BloomError::ModuleMissing);
        }
        let opened = match storage {
            BloomStorage::RedisBloom => filter(BloomStorage::RedisBloom, module),
            _ => filter(BloomStorage::Bitmaps, bitmaps),
        };
        opened.call(BloomOp::Open, &opened.layout.shards).await?;
        Ok(opened)
    }
}

/// Whether any shard of `layout` exists (with this configuration; another is a mismatch).
async fn exists(
    store: &Store,
    native: bool,
    layout: &Layout,
    name: &str,
) -> Result<bool, BloomError> {
    let replies = store
        .bloom(&BloomCall {
            native,
            op: BloomOp::Contains,
            shape: &layout.shape,
            shards: &layout.shards,
        })
        .await?;
    let mut any = false;
    for reply in replies {
        match reply {
            ShardReply::Missing => {}
            ShardReply::Mismatch(stored) => {
                return Err(BloomError::ConfigMismatch {
                    name: name.to_owned(),
                    stored,
                    requested: layout.shape.header.trim_end().to_owned(),
                });
            }
            _ => any = true,
        }
    }
    Ok(any)
}

/// A filter's keys and shape in one storage.
#[derive(Debug, Clone)]
struct Layout {
    shards: Vec<ShardCall>,
    shape: BloomShape,
}

/// A Bloom filter in the store, shared by every client that opens the same name with the
/// same configuration. Cheap to clone. See [`bloom`](crate::bloom).
///
/// Items are bytes (`&str`, `String`, `&[u8]`, `Vec<u8>`...). Every method is one round trip
/// per [`MAX_ITEMS_PER_CALL`] items (on a cluster, one per slot at once), bounded by the
/// client's response timeout.
#[derive(Debug, Clone)]
pub struct BloomFilter {
    client: Core,
    name: String,
    storage: BloomStorage,
    layout: Layout,
    sizing: Sizing,
}

impl BloomFilter {
    /// The filter's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where its bits live: [`BloomStorage::Bitmaps`] or [`BloomStorage::RedisBloom`].
    #[must_use]
    pub fn storage(&self) -> BloomStorage {
        self.storage
    }

    /// Bits in the whole filter (bitmaps: all shards together).
    #[must_use]
    pub fn bits(&self) -> u64 {
        self.sizing.bits()
    }

    /// Hash positions per item.
    #[must_use]
    pub fn hashes(&self) -> u32 {
        self.sizing.hashes
    }

    /// How many keys (shards) it spans.
    #[must_use]
    pub fn shards(&self) -> u32 {
        self.sizing.shards
    }

    /// Adds `item`; answers whether it was new (`false`: it was, or looked, present already).
    pub async fn add(&self, item: impl AsRef<[u8]>) -> Result<bool, BloomError> {
        Ok(self
            .add_many([item])
            .await?
            .first()
            .copied()
            .unwrap_or(false))
    }

    /// Adds every item; answers, per item, whether it was new.
    pub async fn add_many<I>(&self, items: I) -> Result<Vec<bool>, BloomError>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        self.items(BloomOp::Add, items).await
    }

    /// Whether `item` may be in the filter: `false` is certain, `true` is right except for a
    /// false positive (about the configured rate at the expected fill).
    pub async fn contains(&self, item: impl AsRef<[u8]>) -> Result<bool, BloomError> {
        Ok(self
            .contains_many([item])
            .await?
            .first()
            .copied()
            .unwrap_or(false))
    }

    /// [`contains`](Self::contains) for every item.
    pub async fn contains_many<I>(&self, items: I) -> Result<Vec<bool>, BloomError>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        self.items(BloomOp::Contains, items).await
    }

    /// About how many distinct items were added. Bitmaps estimate it from the bits set
    /// (`−m/k · ln(1 − X/m)` per shard: within a few percent up to the expected fill, reading
    /// every shard's bits); the module counts the adds that were new.
    pub async fn count(&self) -> Result<u64, BloomError> {
        let replies = self.call(BloomOp::Count, &self.layout.shards).await?;
        let mut total = 0.0;
        for reply in replies {
            if let ShardReply::Count(c) = reply {
                total += match self.storage {
                    BloomStorage::RedisBloom => c as f64,
                    _ => self.sizing.estimate(c),
                };
            }
        }
        Ok(total.round() as u64)
    }

    /// Empties the filter (its configuration and ttl are set again, as new).
    pub async fn clear(&self) -> Result<(), BloomError> {
        self.call(BloomOp::Clear, &self.layout.shards).await?;
        Ok(())
    }

    /// Adds or looks up items, [`MAX_ITEMS_PER_CALL`] at a time.
    async fn items<I>(&self, op: BloomOp, items: I) -> Result<Vec<bool>, BloomError>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let items: Vec<I::Item> = items.into_iter().collect();
        let mut answers = Vec::with_capacity(items.len());
        for chunk in items.chunks(MAX_ITEMS_PER_CALL) {
            answers.extend(self.chunk(op, chunk).await?);
        }
        Ok(answers)
    }

    async fn chunk<T: AsRef<[u8]>>(
        &self,
        op: BloomOp,
        items: &[T],
    ) -> Result<Vec<bool>, BloomError> {
        let native = self.storage == BloomStorage::RedisBloom;
        let shards = usize::try_from(self.sizing.shards).unwrap_or(1);
        let mut calls: Vec<ShardCall> = self.layout.shards.clone();
        // Where each item went: (shard, index within it).
        let mut placed = Vec::with_capacity(items.len());
        for item in items {
            let item = item.as_ref();
            let shard = hash::shard(item, self.sizing.shards);
            let call = &mut calls[shard];
            let index = if native {
                call.items.push(item.to_vec());
                call.items.len() - 1
            } else {
                let before = call.positions.len();
                hash::positions(
                    item,
                    self.sizing.shard_bits,
                    self.sizing.hashes,
                    &mut call.positions,
                );
                before / usize::try_from(self.sizing.hashes).unwrap_or(1)
            };
            placed.push((shard, index));
        }
        let used: Vec<usize> = (0..shards)
            .filter(|&i| !calls[i].positions.is_empty() || !calls[i].items.is_empty())
            .collect();
        let sent: Vec<ShardCall> = used.iter().map(|&i| calls[i].clone()).collect();
        let replies = self.call(op, &sent).await?;
        let mut per_shard: Vec<Vec<bool>> = vec![Vec::new(); shards];
        for (&i, reply) in used.iter().zip(replies) {
            per_shard[i] = match reply {
                ShardReply::Items(bits) => bits,
                // Expired under a contains: every item is absent.
                ShardReply::Missing => vec![false; calls[i].len(&self.layout.shape)],
                other => {
                    return Err(BloomError::Store(StoreError::Protocol {
                        message: format!("bloom answered {other:?} to {op:?}"),
                    }));
                }
            };
        }
        Ok(placed
            .into_iter()
            .map(|(shard, index)| per_shard[shard].get(index).copied().unwrap_or(false))
            .collect())
    }

    /// One operation on `shards`; a shard that expired under an `add` is opened again (as
    /// new, with every missing shard) and the add sent once more.
    async fn call(&self, op: BloomOp, shards: &[ShardCall]) -> Result<Vec<ShardReply>, BloomError> {
        let store = self.client.store();
        let call = BloomCall {
            native: self.storage == BloomStorage::RedisBloom,
            op,
            shape: &self.layout.shape,
            shards,
        };
        let mut replies = store.bloom(&call).await?;
        let expired = replies.contains(&ShardReply::Missing);
        if expired && matches!(op, BloomOp::Add | BloomOp::Count) {
            let open = BloomCall {
                op: BloomOp::Open,
                shards: &self.layout.shards,
                ..call
            };
            store.bloom(&open).await?;
            replies = store.bloom(&call).await?;
        }
        for reply in &replies {
            if let ShardReply::Mismatch(stored) = reply {
                return Err(BloomError::ConfigMismatch {
                    name: self.name.clone(),
                    stored: stored.clone(),
                    requested: call.shape.header.trim_end().to_owned(),
                });
            }
        }
        Ok(replies)
    }
}

/// Pads a configuration text to the bitmap header's size.
fn header(text: &str) -> String {
    let mut header = text.to_owned();
    header.truncate(HEADER_LEN);
    while header.len() < HEADER_LEN {
        header.push(' ');
    }
    header
}
