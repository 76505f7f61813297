//! Key layout: a lock is `<prefix>:lock:{<encoded name>}` with the release channel
//! `<prefix>:released:{<encoded name>}`; every lock of a prefix mints fences from
//! `<prefix>:fence`.
//!
//! The braces are a Redis Cluster hash tag owned by the library: a lock key and its channel (and
//! the keys of one rate-limit subject) land in one slot. User text
//! never adds braces of its own: `%`, `{`, `}` and control characters are percent-encoded, which
//! makes the encoding injective (distinct names give distinct keys) and leaves the tag
//! unforgeable.

use std::sync::Arc;

use crate::error::InvalidName;

/// The longest name accepted, in bytes, before encoding.
pub const MAX_NAME_LEN: usize = 512;

/// Encodes a user-supplied name for use inside a hash tag (keys are built with
/// [`push_encoded`] directly; this is for tests of the encoding).
#[cfg(test)]
fn encode_name(name: &str) -> Result<String, InvalidName> {
    check_name(name)?;
    let mut out = String::with_capacity(name.len());
    push_encoded(&mut out, name);
    Ok(out)
}

fn check_name(name: &str) -> Result<(), InvalidName> {
    if name.is_empty() {
        return Err(InvalidName::Empty);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(InvalidName::TooLong {
            len: name.len(),
            max: MAX_NAME_LEN,
        });
    }
    Ok(())
}

/// Appends `name` encoded: `%`, `{`, `}` and control characters (C0, DEL and C1) become
/// `%XX` escapes of their UTF-8 bytes; everything else is copied.
fn push_encoded(out: &mut String, name: &str) {
    // Almost every name needs no escape: copy it whole. A C1 control is U+0080..=U+009F,
    // which UTF-8 writes as 0xC2 0x80..=0x9F, so a name without 0xC2 has none.
    let plain = |b: u8| !matches!(b, b'%' | b'{' | b'}' | 0x00..=0x1F | 0x7F | 0xC2);
    if name.bytes().all(plain) {
        out.push_str(name);
        return;
    }
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for c in name.chars() {
        if matches!(c, '%' | '{' | '}') || c.is_control() {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push('%');
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xF)]));
            }
        } else {
            out.push(c);
        }
    }
}

/// The key every lock of `prefix` mints its fences from.
pub(crate) fn fence_key(prefix: &str) -> Arc<str> {
    format!("{prefix}:fence").into()
}

/// The keys and channel of one lock, shared (a clone is a reference count) by the lease, its
/// handles and the store operations queued for it.
#[derive(Clone, Debug)]
pub(crate) struct LockKeys(Arc<Keys>);

#[derive(Debug)]
pub(crate) struct Keys {
    /// The name as the user gave it (for errors and tracing).
    pub(crate) name: String,
    /// Holds the holder's token (followed by `*` once a waiter marked it), with the lease's
    /// ttl.
    pub(crate) lock: String,
    /// Holds the last fencing token handed out under the prefix (one key for every lock,
    /// shared with the client).
    pub(crate) fence: Arc<str>,
    /// Pub/sub channel a release publishes to.
    pub(crate) channel: String,
}

impl LockKeys {
    /// The keys of lock `name` under `prefix`, whose fence key is `fence` (see [`fence_key`]).
    /// Built with plain appends: this runs once per acquire.
    pub(crate) fn new(prefix: &str, fence: &Arc<str>, name: &str) -> Result<Self, InvalidName> {
        check_name(name)?;
        let mut lock = String::with_capacity(prefix.len() + name.len() + 8);
        lock.push_str(prefix);
        lock.push_str(":lock:{");
        let tag_start = lock.len();
        push_encoded(&mut lock, name);
        lock.push('}');
        let tagged = &lock[tag_start - 1..];
        let mut channel = String::with_capacity(prefix.len() + 10 + tagged.len());
        channel.push_str(prefix);
        channel.push_str(":released:");
        channel.push_str(tagged);
        Ok(Self(Arc::new(Keys {
            name: name.to_owned(),
            lock,
            fence: fence.clone(),
            channel,
        })))
    }
}

impl std::ops::Deref for LockKeys {
    type Target = Keys;

    fn deref(&self) -> &Keys {
        &self.0
    }
}

/// The keys of rate-limit policies are `<prefix>:rl:<policy>:<algorithm>:{<subject>}`; this is
/// the part before the subject, built once per policy.
///
/// The subject is the hash tag, so every policy of one check lands in one slot (one script
/// can read them all) while different subjects spread over the cluster. Policy names are
/// restricted to `[A-Za-z0-9._-]` when the policy is built, so they need no encoding; the
/// subject is encoded like a lock name. The algorithm is part of the key because each one
/// stores its own format (a sorted set for the sliding log): switching a policy to another
/// algorithm starts from fresh state instead of misreading the old one.
pub(crate) fn rate_key_head(prefix: &str, policy: &str, algorithm: &str) -> Box<str> {
    format!("{prefix}:rl:{policy}:{algorithm}:{{").into()
}

/// The key of each policy (given by its [`rate_key_head`]) for `subject`. Runs once per
/// check, so it appends rather than formats.
pub(crate) fn rate_keys(heads: &[Box<str>], subject: &str) -> Result<Vec<String>, InvalidName> {
    check_name(subject)?;
    Ok(heads
        .iter()
        .map(|head| {
            let mut key = String::with_capacity(head.len() + subject.len() + 1);
            key.push_str(head);
            push_encoded(&mut key, subject);
            key.push('}');
            key
        })
        .collect())
}

/// Returns the hash tag Redis Cluster would use for `key` (the text between the first `{` and
/// the next `}`, if not empty), or the whole key.
#[doc(hidden)]
pub fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_and_percent_are_escaped() {
        assert_eq!(encode_name("a{b}c%d").as_deref(), Ok("a%7Bb%7Dc%25d"));
        assert_eq!(encode_name("order:42").as_deref(), Ok("order:42"));
        assert_eq!(encode_name("\n").as_deref(), Ok("%0A"));
        // DEL and the C1 controls are escaped byte by byte; other non-ASCII text is kept.
        assert_eq!(encode_name("a\u{7f}").as_deref(), Ok("a%7F"));
        assert_eq!(encode_name("\u{85}é\u{a0}").as_deref(), Ok("%C2%85é\u{a0}"));
        assert_eq!(encode_name("été{").as_deref(), Ok("été%7B"));
    }

    #[test]
    fn escaping_is_injective_on_tricky_pairs() {
        let pairs = [("%7B", "{"), ("%25", "%"), ("a%", "a%25"), ("}", "%7D")];
        for (a, b) in pairs {
            assert_ne!(encode_name(a), encode_name(b), "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn empty_and_long_names_are_rejected() {
        assert_eq!(encode_name(""), Err(InvalidName::Empty));
        let long = "x".repeat(MAX_NAME_LEN + 1);
        assert_eq!(
            encode_name(&long),
            Err(InvalidName::TooLong {
                len: MAX_NAME_LEN + 1,
                max: MAX_NAME_LEN
            })
        );
        assert!(encode_name(&"x".repeat(MAX_NAME_LEN)).is_ok());
    }

    /// TESTPLAN 23 as a property: over random names drawn from an alphabet rich in the
    /// characters the encoding escapes (and in the escapes' own digits), distinct names always
    /// give distinct keys, and every key's hash tag is exactly the encoded name, brace-free.
    #[test]
    fn random_names_never_collide_or_forge_a_tag() {
        use std::collections::HashMap;
        const ALPHABET: [char; 14] = [
            '%', '{', '}', ':', '7', 'B', 'D', '2', '5', 'a', '\n', 'é', '0', 'A',
        ];
        let mut seen: HashMap<String, String> = HashMap::new();
        for _ in 0..200_000 {
            let len = rand::random_range(1..=8);
            let name: String = (0..len)
                .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())])
                .collect();
            let keys = LockKeys::new("p", &fence_key("p"), &name).expect("valid name");
            let tag = hash_tag(&keys.lock);
            assert!(
                !tag.contains(['{', '}']),
                "{name:?} forged a brace into {tag:?}"
            );
            assert_eq!(
                Some(tag),
                keys.lock
                    .strip_prefix("p:lock:{")
                    .and_then(|k| k.strip_suffix('}'))
            );
            if let Some(other) = seen.insert(keys.lock.clone(), name.clone()) {
                assert_eq!(
                    other, name,
                    "{other:?} and {name:?} share the key {}",
                    keys.lock
                );
            }
        }
    }

    #[test]
    fn rate_keys_put_the_subject_in_the_tag() {
        let heads = [
            rate_key_head("p", "per-second", "gcra"),
            rate_key_head("p", "per-hour", "sl"),
        ];
        let keys = rate_keys(&heads, "user:{7}").expect("valid subject");
        let [a, b] = &keys[..] else {
            panic!("{keys:?}")
        };
        assert_eq!(a, "p:rl:per-second:gcra:{user:%7B7%7D}");
        assert_eq!(hash_tag(a), hash_tag(b));
        assert_eq!(hash_tag(a), "user:%7B7%7D");
    }

    #[test]
    fn the_lock_key_and_channel_share_the_library_tag() {
        let keys = LockKeys::new("p", &fence_key("p"), "evil}{tag}").expect("valid name");
        let tag = hash_tag(&keys.lock);
        assert_eq!(tag, "evil%7D%7Btag%7D");
        assert_eq!(hash_tag(&keys.channel), tag);
    }

    #[test]
    fn every_lock_of_a_prefix_shares_one_fence_key() {
        let a = LockKeys::new("p", &fence_key("p"), "order:1").expect("valid name");
        let b = LockKeys::new("p", &fence_key("p"), "evil}{tag}").expect("valid name");
        let c = LockKeys::new("q", &fence_key("q"), "order:1").expect("valid name");
        assert_eq!(&*a.fence, "p:fence");
        assert_eq!(a.fence, b.fence);
        assert_ne!(a.fence, c.fence);
    }
}
