//! Names that land in chosen hash slots, for `--cluster-slots N`: the cluster workloads then
//! draw their lock names and rate-limit subjects from N slots (spread over the masters) instead
//! of all 16 384, so that concurrent operations share slots and distlock's per-slot batches can
//! fill as they do on a single primary. An experiment: it tells what a cluster costs with
//! batches as big as a single primary's apart from what smaller batches cost.
//!
//! A name is a base text plus a 4-character suffix picked so that CRC16/XMODEM of the whole
//! (Redis Cluster's slot function; neither peer's names contain braces, so the whole name is
//! hashed for raw's keys, and distlock puts the whole name in its hash tag) hits the target
//! slot. The CRC has no initial value or final xor, so it is linear: the CRC of `base ++ s` is
//! the CRC of `base ++ 0000` xor the CRC of `s` alone, and a table from every 14-bit value to a
//! suffix with that CRC gives the suffix in one lookup.

/// CRC16/XMODEM (polynomial 0x1021, initial value 0), continued from `crc`.
pub fn crc16_update(mut crc: u16, data: &[u8]) -> u16 {
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

const ALPHABET: &[u8; 64] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";
const SUFFIX: usize = 4;

/// Makes names in a fixed set of slots.
pub struct SlotNames {
    targets: Vec<u16>,
    /// By the low 14 bits of a suffix's own CRC: the suffix.
    suffixes: Vec<[u8; SUFFIX]>,
}

impl SlotNames {
    /// `n` (≥ 1) slots, evenly spaced at the middles of `n` equal ranges, so that `n` = the
    /// number of masters of a cluster made by `redis-cli --cluster create` gives one slot on
    /// each master.
    pub fn new(n: u16) -> Self {
        let n = n.clamp(1, 16384);
        let targets = (0..n)
            .map(|k| ((2 * u32::from(k) + 1) * 16384 / (2 * u32::from(n))) as u16)
            .collect();
        let mut suffixes = vec![None; 16384];
        let mut missing = suffixes.len();
        'all: for a in ALPHABET {
            for b in ALPHABET {
                for c in ALPHABET {
                    for d in ALPHABET {
                        let s = [*a, *b, *c, *d];
                        let entry = &mut suffixes[usize::from(crc16_update(0, &s) % 16384)];
                        if entry.is_none() {
                            *entry = Some(s);
                            missing -= 1;
                            if missing == 0 {
                                break 'all;
                            }
                        }
                    }
                }
            }
        }
        Self {
            targets,
            suffixes: suffixes
                .into_iter()
                .map(|s| s.expect("64^4 suffixes cover every 14-bit CRC"))
                .collect(),
        }
    }

    pub fn targets(&self) -> &[u16] {
        &self.targets
    }

    /// `base` plus a suffix, in target slot number `pick` (modulo the number of targets).
    pub fn name(&self, base: &str, pick: u64) -> String {
        let target = self.targets[(pick % self.targets.len() as u64) as usize];
        let shifted = crc16_update(crc16_update(0, base.as_bytes()), &[0; SUFFIX]);
        let suffix = self.suffixes[usize::from((shifted ^ target) % 16384)];
        let mut name = String::with_capacity(base.len() + SUFFIX);
        name.push_str(base);
        name.extend(suffix.iter().map(|&b| char::from(b)));
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash slot of a key without a hash tag.
    fn slot(key: &str) -> u16 {
        crc16_update(0, key.as_bytes()) % 16384
    }

    #[test]
    fn crc_is_redis_clusters() {
        // The check value of the Redis Cluster specification.
        assert_eq!(crc16_update(0, b"123456789"), 0x31C3);
        // Slots redis-cli reports (CLUSTER KEYSLOT).
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("bar"), 5061);
    }

    #[test]
    fn names_land_in_their_slots_spread_over_the_masters() {
        let names = SlotNames::new(3);
        // One per master of a 3-master cluster (0-5460, 5461-10922, 10923-16383).
        assert_eq!(names.targets(), [2730, 8192, 13653]);
        for op in 0..2000u64 {
            let base = format!("bench:123:{}:{op}:", op % 32);
            let name = names.name(&base, op);
            assert!(name.starts_with(&base));
            assert_eq!(slot(&name), names.targets()[(op % 3) as usize], "{name}");
            assert!(!name.contains(['{', '}', '%']));
        }
        let one = SlotNames::new(1);
        assert_eq!(one.targets(), [8192]);
        assert_eq!(slot(&one.name("s1:7", 99)), 8192);
    }
}
