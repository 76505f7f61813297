//! Release wake-ups: one registry per client that maps a lock's release channel to the local
//! waiters on it.
//!
//! Waiters on the same lock share one channel subscription (the first subscribes, the last
//! unsubscribes). A release message wakes **one** local waiter (`Notify::notify_one`): waking
//! them all would only make them race for the one free lock. A wake-up that finds no waiter is
//! kept as a permit for the next one, and a waiter that is dropped after being picked passes
//! its wake-up on (tokio's `Notify` does both), so no release is lost locally. Messages lost on
//! the wire cost a waiter at most its PTTL-bounded sleep.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use tokio::sync::Notify;

use crate::error::StoreError;

/// What the registry needs from a pub/sub connection.
pub(crate) trait Subscriber: Send + Sync {
    fn subscribe(
        &self,
        channel: String,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + '_>>;
    /// Best-effort, in the background.
    fn unsubscribe(&self, channel: String);
}

#[derive(Default)]
pub(crate) struct Wakeups {
    channels: Mutex<HashMap<String, Entry>>,
    /// `None` for the in-memory store, whose releases call [`Wakeups::wake_one`] directly.
    link: OnceLock<Box<dyn Subscriber>>,
}

struct Entry {
    notify: Arc<Notify>,
    waiters: usize,
}

/// A waiter's registration on one channel; dropping it unregisters.
pub(crate) struct Subscription {
    wakeups: Arc<Wakeups>,
    channel: String,
    notify: Arc<Notify>,
}

impl Subscription {
    pub(crate) fn notify(&self) -> &Arc<Notify> {
        &self.notify
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.wakeups.leave(&self.channel);
    }
}

impl Wakeups {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub(crate) fn set_link(&self, link: Box<dyn Subscriber>) {
        // Set once at construction; a second call would be a bug and is ignored.
        let _ = self.link.set(link);
    }

    /// Registers a waiter on `channel`; the first waiter subscribes on the server. If that
    /// fails, the error is returned and the caller falls back to polling with backoff.
    pub(crate) async fn subscribe(
        self: &Arc<Self>,
        channel: &str,
    ) -> Result<Subscription, StoreError> {
        let (notify, first) = {
            let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
            let entry = channels.entry(channel.to_owned()).or_insert_with(|| Entry {
                notify: Arc::new(Notify::new()),
                waiters: 0,
            });
            entry.waiters += 1;
            (entry.notify.clone(), entry.waiters == 1)
        };
        // Built before the await, so a cancelled or failed subscribe still unregisters.
        let subscription = Subscription {
            wakeups: self.clone(),
            channel: channel.to_owned(),
            notify,
        };
        if first && let Some(link) = self.link.get() {
            link.subscribe(channel.to_owned()).await?;
        }
        Ok(subscription)
    }

    fn leave(&self, channel: &str) {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(entry) = channels.get_mut(channel) else {
            return;
        };
        entry.waiters -= 1;
        if entry.waiters == 0 {
            channels.remove(channel);
            drop(channels);
            if let Some(link) = self.link.get() {
                link.unsubscribe(channel.to_owned());
            }
        }
    }

    /// How many local waiters listen on `channel`.
    pub(crate) fn waiters(&self, channel: &str) -> usize {
        self.channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(channel)
            .map_or(0, |entry| entry.waiters)
    }

    /// A release was published on `channel`: wake one local waiter.
    pub(crate) fn wake_one(&self, channel: &str) {
        let channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = channels.get(channel) {
            entry.notify.notify_one();
        }
    }

    /// The pub/sub connection dropped and messages may have been missed: every waiter retries.
    pub(crate) fn wake_all(&self) {
        let channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        for entry in channels.values() {
            entry.notify.notify_waiters();
        }
    }

    /// How many channels have local waiters (for leak checks in tests).
    pub(crate) fn channels_in_use(&self) -> usize {
        self.channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}
