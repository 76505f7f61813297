//! The in-memory store: the same semantics as the Redis scripts, in Rust, for tests, local
//! development and the example app. Time is tokio's clock, so `tokio::time::pause` works in
//! users' tests; fencing tokens use wall-clock microseconds like the scripts use `TIME`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::{AcquireReply, Held, RenewItem, Wakeups, fence_ttl};
use crate::keys::LockKeys;
use crate::token::Token;

/// Expired entries are swept every this many writes, so abandoned keys do not pile up.
const SWEEP_EVERY: u64 = 1024;

#[derive(Clone, Default)]
pub(crate) struct MemoryStore {
    state: Arc<Mutex<State>>,
    wakeups: Arc<Wakeups>,
}

#[derive(Default)]
struct State {
    values: HashMap<String, Value>,
    writes: u64,
}

struct Value {
    data: String,
    expires_at: Instant,
}

impl State {
    fn get(&self, key: &str, now: Instant) -> Option<&Value> {
        self.values.get(key).filter(|v| v.expires_at > now)
    }

    fn set(&mut self, key: &str, data: String, ttl: Duration, now: Instant) {
        self.writes += 1;
        if self.writes.is_multiple_of(SWEEP_EVERY) {
            self.values.retain(|_, v| v.expires_at > now);
        }
        self.values.insert(
            key.to_owned(),
            Value {
                data,
                expires_at: now + ttl,
            },
        );
    }

    fn held(&self, key: &str, token: &Token, now: Instant) -> Held {
        match self.get(key, now) {
            Some(v) if v.data == token.as_str() => Held::Yes,
            Some(_) => Held::Other,
            None => Held::Gone,
        }
    }
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

impl MemoryStore {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn wakeups(&self) -> &Arc<Wakeups> {
        &self.wakeups
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn acquire(&self, keys: &LockKeys, token: &Token, ttl: Duration) -> AcquireReply {
        let now = Instant::now();
        let mut state = self.state();
        let last_fence = |state: &State| {
            state
                .get(&keys.fence, now)
                .and_then(|v| v.data.parse::<u64>().ok())
                .unwrap_or(0)
        };
        match state.held(&keys.lock, token, now) {
            Held::Yes => {
                state.set(&keys.lock, token.as_str().to_owned(), ttl, now);
                AcquireReply::Granted {
                    fence: last_fence(&state),
                }
            }
            Held::Other => AcquireReply::Busy {
                pttl: state
                    .get(&keys.lock, now)
                    .map(|v| v.expires_at.saturating_duration_since(now)),
            },
            Held::Gone => {
                let fence = (last_fence(&state) + 1).max(now_micros());
                state.set(&keys.lock, token.as_str().to_owned(), ttl, now);
                state.set(&keys.fence, fence.to_string(), fence_ttl(ttl), now);
                AcquireReply::Granted { fence }
            }
        }
    }

    pub(crate) fn release(&self, keys: &LockKeys, token: &Token) -> Held {
        let now = Instant::now();
        let mut state = self.state();
        let held = state.held(&keys.lock, token, now);
        if held == Held::Yes {
            state.values.remove(&keys.lock);
            drop(state);
            self.wakeups.wake_one(&keys.channel);
        }
        held
    }

    pub(crate) fn renew(&self, items: &[RenewItem<'_>]) -> Vec<Held> {
        let now = Instant::now();
        let mut state = self.state();
        items
            .iter()
            .map(|item| {
                let held = state.held(item.key, item.token, now);
                if held == Held::Yes
                    && let Some(v) = state.values.get_mut(item.key)
                {
                    v.expires_at = now + item.ttl;
                }
                held
            })
            .collect()
    }

    /// Remaining ttl of a key, for tests (`None` if absent).
    pub(crate) fn pttl(&self, key: &str) -> Option<Duration> {
        let now = Instant::now();
        self.state()
            .get(key, now)
            .map(|v| v.expires_at.saturating_duration_since(now))
    }

    /// The value of a live key, for tests.
    pub(crate) fn get(&self, key: &str) -> Option<String> {
        self.state()
            .get(key, Instant::now())
            .map(|v| v.data.clone())
    }

    /// Live keys, for tests.
    pub(crate) fn live_keys(&self) -> Vec<String> {
        let now = Instant::now();
        let state = self.state();
        state
            .values
            .iter()
            .filter(|(_, v)| v.expires_at > now)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Deletes a key, for tests that take a lock away behind its holder's back.
    pub(crate) fn delete(&self, key: &str) -> bool {
        self.state().values.remove(key).is_some()
    }
}
