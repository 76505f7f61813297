//! Key layout: a lock is `<prefix>:lock:{<encoded name>}` with the release channel
//! `<prefix>:released:{<encoded name>}`; every lock of a prefix mints fences from
//! `<prefix>:fence` on a single primary, and on a cluster from the fence key of its own hash
//! slot, `<prefix>:fence:{<tag>}`, where `<tag>` is a short text that hashes to that slot (one
//! fence key per slot at most, none per name).
//!
//! The braces are a Redis Cluster hash tag owned by the library: a lock key and its channel (and
//! the keys of one rate-limit subject, or of one fenced resource) land in one slot. User text
//! never adds braces of its own: `%`, `{`, `}` and control characters are percent-encoded, which
//! makes the encoding injective (distinct names give distinct keys) and leaves the tag
//! unforgeable.

use std::sync::{Arc, OnceLock};

use crate::error::InvalidName;
use crate::mode::HierarchyMode;

/// Hash slots of a Redis Cluster.
pub(crate) const SLOTS: u16 = 16384;

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

pub(crate) fn check_name(name: &str) -> Result<(), InvalidName> {
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

/// Which key a lock mints its fences from.
#[derive(Debug)]
pub(crate) enum Fences {
    /// One key for every lock of the prefix, `<prefix>:fence` (a single primary, memory):
    /// every acquire touches the same key, which costs nothing on one server.
    Shared(Arc<str>),
    /// One key per hash slot, `<prefix>:fence:{<tag of the slot>}` (a cluster), so that a
    /// lock's fence key lives in the lock's own slot and an acquire stays one single-slot
    /// script. Built the first time a slot is used.
    PerSlot {
        prefix: Box<str>,
        keys: Box<[OnceLock<Arc<str>>]>,
    },
}

impl Fences {
    pub(crate) fn shared(prefix: &str) -> Self {
        Self::Shared(format!("{prefix}:fence").into())
    }

    pub(crate) fn per_slot(prefix: &str) -> Self {
        Self::PerSlot {
            prefix: prefix.into(),
            keys: (0..SLOTS).map(|_| OnceLock::new()).collect(),
        }
    }

    /// The fence key for a lock whose hash tag is `tag`.
    fn for_tag(&self, tag: &str) -> Arc<str> {
        match self {
            Self::Shared(key) => key.clone(),
            Self::PerSlot { prefix, keys } => {
                let slot = slot_of_tag(tag.as_bytes());
                keys[usize::from(slot)]
                    .get_or_init(|| format!("{prefix}:fence:{{{}}}", slot_tag(slot)).into())
                    .clone()
            }
        }
    }
}

/// The hash slot of a key whose hash tag is `tag` (CRC16/XMODEM modulo 16384, as Redis
/// Cluster computes it).
pub(crate) fn slot_of_tag(tag: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(tag) % SLOTS
}

/// The hash slot of `key`, honouring its hash tag.
pub(crate) fn slot_of(key: &str) -> u16 {
    slot_of_tag(hash_tag(key).as_bytes())
}

/// A short text whose hash slot is `slot`: the first decimal number that lands there. The
/// table is built once per process (about 200 000 hashes of numbers up to six digits).
fn slot_tag(slot: u16) -> &'static str {
    static TAGS: OnceLock<Box<[Box<str>]>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags: Vec<Option<Box<str>>> = vec![None; usize::from(SLOTS)];
        let mut missing = tags.len();
        let mut n = 0u64;
        while missing > 0 {
            let text = n.to_string();
            let entry = &mut tags[usize::from(slot_of_tag(text.as_bytes()))];
            if entry.is_none() {
                *entry = Some(text.into());
                missing -= 1;
            }
            n += 1;
        }
        tags.into_iter().map(Option::unwrap_or_default).collect()
    });
    &tags[usize::from(slot)]
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
    /// Holds the last fencing token handed out under the prefix (one key for every lock on a
    /// single primary; one per slot on a cluster), shared with the client.
    pub(crate) fence: Arc<str>,
    /// Pub/sub channel a release publishes to.
    pub(crate) channel: String,
}

impl LockKeys {
    /// The keys of lock `name` under `prefix`, minting from `fences`. Built with plain
    /// appends: this runs once per acquire.
    pub(crate) fn new(prefix: &str, fences: &Fences, name: &str) -> Result<Self, InvalidName> {
        check_name(name)?;
        Ok(Self::of_checked(prefix, fences, name.to_owned()))
    }

    /// As [`new`](Self::new), keeping `name` itself (no copy of it).
    pub(crate) fn of_name(
        prefix: &str,
        fences: &Fences,
        name: String,
    ) -> Result<Self, InvalidName> {
        check_name(&name)?;
        Ok(Self::of_checked(prefix, fences, name))
    }

    fn of_checked(prefix: &str, fences: &Fences, name: String) -> Self {
        let mut lock = String::with_capacity(prefix.len() + name.len() + 8);
        lock.push_str(prefix);
        lock.push_str(":lock:{");
        let tag_start = lock.len();
        push_encoded(&mut lock, &name);
        lock.push('}');
        let tagged = &lock[tag_start - 1..];
        let mut channel = String::with_capacity(prefix.len() + 10 + tagged.len());
        channel.push_str(prefix);
        channel.push_str(":released:");
        channel.push_str(tagged);
        let fence = fences.for_tag(&tagged[1..tagged.len() - 1]);
        Self(Arc::new(Keys {
            name,
            lock,
            fence,
            channel,
        }))
    }
}

impl std::ops::Deref for LockKeys {
    type Target = Keys;

    fn deref(&self) -> &Keys {
        &self.0
    }
}

/// What every lock key of `prefix` starts with: `<prefix>:lock:{`.
pub(crate) fn lock_key_start(prefix: &str) -> String {
    format!("{prefix}:lock:{{")
}

/// The name of lock key `key` (one that starts with [`lock_key_start`] `start`): its hash
/// tag, decoded. `None` for a key of another shape, or an escape this library never writes.
pub(crate) fn lock_name(start: &str, key: &str) -> Option<String> {
    let tag = key.strip_prefix(start)?.strip_suffix('}')?;
    let mut bytes = Vec::with_capacity(tag.len());
    let mut rest = tag.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    let name = String::from_utf8(bytes).ok()?;
    check_name(&name).ok()?;
    // Only the one spelling this library writes for that name.
    let mut again = String::with_capacity(tag.len());
    push_encoded(&mut again, &name);
    (again == tag).then_some(name)
}

/// `<prefix>:<kind>:{<tag>}`: one key (or channel) of a primitive whose hash tag is `tag`.
fn tagged(prefix: &str, kind: &str, tag: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + kind.len() + tag.len() + 4);
    key.push_str(prefix);
    key.push(':');
    key.push_str(kind);
    key.push_str(":{");
    key.push_str(tag);
    key.push('}');
    key
}

/// The encoded hash tag of a valid `name`.
fn tag_of(name: &str) -> Result<String, InvalidName> {
    check_name(name)?;
    let mut tag = String::with_capacity(name.len());
    push_encoded(&mut tag, name);
    Ok(tag)
}

/// The key of election `name`'s leader record, `<prefix>:leader:{<name>}`: the hash tag of
/// the lock of the same name, so both share a slot (see `src/election.rs`).
pub(crate) fn leader_key(prefix: &str, name: &str) -> Result<String, InvalidName> {
    Ok(tagged(prefix, "leader", &tag_of(name)?))
}

/// The keys of a **holder set**: a sorted set with one entry per held permit
/// (`<token>:<i>`, scored by its expiry in ms on the server's clock), so that a holder that
/// dies frees its entries within its ttl. Semaphores and the readers of a read-write lock are
/// holder sets. Every key shares the name's hash tag.
#[derive(Clone, Debug)]
pub(crate) struct SetKeys(Arc<Set>);

#[derive(Debug)]
pub(crate) struct Set {
    /// The name as the user gave it (for errors and tracing).
    pub(crate) name: String,
    /// The sorted set of entries.
    pub(crate) set: String,
    /// Exists while a waiter listens for releases: a release publishes only then.
    pub(crate) waited: String,
    /// A semaphore's claim: `<count>:<token>` of the waiter that has waited long, whose
    /// permits nobody else may take (see `acquire_permits.lua`).
    pub(crate) claim: String,
    /// Pub/sub channel a release publishes to.
    pub(crate) channel: String,
    /// The fence key grants mint from (the lock's, for the name's slot).
    pub(crate) fence: Arc<str>,
}

impl std::ops::Deref for SetKeys {
    type Target = Set;

    fn deref(&self) -> &Set {
        &self.0
    }
}

impl SetKeys {
    /// The keys of semaphore `name`: `<prefix>:sem:{<name>}` and its companions.
    pub(crate) fn semaphore(
        prefix: &str,
        fences: &Fences,
        name: &str,
    ) -> Result<Self, InvalidName> {
        let tag = tag_of(name)?;
        Ok(Self::of(prefix, fences, name, &tag, "sem"))
    }

    fn of(prefix: &str, fences: &Fences, name: &str, tag: &str, kind: &str) -> Self {
        Self(Arc::new(Set {
            name: name.to_owned(),
            set: tagged(prefix, kind, tag),
            waited: tagged(prefix, &format!("{kind}-waited"), tag),
            claim: tagged(prefix, &format!("{kind}-claim"), tag),
            channel: tagged(prefix, &format!("{kind}-released"), tag),
            fence: fences.for_tag(tag),
        }))
    }
}

/// The keys of read-write lock `name`: the writer's key (a lock key, `<prefix>:rw:{<name>}`,
/// with the same value and marks as a lock's), the readers' holder set
/// (`<prefix>:rw-readers:{<name>}`), and the intent key a waiting writer sets so that no new
/// reader gets in before it (`<prefix>:rw-intent:{<name>}`). One hash tag for every key.
///
/// Two release channels, so that a release wakes a waiter it can serve: writers wait on
/// `<prefix>:rw-released:{<name>}` (the channel of the writer's key and of the readers' set:
/// both a reader's and a writer's release publish there), readers on
/// `<prefix>:rw-readable:{<name>}` (only a writer's release frees anything for a reader).
#[derive(Clone, Debug)]
pub(crate) struct RwKeys {
    pub(crate) writer: LockKeys,
    pub(crate) readers: SetKeys,
    pub(crate) intent: Arc<str>,
    /// The channel readers wait on.
    pub(crate) readable: Arc<str>,
}

impl RwKeys {
    pub(crate) fn new(prefix: &str, fences: &Fences, name: &str) -> Result<Self, InvalidName> {
        let tag = tag_of(name)?;
        let readers = SetKeys(Arc::new(Set {
            name: name.to_owned(),
            set: tagged(prefix, "rw-readers", &tag),
            waited: tagged(prefix, "rw-waited", &tag),
            // Readers never claim (a waiting writer's intent keeps them out instead).
            claim: tagged(prefix, "rw-claim", &tag),
            channel: tagged(prefix, "rw-released", &tag),
            fence: fences.for_tag(&tag),
        }));
        let writer = LockKeys(Arc::new(Keys {
            name: name.to_owned(),
            lock: tagged(prefix, "rw", &tag),
            fence: readers.fence.clone(),
            channel: readers.channel.clone(),
        }));
        Ok(Self {
            writer,
            readers,
            intent: tagged(prefix, "rw-intent", &tag).into(),
            readable: tagged(prefix, "rw-readable", &tag).into(),
        })
    }
}

/// The keys of a fair lock: the lock's own ([`LockKeys`]: a fair lock's key is the lock of its
/// name, so it is renewed, released, listed and forced as any lock), and its queue,
/// `<prefix>:fair-queue:{<name>}` (waiters by arrival), and `<prefix>:fair-claims:{<name>}`
/// (when each waiter's place runs out), in the lock's slot.
#[derive(Clone, Debug)]
pub(crate) struct FairKeys {
    pub(crate) lock: LockKeys,
    pub(crate) queue: Arc<str>,
    pub(crate) claims: Arc<str>,
}

impl FairKeys {
    /// The queue keys of lock `lock` (whose keys were made under `prefix`).
    pub(crate) fn of(prefix: &str, lock: LockKeys) -> Self {
        // `<prefix>:lock:{<tag>}`: the tag as the lock key spells it.
        let tag = lock
            .lock
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix(":lock:{"))
            .and_then(|rest| rest.strip_suffix('}'))
            .unwrap_or_default()
            .to_owned();
        Self {
            queue: tagged(prefix, "fair-queue", &tag).into(),
            claims: tagged(prefix, "fair-claims", &tag).into(),
            lock,
        }
    }
}

/// The most levels a hierarchical lock's path may have (`db/orders/42` has three).
pub const MAX_HIERARCHY_LEVELS: usize = 8;

/// The keys of a **hierarchical lock**'s path, one [`LevelKeys`] per level, top-down. The hash
/// tag is the root level's name, so every key of one hierarchy (every path under one root) is
/// in one slot: a path is taken in one script on a Cluster too, and a whole hierarchy lives
/// on one Cluster node. A level's keys are `<prefix>:hier-<what>:{<root>}/<level 2>/...`:
/// the path after the tag spells the level, each name encoded like a lock name.
#[derive(Clone, Debug)]
pub(crate) struct PathKeys(Arc<Path>);

#[derive(Debug)]
pub(crate) struct Path {
    /// The path as the user gave it.
    pub(crate) name: String,
    /// Top-down: the root first, the path's own level last.
    pub(crate) levels: Vec<LevelKeys>,
    /// The one channel every waiter of the hierarchy listens on, and a release publishes to
    /// when a level it held was waited for.
    pub(crate) channel: String,
    /// The fence key grants mint from (the root's slot's).
    pub(crate) fence: Arc<str>,
}

/// The keys of one level of a hierarchy.
#[derive(Debug)]
pub(crate) struct LevelKeys {
    /// The level's path (`db/orders` for the second level of `db/orders/42`).
    pub(crate) path: String,
    /// One holder set per mode, in the order of [`HierarchyMode::ALL`]: one entry
    /// `<token>:1` per holder of the level in that mode.
    pub(crate) holders: [String; 4],
    /// The mark of a waiter kept out of this level by incompatible holders:
    /// `<mode index><waiter>`; new arrivals incompatible with that mode are refused while
    /// it exists, so a stream of holders cannot starve the waiter.
    pub(crate) intent: String,
    /// Exists while a waiter listens for a release of this level's holders.
    pub(crate) waited: String,
}

impl LevelKeys {
    /// The holder set of `mode` on this level.
    pub(crate) fn holders_of(&self, mode: HierarchyMode) -> &str {
        &self.holders[mode.index()]
    }
}

impl std::ops::Deref for PathKeys {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl PathKeys {
    /// The keys of `path` (`/`-separated level names, none empty, at most
    /// [`MAX_HIERARCHY_LEVELS`]).
    pub(crate) fn new(prefix: &str, fences: &Fences, path: &str) -> Result<Self, InvalidName> {
        check_name(path)?;
        let names: Vec<&str> = path.split('/').collect();
        if names.len() > MAX_HIERARCHY_LEVELS {
            return Err(InvalidName::TooManyLevels {
                levels: names.len(),
                max: MAX_HIERARCHY_LEVELS,
            });
        }
        if let Some(empty) = names.iter().position(|n| n.is_empty()) {
            return Err(InvalidName::EmptyLevel { level: empty + 1 });
        }
        let mut root = String::with_capacity(names[0].len());
        push_encoded(&mut root, names[0]);
        let mut tail = String::new();
        let mut levels = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            if i > 0 {
                tail.push('/');
                push_encoded(&mut tail, name);
            }
            let key = |what: &str| {
                let mut key = tagged(prefix, what, &root);
                key.push_str(&tail);
                key
            };
            levels.push(LevelKeys {
                path: names[..=i].join("/"),
                holders: [key("hier-is"), key("hier-ix"), key("hier-s"), key("hier-x")],
                intent: key("hier-intent"),
                waited: key("hier-waited"),
            });
        }
        Ok(Self(Arc::new(Path {
            name: path.to_owned(),
            levels,
            channel: tagged(prefix, "hier-released", &root),
            fence: fences.for_tag(&root),
        })))
    }
}

/// The keys of a fenced resource (`Client::fenced`): `<prefix>:fenced-guard:{<resource>}`, a
/// string holding the highest fence a write to the resource was accepted with, and
/// `<prefix>:fenced:{<resource>}`, a hash holding the resource's values. The resource is the
/// hash tag, encoded like a lock name, so both keys share a slot and user text cannot forge
/// the tag. The guard is a key of its own so that deleting every value never forgets it.
#[derive(Clone, Debug)]
pub(crate) struct FencedKeys {
    /// The highest fence accepted.
    pub(crate) guard: String,
    /// The values.
    pub(crate) values: String,
}

impl FencedKeys {
    pub(crate) fn new(prefix: &str, resource: &str) -> Result<Self, InvalidName> {
        let tag = tag_of(resource)?;
        Ok(Self {
            guard: tagged(prefix, "fenced-guard", &tag),
            values: tagged(prefix, "fenced", &tag),
        })
    }
}

/// The record key of an idempotency key whose claim is the lock `name`
/// (`Client::idempotency`): `<prefix>:idem:{<name>}`, beside the lock's `<prefix>:lock:{<name>}`
/// under the same hash tag, so that storing a record only while the claim holds is one
/// single-slot script.
pub(crate) fn idempotency_record(prefix: &str, name: &str) -> Result<String, InvalidName> {
    Ok(tagged(prefix, "idem", &tag_of(name)?))
}

/// The state of the shared concurrency limit `name`: `<prefix>:adaptive:{<name>}`.
pub(crate) fn adaptive_limit(prefix: &str, name: &str) -> Result<String, InvalidName> {
    Ok(tagged(prefix, "adaptive", &tag_of(name)?))
}

/// The keys of rate-limit policies are `<prefix>:rl:<policy>:<algorithm>:{<subject>}`; this is
/// the part before the subject, built once per policy.
///
/// The subject is the hash tag, so every policy of one check lands in one slot (one script
/// can read them all) while different subjects spread over the cluster. Policy names are
/// restricted to `[A-Za-z0-9._-]` when the policy is built, so they need no encoding; the
/// subject is encoded like a lock name. The algorithm is part of the key because each one
/// stores its own format (a sorted set for the sliding log): switching a policy to another
/// algorithm starts from fresh state instead of misreading the old one. A policy's lockout
/// keeps the subject's block in `<prefix>:rl:<policy>:lock:{<subject>}` (see
/// [`LOCK_KEY_PART`]), in the same slot, whatever the algorithm.
pub(crate) fn rate_key_head(prefix: &str, policy: &str, algorithm: &str) -> Box<str> {
    format!("{prefix}:rl:{policy}:{algorithm}:{{").into()
}

/// The part of a lockout's key where a policy's key has its algorithm's (no algorithm's is
/// `lock`).
pub(crate) const LOCK_KEY_PART: &str = "lock";

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

/// The keys of a Bloom filter's shard `shard`: `<prefix>:<kind>:{<name>%S<shard>}`, where
/// `kind` is `bloom` (a bitmap) or `bf` (the RedisBloom module's filter; its configuration is
/// that key plus `:cfg`). Each shard has its own hash tag, so a large filter spreads over a
/// cluster's slots; `%S` cannot come out of an encoded name (a `%` there is always followed
/// by two hex digits), so shards of different names never share a key.
pub(crate) fn bloom_key(
    prefix: &str,
    kind: &str,
    name: &str,
    shard: u32,
) -> Result<String, InvalidName> {
    check_name(name)?;
    let mut key = String::with_capacity(prefix.len() + kind.len() + name.len() + 16);
    key.push_str(prefix);
    key.push(':');
    key.push_str(kind);
    key.push_str(":{");
    push_encoded(&mut key, name);
    key.push_str("%S");
    key.push_str(&shard.to_string());
    key.push('}');
    Ok(key)
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
    fn a_lock_keys_name_reads_back_from_the_key() {
        let fences = Fences::Shared(Arc::from("p:fence"));
        let start = lock_key_start("p");
        for name in [
            "a",
            "orders:{42}",
            "100%",
            "tab\there",
            "é{}%\u{85}",
            "*?[x]",
        ] {
            let keys = LockKeys::new("p", &fences, name).expect("valid name");
            assert_eq!(
                lock_name(&start, &keys.lock).as_deref(),
                Some(name),
                "{name:?}"
            );
        }
        // Keys of other shapes, or spellings this library never writes, are not locks.
        for key in [
            "p:lock:{a",
            "p:sem:{a}",
            "q:lock:{a}",
            "p:lock:{}",
            "p:lock:{%zz}",
            "p:lock:{%7b}",
            "p:lock:{%41}",
            "p:lock:{a}b}",
            "p:lock:{%C3}",
        ] {
            assert_eq!(lock_name(&start, key), None, "{key:?}");
        }
    }

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
            let keys = LockKeys::new("p", &Fences::shared("p"), &name).expect("valid name");
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
        let keys = LockKeys::new("p", &Fences::shared("p"), "evil}{tag}").expect("valid name");
        let tag = hash_tag(&keys.lock);
        assert_eq!(tag, "evil%7D%7Btag%7D");
        assert_eq!(hash_tag(&keys.channel), tag);
    }

    #[test]
    fn every_lock_of_a_prefix_shares_one_fence_key() {
        let a = LockKeys::new("p", &Fences::shared("p"), "order:1").expect("valid name");
        let b = LockKeys::new("p", &Fences::shared("p"), "evil}{tag}").expect("valid name");
        let c = LockKeys::new("q", &Fences::shared("q"), "order:1").expect("valid name");
        assert_eq!(&*a.fence, "p:fence");
        assert_eq!(a.fence, b.fence);
        assert_ne!(a.fence, c.fence);
    }

    #[test]
    fn every_key_of_a_semaphore_or_rw_lock_shares_the_names_slot() {
        let fences = Fences::per_slot("p");
        for name in ["exports", "a{b}c", "%7B", "x:y"] {
            let sem = SetKeys::semaphore("p", &fences, name).expect("valid name");
            let tag = hash_tag(&sem.set).to_owned();
            assert_eq!(sem.set, format!("p:sem:{{{tag}}}"));
            for key in [&sem.waited, &sem.channel] {
                assert_eq!(hash_tag(key), tag, "{key}");
            }
            assert_eq!(slot_of(&sem.fence), slot_of(&sem.set));
            let rw = RwKeys::new("p", &fences, name).expect("valid name");
            for key in [
                &rw.writer.lock,
                &rw.writer.channel,
                &rw.readers.set,
                &rw.readers.waited,
                &*rw.intent,
                &*rw.readable,
            ] {
                assert_eq!(hash_tag(key), tag, "{key}");
            }
            assert_eq!(rw.writer.channel, rw.readers.channel);
            // Distinct from the lock of the same name, and from each other.
            let lock = LockKeys::new("p", &fences, name).expect("valid name");
            let all = [
                &lock.lock,
                &lock.channel,
                &sem.set,
                &sem.channel,
                &rw.writer.lock,
                &rw.readers.set,
                &rw.readers.channel,
            ];
            let distinct: std::collections::HashSet<_> = all.iter().collect();
            assert_eq!(distinct.len(), all.len(), "{all:?}");
        }
        assert!(SetKeys::semaphore("p", &fences, "").is_err());
        assert!(RwKeys::new("p", &fences, &"x".repeat(MAX_NAME_LEN + 1)).is_err());
    }

    #[test]
    fn a_fair_locks_queue_shares_the_locks_slot() {
        let fences = Fences::per_slot("p");
        for name in ["exports", "a{b}c", "%7B", "x:y", "}"] {
            let lock = LockKeys::new("p", &fences, name).expect("valid name");
            let fair = FairKeys::of("p", lock.clone());
            let tag = hash_tag(&lock.lock);
            assert!(!tag.is_empty());
            for key in [&*fair.queue, &*fair.claims, &*fair.lock.fence] {
                assert_eq!(slot_of(key), slot_of(&lock.lock), "{key}");
            }
            assert_eq!(fair.queue.as_ref(), format!("p:fair-queue:{{{tag}}}"));
            assert_eq!(fair.claims.as_ref(), format!("p:fair-claims:{{{tag}}}"));
        }
    }

    #[test]
    fn a_hierarchys_keys_share_the_roots_slot_and_levels_never_collide() {
        let fences = Fences::per_slot("p");
        let a = PathKeys::new("p", &fences, "db/orders/42").expect("valid path");
        assert_eq!(a.levels.len(), 3);
        assert_eq!(a.levels[1].path, "db/orders");
        assert_eq!(a.levels[2].holders[3], "p:hier-x:{db}/orders/42");
        let mut seen = std::collections::HashSet::new();
        for path in [
            "db",
            "db/orders",
            "db/orders/42",
            "db/or{d}ers/4%2",
            "db/x:y/z",
        ] {
            let keys = PathKeys::new("p", &fences, path).expect("valid path");
            assert_eq!(slot_of(&keys.fence), slot_of(&keys.channel));
            for level in &keys.levels {
                for key in level.holders.iter().chain([&level.intent, &level.waited]) {
                    assert_eq!(hash_tag(key), "db", "{key}");
                    seen.insert((key.clone(), level.path.clone()));
                }
            }
        }
        // One key per (level, role), whichever path it was reached from.
        let keys: std::collections::HashSet<_> = seen.iter().map(|(k, _)| k).collect();
        let paths: std::collections::HashSet<_> = seen.iter().map(|(_, p)| p).collect();
        assert_eq!(keys.len(), paths.len() * 6);
        for (path, err) in [
            ("", InvalidName::Empty),
            ("a//b", InvalidName::EmptyLevel { level: 2 }),
            ("/a", InvalidName::EmptyLevel { level: 1 }),
            ("a/", InvalidName::EmptyLevel { level: 2 }),
            (
                "a/b/c/d/e/f/g/h/i",
                InvalidName::TooManyLevels { levels: 9, max: 8 },
            ),
        ] {
            assert_eq!(
                PathKeys::new("p", &fences, path).map(|_| ()),
                Err(err),
                "{path:?}"
            );
        }
        assert!(PathKeys::new("p", &fences, "a/b/c/d/e/f/g/h").is_ok());
    }

    #[test]
    fn a_fenced_resources_keys_share_its_tag_and_no_other_primitives() {
        let fences = Fences::per_slot("p");
        for name in ["seat:7", "a{b}c", "%7B", "123"] {
            let keys = FencedKeys::new("p", name).expect("valid name");
            let tag = hash_tag(&keys.values).to_owned();
            assert_eq!(keys.values, format!("p:fenced:{{{tag}}}"));
            assert_eq!(keys.guard, format!("p:fenced-guard:{{{tag}}}"));
            assert!(!tag.contains(['{', '}']), "{tag}");
            let lock = LockKeys::new("p", &fences, name).expect("valid name");
            assert_eq!(hash_tag(&lock.lock), tag);
            // Never a fence key, a lock or another primitive's key, even for a name that is
            // a slot's tag ("123").
            for other in [&*lock.fence, &lock.lock, &lock.channel] {
                assert_ne!(other, &keys.guard);
                assert_ne!(other, &keys.values);
            }
        }
        assert!(FencedKeys::new("p", "").is_err());
        assert!(FencedKeys::new("p", &"x".repeat(MAX_NAME_LEN + 1)).is_err());
    }

    #[test]
    fn slots_are_redis_clusters() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot_of("123456789"), 0x31C3 % SLOTS);
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("{user1000}.following"), slot_of("user1000"));
        assert_eq!(slot_of("foo{}{bar}"), slot_of("foo{}{bar}"));
        assert_eq!(slot_of("foo{{bar}}zap"), slot_of("{bar"));
    }

    #[test]
    fn on_a_cluster_a_locks_fence_key_is_in_the_locks_slot() {
        let fences = Fences::per_slot("p");
        let mut seen = std::collections::HashSet::new();
        for i in 0..2000 {
            let name = format!("order:{i}{{x}}:%");
            let keys = LockKeys::new("p", &fences, &name).expect("valid name");
            assert_eq!(slot_of(&keys.fence), slot_of(&keys.lock), "{name}");
            assert_eq!(slot_of(&keys.channel), slot_of(&keys.lock), "{name}");
            assert!(keys.fence.starts_with("p:fence:{"));
            seen.insert(keys.fence.clone());
        }
        // One key per slot, shared by every name in it: never one per name.
        let again = LockKeys::new("p", &fences, "order:7{x}:%").expect("valid name");
        assert!(seen.contains(&again.fence));
        assert!(seen.len() <= usize::from(SLOTS));
        // Every slot has a tag, and the tag lands in it.
        for slot in (0..SLOTS).step_by(97).chain([SLOTS - 1]) {
            assert_eq!(slot_of_tag(slot_tag(slot).as_bytes()), slot);
        }
    }
}
