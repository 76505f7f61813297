//! Hand-off: a holder that releases a lock some waiter of its own client is waiting for passes
//! the lock straight to that waiter (`handoff.lua`: one round trip that swaps the token and
//! mints the waiter's fence), instead of releasing it, publishing a wake-up and letting the
//! waiter come back for it. A contended lock then changes hands in one round trip, not two
//! plus a pub/sub message, and local waiters are served in the order they started waiting.
//!
//! Waiters of other processes cannot be handed the lock. So that they are not starved by a
//! busy local queue, a lock is handed off at most [`MAX_IN_ROW`] times in a row; the next
//! release is an ordinary one, which wakes one waiter of every client to race for the lock.
//!
//! Each hand-off goes to a fresh token the releaser picks, so a grant can never be confused
//! with one the waiter made itself. A grant nobody takes (the waiter gave up while it was on
//! the wire, or before it read it) is released in the background; a hand-off whose outcome is
//! unknown (a store error) tells the waiter to retry with the token it may have been given,
//! which the acquire script recognises as its own.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::lease::{LeaseShared, release_in_background};
use crate::Client;
use crate::error::StoreError;
use crate::keys::LockKeys;
use crate::store::{HandoffReply, Held};
use crate::token::Token;

/// The most hand-offs of one lock in a row before an ordinary release gives the waiters of
/// other clients a chance.
pub(crate) const MAX_IN_ROW: u32 = 8;

/// The local waiters of one client, per lock key.
#[derive(Default)]
pub(crate) struct Handoffs {
    lines: Mutex<HashMap<String, Line>>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct Line {
    waiters: VecDeque<Slot>,
    /// Hand-offs since the last ordinary release of this lock by this client.
    in_row: u32,
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
    },
    /// Try again now (the lock was released, or the hand-off failed), with this token if the
    /// hand-off may have given it the lock.
    Retry { token: Option<Token> },
}

impl Handoffs {
    fn lines(&self) -> std::sync::MutexGuard<'_, HashMap<String, Line>> {
        self.lines.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waiters queued, over every lock.
    pub(crate) fn queued(&self) -> usize {
        self.lines().values().map(|line| line.waiters.len()).sum()
    }

    /// The next live waiter to hand `lock` to, unless it has been handed off
    /// [`MAX_IN_ROW`] times in a row (then the count starts again).
    fn next(&self, lock: &str) -> Option<Slot> {
        let mut lines = self.lines();
        let line = lines.get_mut(lock)?;
        let slot = if line.in_row < MAX_IN_ROW {
            std::iter::from_fn(|| line.waiters.pop_front()).find(|slot| !slot.tx.is_closed())
        } else {
            None
        };
        match slot {
            Some(slot) => {
                line.in_row += 1;
                Some(slot)
            }
            None => {
                line.in_row = 0;
                if line.waiters.is_empty() {
                    lines.remove(lock);
                }
                None
            }
        }
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
            .waiters
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
}

impl Drop for Ticket {
    fn drop(&mut self) {
        {
            let mut lines = self.client.inner.handoffs.lines();
            if let Some(line) = lines.get_mut(&self.keys.lock) {
                line.waiters.retain(|slot| slot.id != self.id);
                if line.waiters.is_empty() && line.in_row == 0 {
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

/// Releases `shared` by handing it to the next local waiter, if there is one (and the lock
/// has not been handed off too often in a row). `None`: nobody to hand it to; release it the
/// ordinary way.
pub(crate) async fn pass_on(
    client: &Client,
    shared: &LeaseShared,
) -> Option<Result<Held, StoreError>> {
    let store = client.store();
    if !store.hands_off() {
        return None;
    }
    let slot = client.inner.handoffs.next(&shared.keys.lock)?;
    let mut word = Word {
        client,
        keys: &shared.keys,
        tx: Some(slot.tx),
        to: Token::generate(),
    };
    let sent_at = Instant::now();
    let reply = store
        .handoff(&shared.keys, &shared.token, &word.to, slot.ttl)
        .await;
    Some(match reply {
        Ok(HandoffReply::Passed { fence }) => {
            word.send(Handed::Granted {
                token: word.to.clone(),
                fence,
                sent_at,
            });
            Ok(Held::Yes)
        }
        Ok(HandoffReply::Not(held)) => {
            word.send(Handed::Retry { token: None });
            Ok(held)
        }
        Err(err) => Err(err),
    })
}

/// A releaser's word to one waiter. If the releaser is dropped or fails before it is sent,
/// the waiter is told to retry with the token it may have been given.
struct Word<'a> {
    client: &'a Client,
    keys: &'a LockKeys,
    tx: Option<oneshot::Sender<Handed>>,
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
        if let Some(tx) = self.tx.take()
            && let Err(Handed::Retry { token: Some(token) }) = tx.send(Handed::Retry {
                token: Some(self.to.clone()),
            })
        {
            release_in_background(self.client.clone(), self.keys.clone(), token);
        }
    }
}
