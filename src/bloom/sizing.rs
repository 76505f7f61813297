//! How big a filter is: bits and hash positions from the expected items and the
//! false-positive rate, split into shards, and the configuration text each shard holds.

use std::f64::consts::LN_2;

use crate::error::BloomError;
use crate::store::BloomShape;

/// The most bits one shard holds (2^27 bits, 16 MiB): a key that size is created, copied to a
/// replica and moved between cluster slots without a long stall.
pub const MAX_SHARD_BITS: u64 = 1 << 27;
/// The most bits a filter holds (2^36 bits, 8 GiB, in 512 shards).
pub const MAX_BITS: u64 = 1 << 36;
const MAX_ITEMS: u64 = 1 << 40;
const MIN_RATE: f64 = 1e-12;
const MAX_RATE: f64 = 0.5;

/// A validated configuration and the sizes it gives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sizing {
    pub(crate) items: u64,
    pub(crate) rate: f64,
    pub(crate) hashes: u32,
    pub(crate) shards: u32,
    pub(crate) shard_bits: u64,
}

impl Sizing {
    /// `m = ⌈−n·ln p / (ln 2)²⌉` bits, `k = round(m/n · ln 2)` positions, in shards of at most
    /// `max_shard_bits` (items go to shards evenly, so each shard is a filter of `m/s` bits
    /// for `n/s` items with the same rate).
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    pub(crate) fn new(items: u64, rate: f64, max_shard_bits: u64) -> Result<Self, BloomError> {
        let invalid = |reason: String| Err(BloomError::InvalidConfig { reason });
        if !(1..=MAX_ITEMS).contains(&items) {
            return invalid(format!("expected_items({items}) is outside 1..=2^40"));
        }
        if !(MIN_RATE..=MAX_RATE).contains(&rate) {
            return invalid(format!(
                "false_positive_rate({rate}) is outside {MIN_RATE:e}..={MAX_RATE}"
            ));
        }
        let bits = (-(items as f64) * rate.ln() / (LN_2 * LN_2))
            .ceil()
            .max(64.0);
        if bits > MAX_BITS as f64 {
            return invalid(format!(
                "{items} items at a rate of {rate} need {bits} bits, more than {MAX_BITS}"
            ));
        }
        let bits = bits as u64;
        let hashes = ((bits as f64 / items as f64) * LN_2)
            .round()
            .clamp(1.0, 64.0) as u32;
        let shards = bits.div_ceil(max_shard_bits.max(64));
        let shard_bits = bits.div_ceil(shards);
        Ok(Self {
            items,
            rate,
            hashes,
            shards: u32::try_from(shards).unwrap_or(u32::MAX),
            shard_bits,
        })
    }

    /// Bits over every shard.
    pub(crate) fn bits(&self) -> u64 {
        self.shard_bits * u64::from(self.shards)
    }

    /// The configuration text: what two filters must agree on to be one.
    fn text(&self, storage: &str) -> String {
        format!(
            "distlock-bloom/1 {storage} n={} p={:e} k={} s={} b={}",
            self.items, self.rate, self.hashes, self.shards, self.shard_bits
        )
    }

    pub(crate) fn bitmap_shape(&self, ttl_ms: u64) -> BloomShape {
        BloomShape {
            header: super::header(&self.text("bitmap")),
            ttl_ms,
            bits: self.shard_bits,
            hashes: self.hashes,
            capacity: self.items.div_ceil(u64::from(self.shards)),
            error_rate: format!("{}", self.rate),
        }
    }

    pub(crate) fn module_shape(&self, ttl_ms: u64) -> BloomShape {
        BloomShape {
            header: self.text("redisbloom"),
            ..self.bitmap_shape(ttl_ms)
        }
    }

    /// Items in a shard with `set` of its bits set (Swamidass and Baldi's estimate).
    #[allow(clippy::cast_precision_loss)]
    pub(crate) fn estimate(&self, set: u64) -> f64 {
        let m = self.shard_bits as f64;
        let x = (set as f64).min(m - 0.5);
        -(m / f64::from(self.hashes)) * (1.0 - x / m).ln()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usual_formulas() {
        let s = Sizing::new(1_000_000, 0.01, MAX_SHARD_BITS).expect("valid");
        assert_eq!(s.bits(), 9_585_059);
        assert_eq!((s.hashes, s.shards), (7, 1));
        let s = Sizing::new(1_000_000, 0.001, MAX_SHARD_BITS).expect("valid");
        assert_eq!(s.hashes, 10);
        // 100 million items: 958 million bits, in 8 shards of at most 2^27.
        let s = Sizing::new(100_000_000, 0.01, MAX_SHARD_BITS).expect("valid");
        assert_eq!(s.shards, 8);
        assert!(s.shard_bits <= MAX_SHARD_BITS && s.bits() >= 958_505_837);
    }

    #[test]
    fn out_of_range_is_refused() {
        for (n, p) in [
            (0, 0.01),
            (1 << 41, 0.01),
            (1000, 0.0),
            (1000, 0.6),
            (1000, f64::NAN),
            (1000, f64::INFINITY),
            (1000, -0.1),
            (1 << 40, 1e-12),
        ] {
            assert!(
                matches!(
                    Sizing::new(n, p, MAX_SHARD_BITS),
                    Err(BloomError::InvalidConfig { .. })
                ),
                "{n} {p}"
            );
        }
        assert!(Sizing::new(1, 0.5, MAX_SHARD_BITS).is_ok());
        assert!(Sizing::new(1, 1e-12, MAX_SHARD_BITS).is_ok());
    }

    #[test]
    fn headers_fit_and_differ() {
        let a = Sizing::new(1 << 40, 0.333_333_333_333_333_3, MAX_SHARD_BITS);
        assert!(a.is_err(), "too many bits");
        let worst =
            Sizing::new(7_000_000_000, 0.123_456_789_012_345_6, MAX_SHARD_BITS).expect("valid");
        assert!(worst.text("redisbloom").len() <= crate::store::HEADER_LEN);
        let b = Sizing::new(1000, 0.01, MAX_SHARD_BITS).expect("valid");
        let c = Sizing::new(1001, 0.01, MAX_SHARD_BITS).expect("valid");
        assert_ne!(b.bitmap_shape(0).header, c.bitmap_shape(0).header);
        assert_eq!(b.bitmap_shape(0).header.len(), crate::store::HEADER_LEN);
    }
}
