//! The in-memory store: the same semantics as the Redis scripts, in Rust, for tests, local
//! development and the example app. Time is tokio's clock, so `tokio::time::pause` works in
//! users' tests; fencing tokens use wall-clock microseconds like the scripts use `TIME`.
//!
//! Rate-limit state lives in its own map, typed (the algorithms in [`ratelimit`] work on it
//! directly), with expiry times on the algorithms' microsecond timeline: wall-clock
//! microseconds at the store's creation advanced by tokio's clock, or the injected time of a
//! test.

mod bloom;
pub(crate) mod ratelimit;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use self::ratelimit::State as RateState;
use super::backend::Backend;
use super::scripts::bloom::{BloomOp, BloomShape, ShardCall, ShardReply};
use super::scripts::handoff::HandoffReply;
use super::{
    AcquireReply, CLAIM, Held, RateReply, RateRequest, RenewItem, Replicas, Waits, Wakeups,
};
use crate::error::StoreError;
use crate::keys::LockKeys;
use crate::token::Token;

/// Expired entries are swept every this many writes, so abandoned keys do not pile up.
const SWEEP_EVERY: u64 = 1024;
/// The fence key has no ttl on Redis; here it is kept for a time no process outlives.
const FENCE_KEPT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
/// A lock's value ends with this while a waiter starves, and is only this while reserved for
/// such a waiter (the same marks as `acquire.lua`; the `*` mark is not needed here, since
/// every release wakes a local waiter).
const STARVING: &str = "!";

#[derive(Clone, Default)]
pub(crate) struct MemoryStore {
    state: Arc<Mutex<State>>,
    rates: Arc<Mutex<Rates>>,
    blooms: Arc<bloom::Blooms>,
    wakeups: Arc<Wakeups>,
}

/// Rate-limit state per key, with its expiry in µs on the store's timeline.
struct Rates {
    entries: HashMap<String, (RateState, i64)>,
    writes: u64,
    /// Wall-clock µs at `base`; the timeline is `base_us + (Instant::now() - base)`.
    base_us: i64,
    base: Instant,
}

impl Default for Rates {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            writes: 0,
            base_us: i64::try_from(now_micros()).unwrap_or(i64::MAX / 2),
            base: Instant::now(),
        }
    }
}

impl Rates {
    fn now_us(&self) -> i64 {
        let elapsed = i64::try_from(self.base.elapsed().as_micros()).unwrap_or(i64::MAX / 2);
        self.base_us.saturating_add(elapsed)
    }

    /// Takes a live entry out of the map (it is put back by the caller).
    fn take(&mut self, key: &str, now: i64) -> Option<(RateState, i64)> {
        self.entries
            .remove(key)
            .filter(|(_, expires)| *expires > now)
    }

    fn put(&mut self, key: &str, state: RateState, expires: i64, now: i64) {
        self.writes += 1;
        if self.writes.is_multiple_of(SWEEP_EVERY) {
            self.entries.retain(|_, (_, e)| *e > now);
        }
        self.entries.insert(key.to_owned(), (state, expires));
    }
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

    /// Whether `key` holds `token` (marked `!` or not).
    fn held(&self, key: &str, token: &Token, now: Instant) -> Held {
        match self.get(key, now) {
            Some(v) if v.data.strip_suffix(STARVING) == Some(token.as_str()) => Held::Yes,
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

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn take_lock(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl: Duration,
        waits: Waits,
    ) -> AcquireReply {
        let now = Instant::now();
        let mut state = self.state();
        if state.held(&keys.lock, token, now) == Held::Other {
            let starving = waits == Waits::Starving;
            if let Some(v) = state
                .values
                .get_mut(&keys.lock)
                .filter(|v| v.expires_at > now)
            {
                let reserved = v.data == STARVING;
                if !(reserved && starving) {
                    if starving && !v.data.ends_with(STARVING) {
                        v.data.push_str(STARVING);
                    }
                    return AcquireReply::Busy {
                        pttl: Some(v.expires_at.saturating_duration_since(now)),
                    };
                }
            }
        }
        // Free, reserved for this starving waiter, or already ours (a retried grant, whose
        // mark stays): either way a new, higher fence.
        let last = state
            .get(&keys.fence, now)
            .and_then(|v| v.data.parse::<u64>().ok())
            .unwrap_or(0);
        let fence = (last + 1).max(now_micros());
        let value = match state.get(&keys.lock, now) {
            Some(v) if v.data != STARVING => v.data.clone(),
            _ => token.as_str().to_owned(),
        };
        state.set(&keys.lock, value, ttl, now);
        state.set(&keys.fence, fence.to_string(), FENCE_KEPT, now);
        AcquireReply::Granted { fence }
    }

    fn free_lock(&self, keys: &LockKeys, token: &Token) -> Held {
        let now = Instant::now();
        let mut state = self.state();
        let held = state.held(&keys.lock, token, now);
        if held == Held::Yes {
            let starving = state
                .get(&keys.lock, now)
                .is_some_and(|v| v.data.ends_with(STARVING));
            if starving {
                // Reserved for a waiter that has waited long, as release.lua does.
                state.set(&keys.lock, STARVING.to_owned(), CLAIM, now);
            } else {
                state.values.remove(&keys.lock);
            }
            drop(state);
            self.wakeups.wake_one(&keys.channel, starving);
        }
        held
    }

    /// Takes back a starving waiter's mark, as `unmark.lua` does.
    fn clear_mark(&self, keys: &LockKeys) {
        let now = Instant::now();
        let mut state = self.state();
        let Some(v) = state
            .values
            .get_mut(&keys.lock)
            .filter(|v| v.expires_at > now)
        else {
            return;
        };
        if v.data == STARVING {
            state.values.remove(&keys.lock);
        } else if v.data.ends_with(STARVING) {
            v.data.truncate(v.data.len() - STARVING.len());
        }
    }

    fn renew_leases(&self, items: &[RenewItem<'_>]) -> Vec<Held> {
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

    fn rates(&self) -> std::sync::MutexGuard<'_, Rates> {
        self.rates.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One rate-limit check on the store's clock, atomically under the rate map's mutex (also
    /// the local fallback of a limiter whose store is away).
    pub(crate) fn check_rate(&self, req: &RateRequest<'_>) -> RateReply {
        self.check_rate_at(req, None)
    }

    /// Test-only: one rate-limit check decided at `now_us` (µs since the epoch).
    #[cfg(feature = "test-util")]
    pub(crate) fn rate_limit_at(&self, req: &RateRequest<'_>, now_us: u64) -> RateReply {
        self.check_rate_at(req, Some(now_us))
    }

    fn check_rate_at(&self, req: &RateRequest<'_>, now_us: Option<u64>) -> RateReply {
        let mut rates = self.rates();
        let now = now_us.map_or_else(
            || rates.now_us(),
            |t| i64::try_from(t).unwrap_or(i64::MAX / 2),
        );
        let (mut states, old_expiries): (Vec<Option<RateState>>, Vec<Option<i64>>) =
            req.keys.iter().map(|k| rates.take(k, now).unzip()).unzip();
        let (reply, written) = ratelimit::run(req.params, &mut states, now, req.op);
        let entries = req.keys.iter().zip(states).zip(old_expiries).zip(written);
        for (((key, state), old), written) in entries {
            // A written state expires at its new reset time; an untouched one keeps its own.
            if let (Some(state), Some(expires)) = (state, written.or(old))
                && expires > now
            {
                rates.put(key, state, expires, now);
            }
        }
        reply
    }

    /// Remaining ttl of a key, for tests (`None` if absent).
    #[cfg(feature = "test-util")]
    pub(crate) fn pttl(&self, key: &str) -> Option<Duration> {
        let now = Instant::now();
        if let Some(v) = self.state().get(key, now) {
            return Some(v.expires_at.saturating_duration_since(now));
        }
        if let Some(Some(ttl)) = self.blooms.pttl(key) {
            return Some(ttl);
        }
        let rates = self.rates();
        let now = rates.now_us();
        rates
            .entries
            .get(key)
            .filter(|(_, e)| *e > now)
            .map(|(_, e)| Duration::from_micros(u64::try_from(e - now).unwrap_or(0)))
    }

    /// The value of a live key, for tests.
    #[cfg(feature = "test-util")]
    pub(crate) fn get(&self, key: &str) -> Option<String> {
        self.state()
            .get(key, Instant::now())
            .map(|v| v.data.clone())
    }

    /// Live keys, for tests.
    #[cfg(feature = "test-util")]
    pub(crate) fn live_keys(&self) -> Vec<String> {
        let now = Instant::now();
        let state = self.state();
        let mut keys: Vec<String> = state
            .values
            .iter()
            .filter(|(_, v)| v.expires_at > now)
            .map(|(k, _)| k.clone())
            .collect();
        drop(state);
        let rates = self.rates();
        let now = rates.now_us();
        keys.extend(
            rates
                .entries
                .iter()
                .filter(|(_, (_, e))| *e > now)
                .map(|(k, _)| k.clone()),
        );
        keys
    }

    /// Deletes a key, for tests that take a lock away behind its holder's back.
    #[cfg(feature = "test-util")]
    pub(crate) fn delete(&self, key: &str) -> bool {
        let lock = self.state().values.remove(key).is_some();
        lock | self.rates().entries.remove(key).is_some()
    }
}

impl Backend for MemoryStore {
    async fn acquire(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl: Duration,
        waits: Waits,
        replicas: Option<Replicas>,
    ) -> Result<AcquireReply, StoreError> {
        if replicas.is_some() {
            return Err(super::replicas_unsupported("the in-memory store"));
        }
        Ok(self.take_lock(keys, token, ttl, waits))
    }

    async fn release(&self, keys: &LockKeys, token: &Token) -> Result<Held, StoreError> {
        Ok(self.free_lock(keys, token))
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<Held>, StoreError> {
        Ok(self.renew_leases(items))
    }

    /// Every release wakes a local waiter at once: nothing to gain from a hand-off.
    fn hands_off(&self) -> bool {
        false
    }

    async fn handoff(
        &self,
        _keys: &LockKeys,
        _from: &Token,
        _to: &Token,
        _ttl: Duration,
    ) -> Result<HandoffReply, StoreError> {
        Err(StoreError::Protocol {
            message: "the in-memory store does not hand locks off".to_owned(),
        })
    }

    async fn unmark(&self, keys: &LockKeys) -> Result<(), StoreError> {
        self.clear_mark(keys);
        Ok(())
    }

    async fn rate_limit(&self, req: &RateRequest<'_>) -> Result<RateReply, StoreError> {
        Ok(self.check_rate(req))
    }

    async fn bloom(
        &self,
        native: bool,
        op: BloomOp,
        shape: &BloomShape,
        shards: &[ShardCall],
    ) -> Result<Vec<ShardReply>, StoreError> {
        self.blooms.run(native, op, shape, shards)
    }

    async fn bloom_module(&self) -> Result<bool, StoreError> {
        Ok(false)
    }

    fn wakeups(&self) -> &Arc<Wakeups> {
        &self.wakeups
    }

    /// Nothing here waits on I/O; the bound only guards against a stuck runtime.
    fn op_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }
}
