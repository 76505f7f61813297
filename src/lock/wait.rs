//! Waiting for a grant: the one acquire loop every primitive shares (a lock, a semaphore's
//! permits, a read or a write hold, the locks of a multi-lock). A primitive is a [`Claim`]:
//! how to make one attempt, and which release channel can end the wait; the loop does the
//! waiting.
//!
//! After a busy reply the waiter subscribes (once) to the release channel, retries at once (a
//! release may have raced the subscription), then sleeps until a release wakes it or the
//! holder's remaining ttl (plus jitter) has passed, whichever comes first. A lost message
//! therefore costs at most one ttl, never the whole wait. If the subscription cannot be made,
//! it polls with jittered exponential backoff, still never sleeping past the holder's ttl.
//!
//! A listening waiter's attempts mark what they find busy as waited for, and a release
//! publishes only for a marked hold, so uncontended releases cost no PUBLISH. A waiter woken
//! while other local waiters still sleep marks the lock it is granted, for them (see
//! `acquire.lua`); waiters for permits or reads are all woken by a release instead, since
//! what it freed may serve more than one (see `wakeups.rs`).
//!
//! A lock's waiter also queues with its client for a hand-off: a release by a lease of the
//! same client passes the lock straight to the first queued waiter (see `handoff.rs`); and a
//! lock's waiter that has waited long marks the lock so that its release reserves it for such
//! waiters, of any client (see `acquire.lua`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::context::LockContext;
use super::handoff::{Handed, Ticket};
use super::hold::{Hold, release_hold_in_background};
use super::metrics::{self, Primitive, Waiting};
use super::state::{Grant, LeaseState, Terms};
use crate::error::{LockError, StoreError};
use crate::keys::LockKeys;
use crate::store::{AcquireReply, Capability, Store, Subscription, Waits};
use crate::token::Token;

/// A waiter that has waited this long marks the lock so that its next release reserves it for
/// such waiters, of any client (see `acquire.lua`): a client that releases and re-takes a lock
/// at once cannot keep another client's waiter out for longer than about this, plus a release
/// and a round trip.
pub(crate) const STARVE_AFTER: Duration = Duration::from_millis(20);

/// First and largest sleep of the polling fallback, by default.
pub(crate) const BACKOFF_MIN: Duration = Duration::from_millis(5);
pub(crate) const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// How a waiting acquire retries: the builders' `store_patience`, `max_attempts` and
/// `retry_backoff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retry {
    /// How long nothing but transient store errors is retried.
    pub(crate) patience: Duration,
    /// At most this many attempts (round trips that try to take it); `None`: no limit.
    pub(crate) max_attempts: Option<u32>,
    /// The first and the largest sleep between attempts that no wake-up ends: polling
    /// without pub/sub, and retries after store errors (each jittered, then doubled).
    pub(crate) backoff: (Duration, Duration),
}
/// How long a waiter keeps retrying when every attempt fails with a transient store error
/// (a Sentinel or cluster failover takes a few seconds; a longer run is an outage).
pub(crate) const OUTAGE_PATIENCE: Duration = Duration::from_secs(30);

/// How long to wait for a busy lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Try once; `Busy` if held.
    No,
    /// Up to this long; `Timeout` after.
    Upto(Duration),
    /// Until acquired (or an error).
    Forever,
}

impl Wait {
    /// `Duration::ZERO` tries once; `Duration::MAX` (or any wait too long to be a point in
    /// time) waits forever.
    pub(crate) fn from_duration(wait: Duration) -> Self {
        if wait.is_zero() {
            Self::No
        } else if Instant::now().checked_add(wait).is_none() || wait == Duration::MAX {
            Self::Forever
        } else {
            Self::Upto(wait)
        }
    }
}

/// What one attempt found.
pub(crate) enum Attempt<G> {
    Granted(G),
    /// Held by others, for at most this long unless renewed (`None`: unknown).
    Busy(Option<Duration>),
}

/// One thing the acquire loop can wait for.
pub(crate) trait Claim {
    /// What a successful attempt gives.
    type Granted;

    /// The name, for errors.
    fn name(&self) -> &str;

    /// What it is, for the metrics' `kind` label.
    fn kind(&self) -> Primitive;

    /// The release channel whose message can end the wait: after a busy attempt, the one of
    /// what it found busy (a multi-lock's changes with the lock found busy).
    fn channel(&self) -> &str;

    /// One attempt. A grant it may have made is given back if the attempt is cancelled or
    /// its outcome is unknown.
    async fn attempt(&mut self, waits: Waits) -> Result<Attempt<Self::Granted>, LockError>;

    /// For a lock: its keys, the terms its lease is kept on (the ttl a grant asks for,
    /// whether it mints its fence with the grant) and the holder identity a grant's token
    /// carries. Its waiter then queues for a hand-off from a releaser of its client, and one
    /// that waited long marks the lock for a reservation.
    fn lock(&self) -> Option<(&LockKeys, &Terms, &Arc<str>)> {
        None
    }

    /// A releaser's word to a waiter that queued (see [`lock`](Self::lock)): the grant, or
    /// `None` to try again at once.
    fn take(&mut self, handed: Handed) -> Option<Self::Granted> {
        let _ = handed;
        None
    }

    /// Whether a waiter that has waited long claims what it waits for, so that later
    /// arrivals cannot keep taking it first (a semaphore's permits; locks reserve instead).
    fn claims_when_starving(&self) -> bool {
        false
    }

    /// Whether several can hold at once (permits, reads): a release wakes every local waiter
    /// of such a claim's channel, since it may free enough for several of them, or for one
    /// that asks less than another.
    fn shared(&self) -> bool {
        false
    }

    /// Called before retrying after an attempt failed with a transient store error: that
    /// attempt may have been granted and is being given back in the background, so the next
    /// one must not ask with the same token (it could be released under it).
    fn fresh_token(&mut self) {}

    /// Woken by a release: an answer without asking the store (`Some`, taken as the
    /// attempt's), or `None` to attempt. A fair lock's waiter far back in its queue counts the
    /// release instead of asking, since only the first in line can take what it freed.
    fn pass_release(&mut self) -> Option<Attempt<Self::Granted>> {
        None
    }

    /// Called after an attempt the store answered "busy" (and no hand-off arrived): nothing
    /// was granted under the token. A claim's next attempt may then take a fresh one, minted
    /// as it is sent, so that the granted token says when that attempt was made (see
    /// `holder.rs`).
    fn after_busy(&mut self) {}
}

/// How a grant was reached, for the caller's trace.
pub(crate) struct Acquired {
    pub(crate) attempts: u32,
    pub(crate) started: Instant,
    pub(crate) woken_by: &'static str,
}

impl Acquired {
    pub(crate) fn waited_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// A release's wake-up taken by one local waiter. Only the woken waiter's next attempt marks
/// the lock for the waiters still asleep (see `acquire.lua`), so if that attempt never
/// answers (a store error, or the caller gives up), the wake-up is passed on to one of them.
struct WakeUp(Option<Arc<tokio::sync::Notify>>);

impl Drop for WakeUp {
    fn drop(&mut self) {
        if let Some(notify) = self.0.take() {
            notify.notify_one();
        }
    }
}

/// Attempts `claim` until it is granted, it errs, the wait is over, or the client closes for
/// shutdown (the loop is cancel-safe: a grant it made is given back).
///
/// # Errors
/// [`LockError::ShuttingDown`] once the client is closed, and those of [`attempt_until`].
pub(crate) async fn acquire<C: Claim>(
    client: &LockContext,
    claim: &mut C,
    wait: Wait,
    retry: &Retry,
) -> Result<(C::Granted, Acquired), LockError> {
    let closing = client.core().closing();
    let outcome = if closing.is_cancelled() {
        None
    } else {
        // Biased: an attempt answered on its first poll (the memory store) never registers
        // with the token, so an open client pays nothing for it.
        tokio::select! {
            biased;
            outcome = attempt_until(client, claim, wait, retry) => Some(outcome),
            () = closing.cancelled() => None,
        }
    };
    outcome.unwrap_or_else(|| {
        Err(LockError::ShuttingDown {
            name: claim.name().to_owned(),
        })
    })
}

/// Attempts `claim` until it is granted, it errs, or the wait is over.
///
/// # Errors
/// [`LockError::Busy`] (not waiting), [`LockError::Timeout`], and the attempt's own errors
/// ([transient](crate::StoreError::is_transient) ones are retried within the wait, for at most
/// `patience` of nothing but errors).
async fn attempt_until<C: Claim>(
    client: &LockContext,
    claim: &mut C,
    wait: Wait,
    retry: &Retry,
) -> Result<(C::Granted, Acquired), LockError> {
    let patience = retry.patience;
    let (backoff_min, backoff_max) = retry.backoff;
    let store = client.store();
    let started = Instant::now();
    let deadline = match wait {
        // `Wait::from_duration` made sure it fits.
        Wait::Upto(d) => started.checked_add(d),
        Wait::No | Wait::Forever => None,
    };
    let fair = claim.lock().is_some() || claim.claims_when_starving();
    let kind = claim.kind();
    // Counted as a waiter from its first busy answer it waits on, until this future ends.
    let mut waiting: Option<Waiting> = None;
    let mut subscription: Option<Subscription> = None;
    let mut subscribe_failed = false;
    let mut backoff = backoff_min;
    let mut attempts = 0u32;
    let mut woken_by = "start";
    // The release wake-up this waiter took, if its next attempt has not answered yet.
    let mut wake_up: Option<WakeUp> = None;
    // The last sleep was ended by a release's wake-up.
    let mut by_release = false;
    // This waiter's place in its client's queue for a hand-off (see `handoff.rs`).
    let mut ticket: Option<Ticket> = None;
    // Set once this waiter has waited long: releases reserved for such waiters wake it.
    let mut starving: Option<Arc<tokio::sync::Notify>> = None;
    // Set once this waiter has marked the lock as starving.
    let mut unmark: Option<Unmark> = None;
    // Since when every attempt has failed with a transient store error.
    let mut failing_since: Option<Instant> = None;
    let done = |granted, attempts, woken_by| {
        metrics::acquired(kind, started.elapsed());
        Ok((
            granted,
            Acquired {
                attempts,
                started,
                woken_by,
            },
        ))
    };
    loop {
        attempts += 1;
        let starves = fair && started.elapsed() >= STARVE_AFTER;
        if starves
            && starving.is_none()
            && let Some(subscription) = subscription.as_mut()
        {
            starving = Some(subscription.starve());
        }
        // Registered before the attempt, so a release that lands between the attempt and
        // the sleep still wakes us.
        let notify = subscription.as_ref().map(|s| s.notify().clone());
        let mut notified = notify.as_ref().map(|n| Box::pin(n.notified()));
        if let Some(n) = notified.as_mut() {
            n.as_mut().enable();
        }
        let mut notified_starving = starving.as_ref().map(|n| Box::pin(n.notified()));
        if let Some(n) = notified_starving.as_mut() {
            n.as_mut().enable();
        }

        // A listening waiter marks what it finds busy, so its release publishes; a lock's
        // waiter that has waited long marks it so that its release reserves it (acquire.lua).
        let waits = match &subscription {
            None if starves && subscribe_failed => Waits::Starving,
            None => Waits::No,
            Some(_) if starves => Waits::Starving,
            Some(s) if store.wakeups().waiters(s.channel()) > 1 => Waits::WithOthers,
            Some(_) => Waits::Listening,
        };
        // A starving attempt marks a busy lock on the server before its answer is read: the
        // take-back is armed before it is sent, so a waiter cancelled while the answer is
        // on its way still takes the mark back.
        if waits == Waits::Starving
            && unmark.is_none()
            && let Some((keys, _, _)) = claim.lock()
        {
            unmark = Some(Unmark {
                store: store.clone(),
                keys: keys.clone(),
                armed: true,
            });
        }
        let passed = if std::mem::take(&mut by_release) {
            claim.pass_release()
        } else {
            None
        };
        let attempt = match passed {
            // Not a try: `max_attempts` counts round trips.
            Some(passed) => {
                attempts -= 1;
                Ok(passed)
            }
            None => claim.attempt(waits).await,
        };
        let attempt = match attempt {
            Ok(attempt) => {
                failing_since = None;
                attempt
            }
            // A transient store error (a failover, a restart, a quorum that could not
            // decide) is retried within the wait, with backoff and a new token. The wait
            // ends with the last error once it runs out, or after `patience` of nothing but
            // errors.
            Err(LockError::Store(err)) if err.is_transient() => {
                let failing = *failing_since.get_or_insert_with(Instant::now);
                let remaining = match (wait, deadline) {
                    (Wait::No, _) => None,
                    (_, Some(deadline)) => deadline.checked_duration_since(Instant::now()),
                    (_, None) => Some(Duration::MAX),
                }
                .map(|r| r.min(patience.saturating_sub(failing.elapsed())));
                let Some(remaining) = remaining.filter(|r| !r.is_zero()) else {
                    return Err(LockError::Store(err));
                };
                if retry.max_attempts.is_some_and(|max| attempts >= max) {
                    return Err(LockError::Store(err));
                }
                tracing::debug!(error = %err, "store error while waiting; retrying");
                tokio::time::sleep((backoff + jitter_for(backoff)).min(remaining)).await;
                backoff = (backoff * 2).min(backoff_max);
                claim.fresh_token();
                continue;
            }
            Err(err) => return Err(err),
        };

        // Answered: granted, or busy and marked (the wake-up did its work).
        if let Some(mut used) = wake_up.take() {
            used.0 = None;
        }
        let pttl = match attempt {
            Attempt::Granted(granted) => {
                // Ours now: any mark went with the old holder's value.
                disarm(&mut unmark);
                return done(granted, attempts, woken_by);
            }
            Attempt::Busy(pttl) => pttl,
        };
        // Handed the lock while this attempt was on the wire (it found its own new token).
        if let Some(handed) = ticket.as_mut().and_then(Ticket::try_handed) {
            ticket = None;
            if let Some(granted) = claim.take(handed) {
                disarm(&mut unmark);
                return done(granted, attempts, "handoff");
            }
            continue;
        }
        claim.after_busy();
        let now = Instant::now();
        let busy_for = pttl.unwrap_or(backoff_max);
        let out_of_attempts = retry.max_attempts.is_some_and(|max| attempts >= max);
        let remaining = match (wait, deadline) {
            (Wait::No, _) => {
                metrics::busy(kind);
                return Err(LockError::Busy {
                    name: claim.name().to_owned(),
                    retry_after: busy_for,
                });
            }
            (_, Some(deadline)) if now < deadline && !out_of_attempts => Some(deadline - now),
            (_, None) if !out_of_attempts => Some(Duration::MAX),
            // The wait, or the attempts, ran out.
            _ => None,
        };
        let Some(remaining) = remaining else {
            if let Some(unmark) = unmark.as_mut() {
                let others = subscription
                    .as_ref()
                    .is_some_and(Subscription::others_starving);
                unmark.now(others).await;
            }
            metrics::timed_out(kind);
            return Err(LockError::Timeout {
                name: claim.name().to_owned(),
                waited: now - started,
            });
        };
        if waiting.is_none() {
            waiting = Some(Waiting::start(kind));
        }
        // A multi-lock waits on whichever lock it found busy: follow it.
        if subscription
            .as_ref()
            .is_some_and(|s| s.channel() != claim.channel())
        {
            subscription = None;
        }
        if subscription.is_none() && !subscribe_failed {
            match store
                .wakeups()
                .subscribe(claim.channel(), claim.shared())
                .await
            {
                Ok(s) => {
                    subscription = Some(s);
                    woken_by = "subscribed";
                    continue;
                }
                Err(err) => {
                    tracing::debug!(error = %err, "cannot subscribe to releases; polling");
                    subscribe_failed = true;
                }
            }
        }
        if ticket.is_none()
            && store.supports(Capability::HandOff).is_ok()
            && let Some((keys, terms, identity)) = claim.lock()
        {
            ticket = Some(Ticket::join(
                client.handoffs(),
                store,
                keys,
                terms,
                identity,
            ));
        }
        let jitter = jitter_for(busy_for);
        let mut sleep = busy_for.saturating_add(jitter);
        if subscription.is_none() {
            sleep = sleep.min(backoff + jitter_for(backoff));
            backoff = (backoff * 2).min(backoff_max);
        }
        let sleep = sleep.min(remaining);
        let handed = async {
            match ticket.as_mut() {
                Some(ticket) => ticket.handed().await,
                None => std::future::pending().await,
            }
        };
        let released = async {
            match notified {
                Some(n) => n.await,
                None => std::future::pending().await,
            }
        };
        let reserved = async {
            match notified_starving {
                Some(n) => n.await,
                None => std::future::pending().await,
            }
        };
        woken_by = tokio::select! {
            // A grant handed over wins a tie with the timer: it is already ours.
            biased;
            handed = handed => {
                ticket = None;
                if let Some(granted) = claim.take(handed) {
                    disarm(&mut unmark);
                    return done(granted, attempts, "handoff");
                }
                "release"
            }
            () = reserved => {
                wake_up = starving.as_ref().map(|n| WakeUp(Some(n.clone())));
                "reserved"
            }
            () = released => {
                wake_up = notify.as_ref().map(|n| WakeUp(Some(n.clone())));
                by_release = true;
                "release"
            }
            () = tokio::time::sleep(sleep) => "timer",
        };
    }
}

/// One attempt's round trip (`send`) and what its reply makes of it, for every claim whose
/// grant is one lease: a grant becomes the state of a lease holding `hold` under `token`,
/// kept on `terms`; a busy reply says for how long. If the attempt is cancelled, or fails
/// without a clear answer (a store error, a grant too few replicas acknowledged), a grant it
/// may have made is given back in the background.
pub(crate) async fn settle<F>(
    store: &Store,
    hold: Hold,
    token: &Token,
    terms: &Terms,
    send: impl FnOnce() -> F,
) -> Result<Attempt<Arc<LeaseState>>, LockError>
where
    F: Future<Output = Result<AcquireReply, StoreError>>,
{
    let mut guard = GrantGuard {
        store,
        hold,
        token,
        armed: true,
    };
    let sent_at = Instant::now();
    // An error (not replicated, no answer) leaves the guard armed: a grant it may have made
    // is released.
    let reply = send().await?;
    match reply {
        AcquireReply::Granted { fence } => {
            guard.armed = false;
            let grant = Grant {
                hold: guard.hold.clone(),
                token: token.clone(),
                fence,
                sent_at,
                answered_at: Instant::now(),
            };
            Ok(Attempt::Granted(Arc::new(LeaseState::new(
                grant, terms, store,
            ))))
        }
        AcquireReply::Busy { pttl } => {
            guard.armed = false;
            Ok(Attempt::Busy(pttl))
        }
        AcquireReply::Unreplicated { acked, wanted } => {
            Err(LockError::Store(StoreError::NotReplicated {
                acked,
                wanted,
            }))
        }
    }
}

/// Gives back a possible grant if an attempt is cancelled or fails without a clear answer.
struct GrantGuard<'a> {
    store: &'a Store,
    hold: Hold,
    token: &'a Token,
    armed: bool,
}

impl Drop for GrantGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            release_hold_in_background(self.store.clone(), self.hold.clone(), self.token.clone());
        }
    }
}

/// The starving mark a waiter left on a lock (see `unmark.lua`): taken back when it gives up,
/// at once when it times out, in the background when it is cancelled.
struct Unmark {
    store: Store,
    keys: LockKeys,
    armed: bool,
}

impl Unmark {
    /// The waiter timed out: take the mark back before saying so, unless another waiter of
    /// this client still starves on the lock (`others`). Best effort.
    async fn now(&mut self, others: bool) {
        if !std::mem::take(&mut self.armed) || others {
            return;
        }
        if let Err(err) = self.store.unmark(&self.keys).await {
            tracing::debug!(lock = %self.keys.name, error = %err, "could not take a starving mark back; the next release reserves the lock for a claim");
        }
    }
}

/// The waiter got the lock: there is no mark of its own to take back.
fn disarm(unmark: &mut Option<Unmark>) {
    if let Some(unmark) = unmark {
        unmark.armed = false;
    }
}

impl Drop for Unmark {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, keys) = (self.store.clone(), self.keys.clone());
        runtime.spawn(async move {
            // Another waiter of this client may still starve on it; its next attempt marks
            // the lock again.
            let _ = store.unmark(&keys).await;
        });
    }
}

/// A random extra sleep of up to a tenth of `base` (at most 50 ms), so waiters spread out.
fn jitter_for(base: Duration) -> Duration {
    let max = u64::try_from((base / 10).min(Duration::from_millis(50)).as_micros()).unwrap_or(0);
    Duration::from_micros(rand::random_range(0..=max))
}
