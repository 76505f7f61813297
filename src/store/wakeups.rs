//! Release wake-ups: one registry per client that maps a lock's release channel to the local
//! waiters on it, and owns the pub/sub connection's subscription set.
//!
//! Waiters on the same lock share one channel subscription. A release message wakes **one**
//! local waiter (`Notify::notify_one`): waking them all would only make them race for the one
//! free lock. Waiters for something several can hold (a semaphore's permits, a read-write
//! lock's reads) say so when they subscribe, and a release on their channel wakes them all:
//! it may free enough for several of them, or for one that asks less than the one woken. A wake-up that finds no waiter is kept as a permit for the next one, and a
//! waiter that is dropped after being picked passes its wake-up on (tokio's `Notify` does
//! both), so no release is lost locally. Messages lost on the wire cost a waiter at most its
//! PTTL-bounded sleep. A waiter that has waited long also listens on a second `Notify` of its
//! channel, which a release that reserved the lock for such waiters (`!`) wakes first.
//!
//! # Who subscribes
//!
//! Waiters only say what they want: joining and leaving change a per-channel count under the
//! registry's lock, synchronously, so a waiter dropped at any point (even before its first
//! poll is over) leaves exactly what it added. The server's subscription set has one owner,
//! a **reconciler** task spawned on demand and never cancelled with a waiter: it compares what
//! is wanted (channels with waiters) with what the server has, sends `UNSUBSCRIBE` and
//! `SUBSCRIBE` for the difference, waits for the server's confirmations, and repeats until
//! the two agree, then exits. One reconciler at a time, one step after another, so an
//! `UNSUBSCRIBE` can never overtake a later `SUBSCRIBE` of the same channel, and a waiter
//! cancelled mid-subscribe can never leave the others on a channel nobody subscribed to.
//!
//! A waiter counts as listening only once the server has confirmed its channel: until then
//! it waits on the channel's confirmation (or learns that subscribing failed, and polls).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use tokio::sync::{Notify, watch};

use crate::error::StoreError;

/// What a pub/sub call returns.
pub(crate) type SubscribeFuture<'a> =
    Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + 'a>>;

/// What the registry needs from a pub/sub connection (plain channels on a single primary,
/// sharded ones on a cluster). Each call returns once the server has confirmed every channel
/// in it (or failed).
pub(crate) trait Subscriber: Send + Sync {
    fn subscribe(&self, channels: Vec<String>) -> SubscribeFuture<'_>;

    fn unsubscribe(&self, channels: Vec<String>) -> SubscribeFuture<'_>;
}

#[derive(Default)]
pub(crate) struct Wakeups {
    state: Mutex<State>,
    /// `None` for the in-memory store, whose releases call [`Wakeups::wake_one`] directly.
    link: OnceLock<Box<dyn Subscriber>>,
    /// A Redis store without a pub/sub connection: no release of another client would wake
    /// a waiter, so `subscribe` refuses and waiters poll.
    deaf: std::sync::atomic::AtomicBool,
    /// Revocation channels a watchdog listens on (see [`Wakeups::revocations`]), with the
    /// keys announced on them that it has not checked yet.
    revocations: Mutex<HashMap<String, Revoked>>,
}

/// Keys announced on one revocation channel, for its listener.
struct Revoked {
    keys: Vec<String>,
    notify: Arc<Notify>,
}

/// The most announced keys kept for a listener that has not come for them yet; beyond it
/// they are dropped (a holder whose key is dropped learns at its next renewal).
const MAX_REVOKED: usize = 4096;

#[derive(Default)]
struct State {
    channels: HashMap<String, Entry>,
    /// A reconciler task is running (or spawned).
    reconciling: bool,
}

struct Entry {
    notify: Arc<Notify>,
    /// Wakes the waiters that have waited long, first, when a release reserved the lock for
    /// them (a `!` message; see `acquire.lua`).
    starving_notify: Arc<Notify>,
    /// Waiters registered on the channel, confirmed or not.
    waiters: usize,
    /// Of those, how many wait for something several can hold: while there are any, a
    /// release wakes every waiter of the channel.
    shared: usize,
    /// Of those, how many have waited long.
    starving: usize,
    /// Whether the server has the subscription, as far as the reconciler knows.
    on_server: bool,
    /// What joiners waiting for the server are told.
    confirm: watch::Sender<Confirm>,
}

/// The state of a channel's subscription as its joiners see it.
#[derive(Clone, Debug)]
enum Confirm {
    /// Not (or no longer) confirmed: the reconciler will subscribe.
    Pending,
    /// The server confirmed it.
    Subscribed,
    /// Subscribing failed; the joiners waiting for it poll instead. A new joiner tries again.
    Failed(StoreError),
}

impl Entry {
    fn new() -> Self {
        Self {
            notify: Arc::new(Notify::new()),
            starving_notify: Arc::new(Notify::new()),
            waiters: 0,
            shared: 0,
            starving: 0,
            on_server: false,
            confirm: watch::Sender::new(Confirm::Pending),
        }
    }

    /// Wakes every waiter on the channel, starving or not.
    fn wake_all(&self) {
        self.notify.notify_waiters();
        self.starving_notify.notify_waiters();
    }
}

/// A waiter's registration on one channel; dropping it unregisters.
pub(crate) struct Subscription {
    wakeups: Arc<Wakeups>,
    channel: String,
    notify: Arc<Notify>,
    /// Set once the waiter has waited long (see [`Subscription::starve`]).
    starving: Option<Arc<Notify>>,
    /// The waiter waits for something several can hold.
    shared: bool,
}

impl Subscription {
    pub(crate) fn notify(&self) -> &Arc<Notify> {
        &self.notify
    }

    /// The channel this waiter listens on.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    /// The waiter has waited long: a release that reserves the lock for such waiters wakes
    /// it (through the returned `Notify`) before the others of its client.
    pub(crate) fn starve(&mut self) -> Arc<Notify> {
        if let Some(notify) = &self.starving {
            return notify.clone();
        }
        let mut state = self.wakeups.state();
        let notify = match state.channels.get_mut(&self.channel) {
            Some(entry) => {
                entry.starving += 1;
                entry.starving_notify.clone()
            }
            // Cannot happen while registered; a lone Notify then simply never fires.
            None => Arc::new(Notify::new()),
        };
        self.starving = Some(notify.clone());
        notify
    }

    /// Whether other waiters of this client that waited long wait on this channel.
    pub(crate) fn others_starving(&self) -> bool {
        let mine = usize::from(self.starving.is_some());
        self.wakeups
            .state()
            .channels
            .get(&self.channel)
            .is_some_and(|entry| entry.starving > mine)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.wakeups
            .leave(&self.channel, self.starving.is_some(), self.shared);
    }
}

impl Wakeups {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Marks the store as having no pub/sub connection (see `deaf`).
    pub(crate) fn set_deaf(&self) {
        self.deaf.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn set_link(&self, link: Box<dyn Subscriber>) {
        // Set once at construction; a second call would be a bug and is ignored.
        let _ = self.link.set(link);
    }

    /// Sets the wake-up link a constructor made; if it could make none, marks the store deaf
    /// (its waiters poll) and gives the error back, for the constructor to say so.
    pub(crate) fn link_or_deaf<L: Subscriber + 'static, E>(&self, link: Result<L, E>) -> Option<E> {
        match link {
            Ok(link) => {
                self.set_link(Box::new(link));
                None
            }
            Err(err) => {
                self.set_deaf();
                Some(err)
            }
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a waiter on `channel` and returns once the server has confirmed the
    /// channel's subscription. If subscribing fails, the error is returned (the waiter is
    /// unregistered) and the caller falls back to polling with backoff. A `shared` waiter
    /// waits for something several can hold (see the module docs).
    pub(crate) async fn subscribe(
        self: &Arc<Self>,
        channel: &str,
        shared: bool,
    ) -> Result<Subscription, StoreError> {
        if self.deaf.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(StoreError::Config {
                message: "no pub/sub connection for release wake-ups".to_owned(),
            });
        }
        let (notify, confirm) = {
            let mut state = self.state();
            let entry = state
                .channels
                .entry(channel.to_owned())
                .or_insert_with(Entry::new);
            entry.waiters += 1;
            entry.shared += usize::from(shared);
            let notify = entry.notify.clone();
            let confirmed =
                matches!(*entry.confirm.borrow(), Confirm::Subscribed) && entry.on_server;
            if self.link.get().is_none() || confirmed {
                (notify, None)
            } else {
                if matches!(*entry.confirm.borrow(), Confirm::Failed(_)) {
                    entry.confirm.send_replace(Confirm::Pending);
                }
                let rx = entry.confirm.subscribe();
                self.start_reconciler(state);
                (notify, Some(rx))
            }
        };
        // Built before the await, so a cancelled or failed subscribe still unregisters.
        let subscription = Subscription {
            wakeups: self.clone(),
            channel: channel.to_owned(),
            notify,
            starving: None,
            shared,
        };
        let Some(mut confirm) = confirm else {
            return Ok(subscription);
        };
        loop {
            let seen = confirm.borrow_and_update().clone();
            match seen {
                Confirm::Subscribed => return Ok(subscription),
                Confirm::Failed(err) => return Err(err),
                Confirm::Pending => {
                    if confirm.changed().await.is_err() {
                        return Err(StoreError::unreachable("the wake-up registry went away"));
                    }
                }
            }
        }
    }

    fn leave(self: &Arc<Self>, channel: &str, starving: bool, shared: bool) {
        let mut state = self.state();
        let Some(entry) = state.channels.get_mut(channel) else {
            return;
        };
        entry.waiters = entry.waiters.saturating_sub(1);
        if shared {
            entry.shared = entry.shared.saturating_sub(1);
        }
        if starving {
            entry.starving = entry.starving.saturating_sub(1);
        }
        if entry.waiters > 0 {
            return;
        }
        if self.link.get().is_none() || (!entry.on_server && !state.reconciling) {
            // Nothing on the server to undo. (With the reconciler running, the entry is its
            // to remove: a subscribe of it may be on the wire.)
            state.channels.remove(channel);
            return;
        }
        self.start_reconciler(state);
    }

    /// Claims the reconciler (see [`claim_reconciler`](Self::claim_reconciler)), lets go of
    /// `state`, and starts the claim.
    fn start_reconciler(self: &Arc<Self>, mut state: MutexGuard<'_, State>) {
        let reconciler = self.claim_reconciler(&mut state);
        drop(state);
        start(reconciler);
    }

    /// Claims the reconciler unless it is running (it re-reads the wanted set each round);
    /// the caller [`start`]s the claim once it has let go of the state's lock. (Spawning under
    /// the lock could deadlock: a runtime that is shutting down drops the task at once, and
    /// the dropped claim takes the lock to give the reconciler back.)
    #[must_use]
    fn claim_reconciler(self: &Arc<Self>, state: &mut State) -> Option<Reconciling> {
        if state.reconciling || self.link.get().is_none() {
            return None;
        }
        // No runtime to run it on: the difference is settled at the next claim.
        tokio::runtime::Handle::try_current().ok()?;
        state.reconciling = true;
        Some(Reconciling {
            wakeups: self.clone(),
            armed: true,
        })
    }

    /// Brings the server's subscription set to the wanted one, round after round, until they
    /// agree; then marks the reconciler stopped (under the same lock that decided it).
    async fn reconcile(&self) {
        let Some(link) = self.link.get() else {
            return;
        };
        loop {
            let (subscribe, unsubscribe) = {
                let mut state = self.state();
                let (subscribe, unsubscribe) = state.plan();
                if subscribe.is_empty() && unsubscribe.is_empty() {
                    state.reconciling = false;
                    return;
                }
                (subscribe, unsubscribe)
            };
            if !unsubscribe.is_empty() {
                let result = link.unsubscribe(unsubscribe.clone()).await;
                if let Err(err) = &result {
                    // The connection failed: it has no subscriptions until it reconnects, and
                    // a stale one it may bring back is harmless (its messages wake nobody).
                    tracing::debug!(error = %err, "unsubscribe failed");
                }
                let mut state = self.state();
                for channel in &unsubscribe {
                    if let Some(entry) = state.channels.get_mut(channel) {
                        entry.on_server = false;
                    }
                }
            }
            if !subscribe.is_empty() {
                let result = link.subscribe(subscribe.clone()).await;
                let mut state = self.state();
                for channel in &subscribe {
                    if let Some(entry) = state.channels.get_mut(channel) {
                        match &result {
                            Ok(()) => {
                                entry.on_server = true;
                                entry.confirm.send_replace(Confirm::Subscribed);
                            }
                            Err(err) => {
                                entry.confirm.send_replace(Confirm::Failed(err.clone()));
                            }
                        }
                    }
                }
            }
        }
    }

    /// The server dropped its subscription to `channel` (a sharded channel whose slot moved,
    /// or our own unsubscribe confirmed): if waiters still want it, wake them (a release may
    /// have been missed meanwhile) and subscribe again, where the slot lives now.
    pub(crate) fn dropped(self: &Arc<Self>, channel: &str) {
        let mut state = self.state();
        let Some(entry) = state.channels.get_mut(channel) else {
            return;
        };
        if !entry.on_server {
            return;
        }
        entry.on_server = false;
        if entry.waiters == 0 {
            return;
        }
        entry.confirm.send_replace(Confirm::Pending);
        entry.wake_all();
        self.start_reconciler(state);
    }

    /// The pub/sub connection moved to another server (a Sentinel failover): nothing is
    /// subscribed there yet. Every channel with waiters is subscribed again, and every
    /// waiter is woken, since releases may have been missed meanwhile.
    pub(crate) fn resubscribe_all(self: &Arc<Self>) {
        let mut state = self.state();
        for entry in state.channels.values_mut() {
            entry.on_server = false;
            if entry.waiters > 0 {
                entry.confirm.send_replace(Confirm::Pending);
            }
            entry.wake_all();
        }
        self.start_reconciler(state);
    }

    /// How many local waiters are registered on `channel`.
    pub(crate) fn waiters(&self, channel: &str) -> usize {
        self.state()
            .channels
            .get(channel)
            .map_or(0, |entry| entry.waiters)
    }

    /// A release was published on `channel`: wake one local waiter. If the release reserved
    /// the lock for waiters that have waited long (`reserved`), wake one of those if this
    /// client has any (only they can take it), else one of the others, who will find the
    /// lock reserved and retry when the reservation runs out.
    pub(crate) fn wake_one(&self, channel: &str, reserved: bool) {
        if let Some(entry) = self.state().channels.get(channel) {
            if entry.shared > 0 {
                entry.notify.notify_waiters();
            } else if reserved && entry.starving > 0 {
                entry.starving_notify.notify_one();
            } else {
                entry.notify.notify_one();
            }
        }
    }

    /// The pub/sub connection dropped and messages may have been missed: every waiter retries.
    /// Makes `channels` revocation channels (`<prefix>:revoked`, on which an operator's
    /// force announces the key it freed, and the keyspace notifications of deletions a
    /// client may watch): their messages are kept for [`take_revoked`](Self::take_revoked)
    /// and wake the returned `Notify`, shared by them, instead of waking waiters. The caller
    /// subscribes to them as a waiter would, to have the server send them.
    pub(crate) fn revocations(&self, channels: &[String]) -> Arc<Notify> {
        let notify = Arc::new(Notify::new());
        let mut revocations = self.revoked_state();
        for channel in channels {
            revocations
                .entry(channel.clone())
                .or_insert_with(|| Revoked {
                    keys: Vec::new(),
                    notify: notify.clone(),
                });
        }
        // A channel registered before (by a client sharing this store) keeps its own.
        channels
            .first()
            .and_then(|c| revocations.get(c))
            .map_or(notify, |r| r.notify.clone())
    }

    /// The keys announced on revocation channels `channels` since the last call.
    pub(crate) fn take_revoked(&self, channels: &[String]) -> Vec<String> {
        let mut revocations = self.revoked_state();
        let mut keys = Vec::new();
        for channel in channels {
            if let Some(revoked) = revocations.get_mut(channel) {
                keys.append(&mut revoked.keys);
            }
        }
        keys
    }

    /// A message on `channel`: if it is a revocation channel, keeps `key` for its listener
    /// and returns true.
    pub(crate) fn revoked(&self, channel: &str, key: &str) -> bool {
        let mut revocations = self.revoked_state();
        let Some(revoked) = revocations.get_mut(channel) else {
            return false;
        };
        if revoked.keys.len() < MAX_REVOKED {
            revoked.keys.push(key.to_owned());
        }
        revoked.notify.notify_one();
        true
    }

    fn revoked_state(&self) -> MutexGuard<'_, HashMap<String, Revoked>> {
        self.revocations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn wake_all(&self) {
        for entry in self.state().channels.values() {
            entry.wake_all();
        }
    }

    /// How many channels have local waiters (for leak checks in tests).
    #[cfg(feature = "test-util")]
    pub(crate) fn channels_in_use(&self) -> usize {
        let revocations = self.revoked_state();
        self.state()
            .channels
            .iter()
            .filter(|(channel, entry)| entry.waiters > 0 && !revocations.contains_key(*channel))
            .count()
    }
}

impl State {
    /// One round of the reconciler: the channels to subscribe (wanted, not on the server,
    /// not failed) and to unsubscribe (on the server, not wanted). Removes entries that are
    /// neither wanted nor on the server, and confirms at once a channel wanted again before
    /// its unsubscribe was sent.
    fn plan(&mut self) -> (Vec<String>, Vec<String>) {
        let mut subscribe = Vec::new();
        let mut unsubscribe = Vec::new();
        self.channels.retain(|channel, entry| {
            let wanted = entry.waiters > 0;
            match (wanted, entry.on_server) {
                (false, false) => return false,
                (false, true) => {
                    // Joiners from now on wait for the subscription that follows.
                    entry.confirm.send_replace(Confirm::Pending);
                    unsubscribe.push(channel.clone());
                }
                (true, false) => {
                    if matches!(*entry.confirm.borrow(), Confirm::Pending) {
                        subscribe.push(channel.clone());
                    }
                }
                (true, true) => {
                    if !matches!(*entry.confirm.borrow(), Confirm::Subscribed) {
                        entry.confirm.send_replace(Confirm::Subscribed);
                    }
                }
            }
            true
        });
        (subscribe, unsubscribe)
    }
}

/// Runs a claimed reconciler (see `Wakeups::claim_reconciler`), with the state's lock free.
fn start(reconciler: Option<Reconciling>) {
    let Some(mut guard) = reconciler else {
        return;
    };
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(async move {
                guard.wakeups.reconcile().await;
                guard.disarm();
            });
        }
        // Gone since the claim: the guard gives the reconciler back as it drops.
        Err(_) => drop(guard),
    }
}

/// Carried by the reconciler task: if the task is dropped unfinished (its runtime shut
/// down, even inside `spawn`), the next claim starts a new one, and the joiners waiting on
/// it are told to poll.
struct Reconciling {
    wakeups: Arc<Wakeups>,
    armed: bool,
}

impl Reconciling {
    /// The reconciler finished: it cleared the flag itself, under the lock that decided it.
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for Reconciling {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut state = self.wakeups.state();
        state.reconciling = false;
        for entry in state.channels.values_mut() {
            if matches!(*entry.confirm.borrow(), Confirm::Pending) {
                entry
                    .confirm
                    .send_replace(Confirm::Failed(StoreError::unreachable(
                        "the runtime is shutting down",
                    )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link whose every (un)subscribe succeeds at once.
    struct Agreeable;

    impl Subscriber for Agreeable {
        fn subscribe(&self, _channels: Vec<String>) -> SubscribeFuture<'_> {
            Box::pin(async { Ok(()) })
        }

        fn unsubscribe(&self, _channels: Vec<String>) -> SubscribeFuture<'_> {
            Box::pin(async { Ok(()) })
        }
    }

    /// A waiter's task dropped by its runtime's shutdown unsubscribes without deadlocking:
    /// the reconciler it starts is dropped inside `spawn` (the runtime takes no new task),
    /// and giving it back takes the registry's lock, which must not be held then.
    #[test]
    fn a_waiter_dropped_by_its_runtime_shutting_down_does_not_deadlock() {
        let wakeups = Wakeups::new();
        wakeups.set_link(Box::new(Agreeable));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let subscribed = runtime.block_on({
            let wakeups = wakeups.clone();
            async move { wakeups.subscribe("release:x", false).await }
        });
        let subscription = subscribed.expect("subscribed");
        runtime.spawn(async move {
            let _held = subscription;
            std::future::pending::<()>().await;
        });
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop(runtime);
            let _ = done.send(());
        });
        finished
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the runtime shut down (no deadlock on the registry's lock)");
        let state = wakeups.state();
        assert!(!state.reconciling, "the reconciler was given back");
    }
}
