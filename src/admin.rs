//! The operators' view of a lock: whether it is held and for how long, and a way to free a
//! lock whose holder is stuck (ShedLock's and redis-py's users ask for both).
//!
//! What a lock's key holds is its holder's token (a secret, never shown), followed by a mark
//! once a waiter has asked to be woken. The fence is not stored with it (the holder is told
//! its fence at grant time), so it cannot be shown here.

use std::time::Duration;

use redis::aio::ConnectionLike;

use crate::Client;
use crate::error::{LockError, NodeFailure, StoreError};
use crate::keys::LockKeys;
use crate::store::{Held, Store};
use crate::token::Token;

/// What a lock's key says right now, as [`Client::lock_state`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockState {
    /// Nobody holds it.
    Free,
    /// A lease holds it, for `remaining_ttl` more unless its holder renews it (the watchdog
    /// does, every third of the ttl, while the holder is alive).
    Held {
        /// How long the key lives unless renewed.
        remaining_ttl: Duration,
        /// Whether a waiter has asked to be woken when it is released.
        waiters: bool,
    },
    /// Released, and kept for a waiter that has waited long (see "No starvation across
    /// clients" in the guide's [guarantees](crate::guide::guarantees)):
    /// free for anyone once `remaining_ttl` has passed (at most 250 ms).
    Reserved {
        /// How long the reservation lasts.
        remaining_ttl: Duration,
    },
}

/// A lock key's value, split: the holder's token and whether it is marked.
fn parse(value: &str) -> Option<(&str, bool)> {
    match value.as_bytes().last() {
        None => None,
        // A reservation holds '!' alone.
        Some(_) if value == "!" => None,
        Some(b'*' | b'!') => Some((&value[..value.len() - 1], true)),
        Some(_) => Some((value, false)),
    }
}

async fn value_and_ttl<C: ConnectionLike + Send>(
    conn: &mut C,
    key: &str,
) -> Result<Option<(String, Duration)>, StoreError> {
    let (value, pttl): (Option<String>, i64) =
        redis::pipe().get(key).pttl(key).query_async(conn).await?;
    Ok(match (value, u64::try_from(pttl)) {
        (Some(value), Ok(ms)) => Some((value, Duration::from_millis(ms))),
        // Gone, or expired between the two reads; a key of ours always has a ttl.
        _ => None,
    })
}

impl Client {
    /// Whether lock `name` is held now, and for how long unless renewed. A read, for
    /// operators and dashboards: by the time it returns the answer may have changed, so never
    /// decide to take a lock from it (acquire does that atomically). The holder's token is
    /// never shown; nor is its fence, which the store does not keep with the lock.
    ///
    /// On a Redlock quorum, the lock is held if a majority of nodes hold it for the same
    /// lease, for as long as that majority does.
    ///
    /// ```no_run
    /// # async fn example(client: distlock::Client) -> Result<(), distlock::LockError> {
    /// use distlock::LockState;
    /// match client.lock_state("settle:order-42").await? {
    ///     LockState::Held { remaining_ttl, .. } => println!("held for {remaining_ttl:?} more"),
    ///     LockState::Free | LockState::Reserved { .. } => println!("free"),
    ///     _ => {}
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LockError::InvalidName`]; [`LockError::Store`] when the store did not answer (on a
    /// quorum: fewer than a majority of nodes answered).
    pub async fn lock_state(&self, name: &str) -> Result<LockState, LockError> {
        let keys = self.lock_keys(name)?;
        Ok(match self.read_holder(&keys).await? {
            None => LockState::Free,
            Some((value, remaining_ttl)) => match parse(&value) {
                Some((_, marked)) => LockState::Held {
                    remaining_ttl,
                    // In memory every waiter is in this process and none marks the key.
                    waiters: marked
                        || (matches!(self.store(), Store::Memory(_))
                            && self.store().wakeups().waiters(&keys.channel) > 0),
                },
                None => LockState::Reserved { remaining_ttl },
            },
        })
    }

    /// Frees lock `name` whoever holds it, for operators (a holder stuck in a long body, a
    /// lock taken by a process you have stopped). Returns whether a lease held it.
    ///
    /// It releases the lease that holds it now, as that lease's own release would: its waiters
    /// are woken. The holder is not told at once: its lost signal fires at its watchdog's next
    /// renewal (within a third of its ttl), and until then it may still act as the holder. So
    /// only force a lock whose holder is gone or whose writes carry their fence (see the
    /// guide's [efficiency or correctness?](crate::guide::guarantees#efficiency-or-correctness)).
    /// A lock re-taken between the read and the release is left alone.
    ///
    /// # Errors
    /// As [`lock_state`](Self::lock_state).
    pub async fn force_unlock(&self, name: &str) -> Result<bool, LockError> {
        let keys = self.lock_keys(name)?;
        let Some((value, _)) = self.read_holder(&keys).await? else {
            return Ok(false);
        };
        let Some((token, _)) = parse(&value) else {
            return Ok(false);
        };
        let held = self
            .store()
            .release(&keys, &Token::from_stored(token))
            .await?;
        let forced = matches!(held, Held::Yes);
        if forced {
            tracing::info!(lock = %keys.name, "lock forced free by an operator");
        }
        Ok(forced)
    }

    /// The lock key's value and remaining ttl, if it exists.
    async fn read_holder(&self, keys: &LockKeys) -> Result<Option<(String, Duration)>, StoreError> {
        let key = keys.lock.as_str();
        match self.store() {
            Store::Memory(m) => Ok(m.value_and_ttl(key)),
            Store::Redis(r) => value_and_ttl(&mut r.connection(), key).await,
            Store::Cluster(c) => value_and_ttl(&mut c.connection(), key).await,
            Store::Quorum(q) => {
                let nodes = q.named_connections();
                let reads = nodes.into_iter().map(|(name, mut conn)| async move {
                    (name, value_and_ttl(&mut conn, key).await)
                });
                let answers = futures_util::future::join_all(reads).await;
                let mut failures = Vec::new();
                let mut seen: Vec<(String, Duration)> = Vec::new();
                let total = answers.len();
                for (node, answer) in answers {
                    match answer {
                        Ok(Some(found)) => seen.push(found),
                        Ok(None) => {}
                        Err(err) => failures.push(NodeFailure {
                            node,
                            error: err.to_string(),
                        }),
                    }
                }
                let needed = q.majority();
                if total - failures.len() < needed {
                    return Err(StoreError::NoQuorum {
                        nodes: total,
                        needed,
                        failures,
                    });
                }
                Ok(majority_holder(&seen, needed))
            }
        }
    }
}

/// The value a majority of nodes hold for the same lease (marks aside), and how long that
/// majority lasts: the `needed`-th longest of their ttls.
fn majority_holder(seen: &[(String, Duration)], needed: usize) -> Option<(String, Duration)> {
    for (value, _) in seen {
        let token = parse(value).map_or(value.as_str(), |(t, _)| t);
        let mut ttls: Vec<Duration> = seen
            .iter()
            .filter(|(v, _)| parse(v).map_or(v.as_str(), |(t, _)| t) == token)
            .map(|(_, ttl)| *ttl)
            .collect();
        if ttls.len() >= needed {
            ttls.sort_unstable_by(|a, b| b.cmp(a));
            return Some((value.clone(), ttls[needed - 1]));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_splits_into_token_and_mark() {
        assert_eq!(parse("abc"), Some(("abc", false)));
        assert_eq!(parse("abc*"), Some(("abc", true)));
        assert_eq!(parse("abc!"), Some(("abc", true)));
        assert_eq!(parse("!"), None);
        assert_eq!(parse(""), None);
    }

    #[test]
    fn a_quorum_holds_while_its_majority_does() {
        let ms = Duration::from_millis;
        let seen = vec![
            ("t1".to_owned(), ms(900)),
            ("t1*".to_owned(), ms(500)),
            ("t2".to_owned(), ms(800)),
        ];
        assert_eq!(majority_holder(&seen, 2), Some(("t1".to_owned(), ms(500))));
        assert_eq!(majority_holder(&seen, 3), None);
        assert_eq!(majority_holder(&seen[2..], 2), None);
    }
}
