//! What a lease holds in the store (a lock key, a writer's key, entries of a holder set, an
//! entry on every level of a hierarchical lock's path), what its renewals and its release send, and giving back a hold nobody will use. Below every
//! other part of a lease: it needs the store, never the lease or the client.

use std::time::Duration;

use crate::error::StoreError;
use crate::keys::{LockKeys, PathKeys, RwKeys, SetKeys};
use crate::mode::HierarchyMode;
use crate::store::{EntriesRelease, Ownership, PathRelease, RenewItem, Replicas, Store};
use crate::token::Token;

/// What a lease holds in the store. It decides what the lease's renewals and its release
/// send; everything else about a lease (its timing, the watchdog, the lost signal, the fence)
/// is the same whatever it holds.
#[derive(Clone, Debug)]
pub(crate) enum Hold {
    /// A lock key holding the lease's token: a lock, one lock of a multi-lock.
    Key(LockKeys),
    /// The writer's key of a read-write lock: a lock key, whose release also wakes readers.
    Writer(RwKeys),
    /// `count` entries of a holder set: permits of a semaphore, or a reader of a read-write
    /// lock (one entry).
    Entries { keys: SetKeys, count: u32 },
    /// A hierarchical lock's path taken in `mode`: one entry `<token>:1` in a holder set of
    /// every level (the intention mode's above, `mode`'s on the last level).
    Path { keys: PathKeys, mode: HierarchyMode },
}

impl Hold {
    /// The name the user gave.
    pub(crate) fn name(&self) -> &str {
        match self {
            Self::Key(keys) => &keys.name,
            Self::Writer(keys) => &keys.writer.name,
            Self::Entries { keys, .. } => &keys.name,
            Self::Path { keys, .. } => &keys.name,
        }
    }

    /// The store key this hold is in (what an operator's force announces).
    pub(crate) fn key(&self) -> &str {
        match self {
            Self::Key(keys) => &keys.lock,
            Self::Writer(keys) => &keys.writer.lock,
            Self::Entries { keys, .. } => &keys.set,
            Self::Path { keys, mode } => keys
                .levels
                .last()
                .map_or("", |level| level.holders_of(*mode)),
        }
    }

    /// Whether the store still holds this hold for `token` (a read: the operators' force
    /// announced its key).
    pub(crate) async fn still_held(
        &self,
        store: &Store,
        token: &Token,
    ) -> Result<bool, StoreError> {
        let is_ours = |found: Option<(String, Duration)>| {
            found.is_some_and(|(value, _)| {
                let value = value.strip_suffix(['*', '!']).unwrap_or(&value);
                value == token.as_str()
            })
        };
        match self {
            Self::Key(keys) => Ok(is_ours(store.lock_value(&keys.lock).await?)),
            Self::Writer(keys) => Ok(is_ours(store.writer_value(&keys.writer.lock).await?)),
            Self::Entries { keys, .. } => Ok(store
                .set_holders(&keys.set)
                .await?
                .iter()
                .any(|h| h.token == token.as_str())),
            Self::Path { .. } => Ok(store
                .set_holders(self.key())
                .await?
                .iter()
                .any(|h| h.token == token.as_str())),
        }
    }

    /// Appends the renewals of this hold with `token`, asking for `ttl`, to `items`: one for
    /// most holds, one per level for a path. Returns how many it appended (see
    /// [`held_after`]).
    pub(crate) fn push_renewals<'a>(
        &'a self,
        items: &mut Vec<RenewItem<'a>>,
        token: &'a Token,
        ttl: Duration,
        replicas: Option<Replicas>,
    ) -> usize {
        let mut push = |key: &'a str, entries: u32| {
            items.push(RenewItem {
                key,
                token,
                ttl,
                entries,
                replicas,
            });
        };
        match self {
            Self::Key(keys) => push(&keys.lock, 0),
            Self::Writer(keys) => push(&keys.writer.lock, 0),
            Self::Entries { keys, count } => push(&keys.set, *count),
            Self::Path { keys, mode } => {
                let levels = keys.levels.len();
                for (i, level) in keys.levels.iter().enumerate() {
                    push(level.holders_of(mode.on_level(i, levels)), 1);
                }
                return levels;
            }
        }
        1
    }

    /// The renewals of this hold alone (see [`push_renewals`](Self::push_renewals)).
    pub(crate) fn renewals<'a>(
        &'a self,
        token: &'a Token,
        ttl: Duration,
        replicas: Option<Replicas>,
    ) -> Vec<RenewItem<'a>> {
        let mut items = Vec::with_capacity(1);
        self.push_renewals(&mut items, token, ttl, replicas);
        items
    }

    /// Gives the hold of `token` back: deletes the lock key, or removes the entries; wakes
    /// the waiters that listen.
    pub(crate) async fn release(
        &self,
        store: &Store,
        token: &Token,
    ) -> Result<Ownership, StoreError> {
        match self {
            Self::Key(keys) => store.release(keys, token).await,
            Self::Writer(keys) => store.release_writer(keys, token).await,
            Self::Entries { keys, count } => {
                let count = *count;
                store
                    .release_entries(&EntriesRelease { keys, token, count })
                    .await
            }
            Self::Path { keys, mode } => {
                let mode = *mode;
                store.release_path(&PathRelease { keys, mode, token }).await
            }
        }
    }
}

/// What renewals answered per hold, given how many items each hold pushed (`spans`, from
/// [`Hold::push_renewals`]): a hold is ours only if every one of its items was; else another
/// token's if any was, else expired. `None` if the answers do not add up to the spans.
pub(crate) fn held_after(spans: &[usize], answers: &[Ownership]) -> Option<Vec<Ownership>> {
    if spans.iter().sum::<usize>() != answers.len() {
        return None;
    }
    let mut rest = answers;
    let mut held = Vec::with_capacity(spans.len());
    for &span in spans {
        let (mine, after) = rest.split_at(span);
        rest = after;
        held.push(if mine.iter().all(|a| *a == Ownership::Ours) {
            Ownership::Ours
        } else if mine.contains(&Ownership::Theirs) {
            Ownership::Theirs
        } else {
            Ownership::Expired
        });
    }
    Some(held)
}

/// Best-effort release of a lock on the current runtime, bounded by the response timeout.
/// Without a runtime the key simply expires after its ttl.
pub(crate) fn release_in_background(store: Store, keys: LockKeys, token: Token) {
    release_hold_in_background(store, Hold::Key(keys), token);
}

/// Best-effort release of any hold on the current runtime (a grant nobody will use).
pub(crate) fn release_hold_in_background(store: Store, hold: Hold, token: Token) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        if let Err(err) = hold.release(&store, &token).await {
            tracing::debug!(lock = %hold.name(), error = %err, "background release failed; the key expires after its ttl");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::held_after;
    use crate::store::Ownership::{Expired, Ours, Theirs};

    #[test]
    fn a_hold_is_ours_only_if_every_one_of_its_renewals_was() {
        // A lock, a path of three levels with one gone, a path of two, a lock of another.
        let answers = [Ours, Ours, Expired, Ours, Ours, Ours, Theirs];
        assert_eq!(
            held_after(&[1, 3, 2, 1], &answers),
            Some(vec![Ours, Expired, Ours, Theirs])
        );
        assert_eq!(held_after(&[1, 3], &answers), None, "answers left over");
        assert_eq!(held_after(&[8], &answers), None, "answers missing");
    }
}
