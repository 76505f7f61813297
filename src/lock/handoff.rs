//! Hand-off: a holder that releases a lock some waiter of its own client is queued for passes
//! the lock straight to that waiter (`handoff.lua`: one round trip that swaps the token and
//! mints the waiter's fence), instead of releasing it, publishing a wake-up and letting the
//! waiter come back for it. A contended lock then changes hands in one round trip, not two
//! plus a pub/sub message. A waiter queues once it has found the lock busy twice (its first
//! attempt, and the one after subscribing), and is served in queue order; a waiter woken by
//! a release message may still get there first.
//!
//! Waiters of other clients cannot be handed the lock. So that hand-offs alone cannot keep
//! them out, a lock is handed off at most [`MAX_IN_ROW`] times in a row (the count travels
//! with the lease); the next release frees it, which wakes the waiters that marked it, of
//! every client, to race for it. No order between clients is promised, as before hand-offs:
//! a releaser that asks again at once usually wins that race.
//!
//! Each hand-off installs a fresh token the releaser picks. A grant nobody takes (the waiter
//! gave up while it was on the wire, or before it read it) is released in the background. A
//! hand-off whose outcome is unknown (a store error, or the releaser was dropped) tells the
//! waiter to retry with that token, which the acquire script recognises as a grant to retry,
//! and releases the releaser's own token if it still holds the lock.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::lease::{LeaseShared, release_in_background};
use crate::error::StoreError;
use crate::keys::LockKeys;
use crate::store::{HandoffReply, Held};
use crate::token::Token;
use crate::{Capability, Client};

/// The most hand-offs of one lock in a row before an ordinary release gives the waiters of
/// other clients a chance.
pub(crate) const MAX_IN_ROW: u32 = 8;

/// The local waiters of one client, per lock key.
#[derive(Default)]
pub(crate) struct Handoffs {
    lines: Mutex<HashMap<String, VecDeque<Slot>>>,
    next_id: AtomicU64,
}

/// A waiter as the releaser sees it.
struct Slot {
    id: u64,
    ttl: Duration,
    tx: oneshot::Sender<Handed>,
}

/// What a releaser tells a waiter.
pub(crate) enum Handed {
    /// The lock is the waiter's, under this token and fence; its ttl started no earlier than
    /// `sent_at`.
    Granted {
        token: Token,
        fence: u64,
        sent_at: Instant,
        /// Hand-offs in a row, this one included.
        in_row: u32,
    },
    /// Try again now (the lock was released, or the hand-off failed), with this token if the
    /// hand-off may have given it the lock.
    Retry { token: Option<Token> },
}

impl Handoffs {
    fn lines(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<Slot>>> {
        self.lines.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waiters queued, over every lock (a lock's queue goes when its last waiter does).
    #[cfg(feature = "test-util")]
    pub(crate) fn queued(&self) -> usize {
        self.lines().values().map(VecDeque::len).sum()
    }

    /// The next live waiter queued for `lock`, taken off its queue.
    fn next(&self, lock: &str) -> Option<Slot> {
        let mut lines = self.lines();
        let queue = lines.get_mut(lock)?;
        let slot = std::iter::from_fn(|| queue.pop_front()).find(|slot| !slot.tx.is_closed());
        if queue.is_empty() {
            lines.remove(lock);
        }
        slot
    }
}

/// A waiter's place in the queue of its lock; dropping it leaves the queue, and releases a
/// grant handed to it that it did not take.
pub(crate) struct Ticket {
    client: Client,
    keys: LockKeys,
    id: u64,
    rx: oneshot::Receiver<Handed>,
}

impl Ticket {
    /// Queues a waiter for `keys` whose lease will have `ttl`.
    pub(crate) fn join(client: &Client, keys: &LockKeys, ttl: Duration) -> Self {
        let handoffs = &client.inner.handoffs;
        let id = handoffs.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        handoffs
            .lines()
            .entry(keys.lock.clone())
            .or_default()
            .push_back(Slot { id, ttl, tx });
        Self {
            client: client.clone(),
            keys: keys.clone(),
            id,
            rx,
        }
    }

    /// Waits for a releaser's word. A releaser that dropped its word unsent means "retry".
    pub(crate) async fn handed(&mut self) -> Handed {
        (&mut self.rx)
            .await
            .unwrap_or(Handed::Retry { token: None })
    }

    /// A releaser's word if one has arrived.
    pub(crate) fn try_handed(&mut self) -> Option<Handed> {
        match self.rx.try_recv() {
            Ok(handed) => Some(handed),
            Err(oneshot::error::TryRecvError::Empty) => None,
            Err(oneshot::error::TryRecvError::Closed) => Some(Handed::Retry { token: None }),
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        {
            let mut lines = self.client.inner.handoffs.lines();
            if let Some(queue) = lines.get_mut(&self.keys.lock) {
                queue.retain(|slot| slot.id != self.id);
                if queue.is_empty() {
                    lines.remove(&self.keys.lock);
                }
            }
        }
        // A grant (or a possible grant) sent but never read: give it back.
        self.rx.close();
        if let Ok(Handed::Granted { token, .. } | Handed::Retry { token: Some(token) }) =
            self.rx.try_recv()
        {
            release_in_background(self.client.clone(), self.keys.clone(), token);
        }
    }
}

/// Releases `shared` by handing it to the next local waiter, if one is queued and the lock
/// has not been handed off [`MAX_IN_ROW`] times in a row. `None`: release it the ordinary
/// way.
pub(crate) async fn pass_on(
    client: &Client,
    shared: &LeaseShared,
) -> Option<Result<Held, StoreError>> {
    let store = client.store();
    // A lease that needs replica acknowledgement is released the ordinary way: a hand-off
    // would give the waiter a grant no replica acknowledged.
    if store.supports(Capability::HandOff).is_err()
        || shared.handed_in_row >= MAX_IN_ROW
        || shared.replicas.is_some()
    {
        return None;
    }
    // Only a lock key can pass to a waiter (waiters queue for locks only).
    let keys = shared.lock_keys()?;
    let slot = client.inner.handoffs.next(&keys.lock)?;
    let mut word = Word {
        client,
        keys,
        tx: Some(slot.tx),
        from: shared.token.clone(),
        to: Token::generate(),
    };
    let sent_at = Instant::now();
    let reply = store.handoff(keys, &shared.token, &word.to, slot.ttl).await;
    Some(match reply {
        Ok(HandoffReply::Passed { fence }) => {
            crate::metrics::handed_off();
            word.send(Handed::Granted {
                token: word.to.clone(),
                fence,
                sent_at,
                in_row: shared.handed_in_row + 1,
            });
            Ok(Held::Yes)
        }
        Ok(HandoffReply::Not(held)) => {
            word.send(Handed::Retry { token: None });
            Ok(held)
        }
        Ok(HandoffReply::Reserved) => {
            // Released to the waiters that waited long, of every client; ours retries (and
            // takes it at once if it is one of them).
            word.send(Handed::Retry { token: None });
            Ok(Held::Yes)
        }
        Err(err) => Err(err),
    })
}

/// A releaser's word to one waiter. If the releaser is dropped or fails before it is sent,
/// the outcome is unknown: the waiter is told to retry with the token it may have been given,
/// and the releaser's token is released in case the lock is still its.
struct Word<'a> {
    client: &'a Client,
    keys: &'a LockKeys,
    tx: Option<oneshot::Sender<Handed>>,
    from: Token,
    to: Token,
}

impl Word<'_> {
    fn send(&mut self, handed: Handed) {
        let Some(tx) = self.tx.take() else {
            return;
        };
        // The waiter is gone: a grant it will never use is released now, not at its ttl.
        if let Err(Handed::Granted { token, .. }) = tx.send(handed) {
            release_in_background(self.client.clone(), self.keys.clone(), token);
        }
    }
}

impl Drop for Word<'_> {
    fn drop(&mut self) {
        let Some(tx) = self.tx.take() else {
            return;
        };
        release_in_background(self.client.clone(), self.keys.clone(), self.from.clone());
        if let Err(Handed::Retry { token: Some(token) }) = tx.send(Handed::Retry {
            token: Some(self.to.clone()),
        }) {
            release_in_background(self.client.clone(), self.keys.clone(), token);
        }
    }
}
