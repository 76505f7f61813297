//! Hand-off: a holder that releases a lock some waiter of its own client is queued for passes
//! the lock straight to that waiter (`handoff.lua`: one round trip that swaps the token, and
//! mints the waiter's fence if its lease is eager; a lazy one mints when asked), instead of releasing it, publishing a wake-up and letting the
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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::hold::release_in_background;
use super::metrics;
use super::state::Terms;
use crate::error::StoreError;
use crate::keys::LockKeys;
use crate::store::{Capability, Handoff, HandoffReply, Ownership, Store};
use crate::token::Token;

/// The most hand-offs of one lock in a row before an ordinary release gives the waiters of
/// other clients a chance.
pub(crate) const MAX_IN_ROW: u32 = 8;

/// The local waiters of one client, per lock key. Cheap to clone: clones share the queues.
#[derive(Clone, Default)]
pub(crate) struct Handoffs(Arc<Lines>);

#[derive(Default)]
struct Lines {
    lines: Mutex<HashMap<String, VecDeque<Waiter>>>,
    /// Waiters queued, over every lock: a release with none queued (the uncontended case)
    /// looks no further.
    queued: AtomicUsize,
    next_id: AtomicU64,
}

/// A waiter as the releaser sees it.
struct Waiter {
    id: u64,
    ttl: Duration,
    /// The waiter's lease mints its fence with the grant (an eager lease).
    mint: bool,
    /// The holder identity the waiter's lease is to carry.
    identity: Arc<str>,
    tx: oneshot::Sender<Handed>,
}

/// What a releaser tells a waiter.
pub(crate) enum Handed {
    /// The lock is the waiter's, under this token (and fence, if the waiter's lease is
    /// eager); its ttl started no earlier than `sent_at`.
    Granted {
        token: Token,
        fence: Option<u64>,
        sent_at: Instant,
        /// Hand-offs in a row, this one included.
        in_row: u32,
    },
    /// Try again now (the lock was released, or the hand-off failed), with this token if the
    /// hand-off may have given it the lock.
    Retry { token: Option<Token> },
}

impl Handoffs {
    fn lines(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<Waiter>>> {
        self.0.lines.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waiters queued, over every lock (a lock's queue goes when its last waiter does).
    #[cfg(feature = "test-util")]
    pub(crate) fn queued(&self) -> usize {
        self.lines().values().map(VecDeque::len).sum()
    }

    /// The next live waiter queued for `lock`, taken off its queue.
    fn next(&self, lock: &str) -> Option<Waiter> {
        if self.0.queued.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut lines = self.lines();
        let queue = lines.get_mut(lock)?;
        let before = queue.len();
        let waiter = std::iter::from_fn(|| queue.pop_front()).find(|waiter| !waiter.tx.is_closed());
        let taken = before - queue.len();
        if queue.is_empty() {
            lines.remove(lock);
        }
        self.0.queued.fetch_sub(taken, Ordering::Release);
        waiter
    }
}

/// A waiter's place in the queue of its lock; dropping it leaves the queue, and releases a
/// grant handed to it that it did not take.
pub(crate) struct Ticket {
    handoffs: Handoffs,
    /// Where a grant handed to it that it did not take is released.
    store: Store,
    keys: LockKeys,
    id: u64,
    rx: oneshot::Receiver<Handed>,
}

impl Ticket {
    /// Queues a waiter for `keys` whose lease will be kept on `terms`, in `handoffs`, the
    /// registry of its client, whose store is `store`.
    pub(crate) fn join(
        handoffs: &Handoffs,
        store: &Store,
        keys: &LockKeys,
        terms: &Terms,
        identity: &Arc<str>,
    ) -> Self {
        let id = handoffs.0.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let mut lines = handoffs.lines();
        lines
            .entry(keys.lock.clone())
            .or_default()
            .push_back(Waiter {
                id,
                ttl: terms.grant_ttl(),
                mint: terms.fenced,
                identity: identity.clone(),
                tx,
            });
        // Counted under the lines' lock, with the entry.
        handoffs.0.queued.fetch_add(1, Ordering::Release);
        drop(lines);
        Self {
            handoffs: handoffs.clone(),
            store: store.clone(),
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
            let mut lines = self.handoffs.lines();
            if let Some(queue) = lines.get_mut(&self.keys.lock) {
                let before = queue.len();
                queue.retain(|waiter| waiter.id != self.id);
                let left = before - queue.len();
                if queue.is_empty() {
                    lines.remove(&self.keys.lock);
                }
                self.handoffs.0.queued.fetch_sub(left, Ordering::Release);
            }
        }
        // A grant (or a possible grant) sent but never read: give it back.
        self.rx.close();
        if let Ok(Handed::Granted { token, .. } | Handed::Retry { token: Some(token) }) =
            self.rx.try_recv()
        {
            release_in_background(self.store.clone(), self.keys.clone(), token);
        }
    }
}

/// Releases the lock `keys` held under `token` by handing it to the next waiter queued in
/// `handoffs`, if there is one and the lock has not been handed off [`MAX_IN_ROW`] times in a
/// row (`in_row`: hand-offs in a row that led to the lease releasing it). `None`: release it
/// the ordinary way.
pub(crate) async fn pass_on(
    handoffs: &Handoffs,
    store: &Store,
    keys: &LockKeys,
    token: &Token,
    in_row: u32,
) -> Option<Result<Ownership, StoreError>> {
    if store.supports(Capability::HandOff).is_err() || in_row >= MAX_IN_ROW {
        return None;
    }
    let waiter = handoffs.next(&keys.lock)?;
    let mut notice = Notice {
        store,
        keys,
        tx: Some(waiter.tx),
        from: token.clone(),
        to: Token::mint(&waiter.identity),
    };
    let sent_at = Instant::now();
    let reply = store
        .handoff(&Handoff {
            keys,
            from: token,
            to: &notice.to,
            ttl: waiter.ttl,
            mint: waiter.mint,
        })
        .await;
    Some(match reply {
        Ok(HandoffReply::Passed { fence }) => {
            metrics::handed_off();
            notice.send(Handed::Granted {
                token: notice.to.clone(),
                fence,
                sent_at,
                in_row: in_row + 1,
            });
            Ok(Ownership::Ours)
        }
        Ok(HandoffReply::Not(held)) => {
            notice.send(Handed::Retry { token: None });
            Ok(held)
        }
        Ok(HandoffReply::Reserved) => {
            // Released to the waiters that waited long, of every client; ours retries (and
            // takes it at once if it is one of them).
            notice.send(Handed::Retry { token: None });
            Ok(Ownership::Ours)
        }
        Err(err) => Err(err),
    })
}

/// A releaser's word to one waiter. If the releaser is dropped or fails before it is sent,
/// the outcome is unknown: the waiter is told to retry with the token it may have been given,
/// and the releaser's token is released in case the lock is still its.
struct Notice<'a> {
    store: &'a Store,
    keys: &'a LockKeys,
    tx: Option<oneshot::Sender<Handed>>,
    from: Token,
    to: Token,
}

impl Notice<'_> {
    fn send(&mut self, handed: Handed) {
        let Some(tx) = self.tx.take() else {
            return;
        };
        // The waiter is gone: a grant it will never use is released now, not at its ttl.
        if let Err(Handed::Granted { token, .. }) = tx.send(handed) {
            release_in_background(self.store.clone(), self.keys.clone(), token);
        }
    }
}

impl Drop for Notice<'_> {
    fn drop(&mut self) {
        let Some(tx) = self.tx.take() else {
            return;
        };
        release_in_background(self.store.clone(), self.keys.clone(), self.from.clone());
        if let Err(Handed::Retry { token: Some(token) }) = tx.send(Handed::Retry {
            token: Some(self.to.clone()),
        }) {
            release_in_background(self.store.clone(), self.keys.clone(), token);
        }
    }
}
