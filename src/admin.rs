//! The operators' view of a lock: whether it is held and for how long, and a way to free a
//! lock whose holder is stuck (ShedLock's and redis-py's users ask for both).
//!
//! What a lock's key holds is its holder's token (a secret, never shown), followed by a mark
//! once a waiter has asked to be woken. The fence is not stored with it (the holder is told
//! its fence at grant time), so it cannot be shown here.

use std::time::Duration;

use crate::client::Client;
use crate::error::{LockError, StoreError};
use crate::keys::LockKeys;
use crate::store::Held;
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
        let keys = self.core().lock_keys(name)?;
        Ok(match self.read_holder(&keys).await? {
            None => LockState::Free,
            Some((value, remaining_ttl)) => match parse(&value) {
                Some((_, marked)) => LockState::Held {
                    remaining_ttl,
                    // In memory every waiter is in this process and none marks the key.
                    waiters: marked
                        || (!self.store().waiters_mark_locks()
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
        let keys = self.core().lock_keys(name)?;
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

    /// The lock key's value and remaining ttl, if it exists (on a quorum, what a majority of
    /// the nodes hold for one lease, for as long as that majority does).
    async fn read_holder(&self, keys: &LockKeys) -> Result<Option<(String, Duration)>, StoreError> {
        self.store().lock_value(&keys.lock).await
    }
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
}
