//! Hash slots as Redis computes them, and keys chosen to land in a given slot.

use std::sync::OnceLock;

/// Number of hash slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// The hash slot of `key`, computed as Redis does: CRC16 (XMODEM) of the key,
/// or of its hash tag (the bytes between the first `{` and the first `}` after
/// it, if that is not empty), modulo 16384.
pub fn slot_of(key: impl AsRef<[u8]>) -> u16 {
    let key = key.as_ref();
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16(hashed) & (SLOTS - 1)
}

/// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, as in Redis's `crc16.c`.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A short string `t` such that `{t}` (and any key containing `{t}` as its
/// first hash tag) hashes to `slot`.
///
/// # Panics
///
/// If `slot >= 16384`.
pub fn hash_tag_for_slot(slot: u16) -> &'static str {
    static TABLE: OnceLock<Vec<String>> = OnceLock::new();
    assert!(slot < SLOTS, "slot {slot} out of range 0..{SLOTS}");
    let table = TABLE.get_or_init(|| {
        let mut table = vec![String::new(); usize::from(SLOTS)];
        let mut missing = usize::from(SLOTS);
        let mut n: u64 = 0;
        while missing > 0 {
            let tag = n.to_string();
            let entry = &mut table[usize::from(crc16(tag.as_bytes()) & (SLOTS - 1))];
            if entry.is_empty() {
                *entry = tag;
                missing -= 1;
            }
            n += 1;
            assert!(n < 50_000_000, "cannot find hash tags for all slots");
        }
        table
    });
    &table[usize::from(slot)]
}

/// `{tag}:suffix` with the tag of [`hash_tag_for_slot`]: a key in `slot`.
pub fn key_in_slot(slot: u16, suffix: &str) -> String {
    format!("{{{}}}:{suffix}", hash_tag_for_slot(slot))
}
