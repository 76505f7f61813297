//! Where an item goes: its shard, and its bit positions in it. Part of what a filter stores,
//! so fixed for good: xxh3-128 of the item, then Kirsch–Mitzenmacher double hashing
//! (`h1 + i·h2 + i(i−1)/2`, wrapping), and for the shard, xxh3-64 with its own seed so the
//! shard says nothing about the positions.

use xxhash_rust::xxh3::{xxh3_64_with_seed, xxh3_128};

/// The seed of the shard hash.
const SHARD_SEED: u64 = 0x6469_7374_6c6f_636b; // "distlock"

/// The shard of `item` among `shards`.
pub(super) fn shard(item: &[u8], shards: u32) -> usize {
    if shards <= 1 {
        return 0;
    }
    usize::try_from(xxh3_64_with_seed(item, SHARD_SEED) % u64::from(shards)).unwrap_or(0)
}

/// Appends the `hashes` bit positions of `item` in a shard of `bits` bits.
pub(super) fn positions(item: &[u8], bits: u64, hashes: u32, out: &mut Vec<u64>) {
    let h = xxh3_128(item);
    // The low and high halves of the 128-bit hash.
    let (mut x, mut y) = ((h & u128::from(u64::MAX)) as u64, (h >> 64) as u64);
    for i in 0..u64::from(hashes) {
        out.push(x % bits);
        x = x.wrapping_add(y);
        y = y.wrapping_add(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_fixed_for_good() {
        // A filter written by one version is read by the next: these must never change.
        let mut out = Vec::new();
        positions(b"sku-1", 9_585_059, 7, &mut out);
        assert_eq!(
            out,
            [
                2_883_586, 2_070_370, 1_257_154, 443_939, 9_215_785, 8_402_575, 7_589_369
            ]
        );
        assert_eq!(shard(b"sku-1", 8), 3);
        assert_eq!(shard(b"sku-1", 1), 0);
        assert!(shard(b"sku-1", 8) < 8);
        let mut spread = [0u32; 8];
        for i in 0..8000 {
            spread[shard(format!("item:{i}").as_bytes(), 8)] += 1;
        }
        assert!(
            spread.iter().all(|c| (850..=1150).contains(c)),
            "{spread:?}"
        );
    }
}
