//! Fair locks: a lock granted in the order its waiters arrived, across processes.
//!
//! A fair lock's key is the lock of its name (renewed, released, fenced, listed and forced as
//! any lock's); beside it, in its slot, a queue of waiters (`fair.lua`). Every attempt is the
//! queue's script: the lock is granted only when it is free and the caller is first in line (or
//! nobody queues), so a caller that tries once never jumps the queue either. A waiter keeps its
//! place by asking again at least every third of [`FAIR_CLAIM`] (it sleeps no longer than
//! that between attempts, even while the holder's ttl is long); a waiter that vanished loses
//! its place when its claim runs out, so it holds the queue up for at most [`FAIR_CLAIM`]. A
//! waiter that gives up (a timeout, a dropped future) leaves its place at once, waking the
//! next ones if it was first. A release wakes every local waiter of the lock, since only the
//! first in line can take it and it may be any of them; there is no hand-off (it would pass
//! the lock to a local waiter out of turn).

use std::sync::Arc;
use std::time::Duration;

use super::context::LockContext;
use super::hold::Hold;
use super::metrics::Primitive;
use super::state::{LeaseState, Terms};
use super::wait::{self, Attempt, Claim};
use crate::error::{LockError, StoreError};
use crate::keys::FairKeys;
use crate::store::{FAIR_CLAIM, FairCall, FairReply, FairTake, Store, Waits};
use crate::token::Token;

/// A queued waiter asks again at least this often, to keep its place.
const KEEP_PLACE: Duration = Duration::from_secs(1);
const _: () = assert!(KEEP_PLACE.as_millis() * 3 <= FAIR_CLAIM.as_millis());

/// One fair lock to take, for the acquire loop.
pub(crate) struct FairClaim<'a> {
    client: &'a LockContext,
    keys: FairKeys,
    terms: Terms,
    token: Token,
    identity: Arc<str>,
    /// This waiter's id in the queue: kept across attempts (tokens change), so it keeps its
    /// place.
    waiter: Box<str>,
    /// Whether it waits at all: a caller that tries once never joins the queue.
    joins: bool,
    /// It holds a place in the queue (to give up if it is not granted).
    queued: bool,
    /// How many waiters queued ahead of it at its last attempt, less the releases it has
    /// been woken by since: it asks again on a release only once at most one is ahead.
    ahead: u64,
    /// When it last asked the store (it asks again within [`KEEP_PLACE`] whatever the
    /// releases).
    asked: Option<tokio::time::Instant>,
    /// The last attempt was answered busy: the next one takes a fresh token.
    restamp: bool,
}

impl<'a> FairClaim<'a> {
    pub(crate) fn new(
        client: &'a LockContext,
        keys: FairKeys,
        terms: Terms,
        identity: Arc<str>,
        joins: bool,
    ) -> Self {
        Self {
            client,
            keys,
            terms,
            token: Token::mint(&identity),
            identity,
            waiter: format!("{:032x}", rand::random::<u128>()).into(),
            joins,
            queued: false,
            ahead: 0,
            asked: None,
            restamp: false,
        }
    }
}

impl Claim for FairClaim<'_> {
    type Granted = Arc<LeaseState>;

    fn name(&self) -> &str {
        &self.keys.lock.name
    }

    fn kind(&self) -> Primitive {
        Primitive::Lock
    }

    fn channel(&self) -> &str {
        &self.keys.lock.channel
    }

    async fn attempt(&mut self, _waits: Waits) -> Result<Attempt<Arc<LeaseState>>, LockError> {
        if std::mem::take(&mut self.restamp) {
            self.token = Token::mint(&self.identity);
        }
        let (store, keys, terms) = (self.client.store(), &self.keys, &self.terms);
        let call = FairCall::Take(FairTake {
            keys,
            token: &self.token,
            ttl: terms.grant_ttl(),
            waiter: &self.waiter,
            joins: self.joins,
            mint: terms.fenced,
            replicas: terms.replicas,
        });
        let hold = Hold::Key(keys.lock.clone());
        let ahead = std::sync::atomic::AtomicU64::new(0);
        self.asked = Some(tokio::time::Instant::now());
        let attempt = wait::settle(store, hold, &self.token, terms, || async {
            match store.fair(&call).await? {
                FairReply::Take { reply, ahead: n } => {
                    ahead.store(n, std::sync::atomic::Ordering::Relaxed);
                    Ok(reply)
                }
                other => Err(StoreError::Protocol {
                    message: format!("a fair lock's take answered {other:?}"),
                }),
            }
        })
        .await?;
        self.ahead = ahead.into_inner();
        Ok(match attempt {
            Attempt::Granted(granted) => {
                self.queued = false;
                Attempt::Granted(granted)
            }
            // A queued waiter asks again soon enough to keep its place, however long the
            // holder's ttl.
            Attempt::Busy(pttl) if self.joins => {
                self.queued = true;
                Attempt::Busy(Some(pttl.map_or(KEEP_PLACE, |p| p.min(KEEP_PLACE))))
            }
            busy @ Attempt::Busy(_) => busy,
        })
    }

    /// Every local waiter is woken by a release: the one first in line may be any of them.
    fn shared(&self) -> bool {
        true
    }

    /// A release moves the queue on by one: a waiter with more than one ahead of it counts
    /// the release and sleeps on, without a round trip (it still asks within [`KEEP_PLACE`],
    /// which also corrects its count when a waiter ahead of it left without a release).
    fn pass_release(&mut self) -> Option<Attempt<Arc<LeaseState>>> {
        let asked = self.asked?;
        let since = asked.elapsed();
        if !self.queued || self.ahead <= 1 || since >= KEEP_PLACE {
            return None;
        }
        self.ahead -= 1;
        Some(Attempt::Busy(Some(KEEP_PLACE - since)))
    }

    fn fresh_token(&mut self) {
        self.token = Token::mint(&self.identity);
    }

    fn after_busy(&mut self) {
        self.restamp = true;
    }
}

impl Drop for FairClaim<'_> {
    /// A waiter that was not granted gives its place up, so the next in line need not wait
    /// out its claim.
    fn drop(&mut self) {
        if !self.queued {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, keys, waiter): (Store, _, _) = (
            self.client.store().clone(),
            self.keys.clone(),
            std::mem::take(&mut self.waiter),
        );
        runtime.spawn(async move {
            let call = FairCall::Leave {
                keys: &keys,
                waiter: &waiter,
            };
            if let Err(err) = store.fair(&call).await {
                tracing::debug!(lock = %keys.lock.name, error = %err, "a fair lock's waiter could not leave its place; it runs out with its claim");
            }
        });
    }
}

/// How many waiters hold a place in the queue of fair lock `keys`.
pub(crate) async fn queued(store: &Store, keys: &FairKeys) -> Result<u64, StoreError> {
    match store.fair(&FairCall::Count { keys }).await? {
        FairReply::Count(count) => Ok(count),
        other => Err(StoreError::Protocol {
            message: format!("a fair lock's count answered {other:?}"),
        }),
    }
}

/// The keys of fair lock `name` on `client`.
pub(crate) fn keys_of(client: &LockContext, lock: crate::keys::LockKeys) -> FairKeys {
    FairKeys::of(client.core().prefix(), lock)
}
