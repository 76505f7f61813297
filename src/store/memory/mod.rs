//! The in-memory store: the same semantics as the Redis scripts, in Rust, for tests, local
//! development and the example app. Time is tokio's clock, so `tokio::time::pause` works in
//! users' tests; fencing tokens use wall-clock microseconds like the scripts use `TIME`.
//!
//! Rate-limit state lives in its own map, typed (the algorithms of `store/ratelimit/` work on it
//! directly), with expiry times on the algorithms' microsecond timeline: wall-clock
//! microseconds at the store's creation advanced by tokio's clock, or the injected time of a
//! test.

mod bloom;
mod fenced;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::backend::Backend;
use super::capability::{Capability, StoreKind};
use super::peek::{KeyScan, KeyWalk, SetHolder};
use super::ratelimit::{self, State as RateState};
use super::requests::{
    Acquire, AcquireAll, BloomCall, EntriesRelease, LeaderKeys, LeaderPut, PathAcquire,
    PathRelease, RwAcquire,
};
use super::scripts::adaptive::{self, AdaptiveCall};
use super::scripts::bloom::ShardReply;
use super::scripts::fair::{FAIR_CLAIM, FairCall, FairReply, FairTake};
use super::scripts::fenced::{FencedCall, FencedReply};
use super::scripts::idempotency::{RecordCall, RecordReply};
use super::scripts::leader::Record;
use super::scripts::mint::MintReply;
use super::{
    AcquireReply, AllReply, CLAIM, Ownership, PermitsItem, RateReply, RateRequest, RenewItem, Side,
    Waits, Wakeups,
};
use crate::error::StoreError;
use crate::keys::{LockKeys, RwKeys, SetKeys};
use crate::mode::HierarchyMode;
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
    fenced: Arc<fenced::Resources>,
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
    /// Holder sets (semaphores, a read-write lock's readers): per set, each holder's token
    /// with how many entries it holds and when they expire (the scripts keep one sorted-set
    /// entry per permit; the count says the same here).
    sets: HashMap<String, HashMap<String, Entries>>,
    /// Idempotency records (`idempotency.lua`), with their expiry. Beside the locks, since a
    /// record is stored only while its claim (a lock) is held.
    records: HashMap<String, (Vec<u8>, Instant)>,
    /// Shared concurrency limits (`adaptive.lua`): the limit, the window it last rose in,
    /// the one it last fell in, and when the state expires; windows count from
    /// `adaptive_origin`.
    adaptive: HashMap<String, AdaptiveState>,
    adaptive_origin: Option<Instant>,
    /// Fair locks' queues (`fair.lua`), by queue key.
    fair: HashMap<String, FairQueue>,
    writes: u64,
}

/// A fair lock's queue: waiters by arrival number, and when each one's place runs out.
#[derive(Default)]
struct FairQueue {
    next: u64,
    order: std::collections::BTreeMap<u64, String>,
    places: HashMap<String, (u64, Instant)>,
}

impl FairQueue {
    /// Drops the waiters whose place ran out.
    fn prune(&mut self, now: Instant) {
        let order = &mut self.order;
        self.places.retain(|_, (number, until)| {
            let live = *until > now;
            if !live {
                order.remove(number);
            }
            live
        });
    }

    fn first(&self) -> Option<&str> {
        self.order.values().next().map(String::as_str)
    }

    fn remove(&mut self, waiter: &str) {
        if let Some((number, _)) = self.places.remove(waiter) {
            self.order.remove(&number);
        }
    }
}

/// A shared concurrency limit's state: the limit, the windows it last rose and fell in, and
/// when it expires.
type AdaptiveState = (u32, Option<u64>, Option<u64>, Instant);

/// One holder's entries in a holder set.
#[derive(Clone, Copy)]
struct Entries {
    count: u32,
    expires_at: Instant,
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

    /// The live holders of set `key`, with the expired ones dropped (as `prune` in
    /// holders.lua).
    fn holders(&mut self, key: &str, now: Instant) -> Option<&mut HashMap<String, Entries>> {
        let set = self.sets.get_mut(key)?;
        set.retain(|_, e| e.expires_at > now);
        if set.is_empty() {
            self.sets.remove(key);
            return None;
        }
        self.sets.get_mut(key)
    }

    /// How many entries set `key` holds right now.
    fn held_entries(&mut self, key: &str, now: Instant) -> u64 {
        self.holders(key, now)
            .map_or(0, |set| set.values().map(|e| u64::from(e.count)).sum())
    }

    /// Whether `token` holds live entries in set `key`.
    fn holds_entries(&mut self, key: &str, token: &Token, now: Instant) -> bool {
        self.holders(key, now)
            .is_some_and(|set| set.contains_key(token.as_str()))
    }

    fn put_entries(&mut self, key: &str, token: &Token, count: u32, ttl: Duration, now: Instant) {
        self.writes += 1;
        if self.writes.is_multiple_of(SWEEP_EVERY) {
            self.values.retain(|_, v| v.expires_at > now);
            self.sets.retain(|_, set| {
                set.retain(|_, e| e.expires_at > now);
                !set.is_empty()
            });
        }
        self.sets.entry(key.to_owned()).or_default().insert(
            token.as_str().to_owned(),
            Entries {
                count,
                expires_at: now + ttl,
            },
        );
    }

    /// Takes `token`'s entries out of set `key`, and the set with them once it is empty.
    fn remove_entries(&mut self, key: &str, token: &Token) {
        if let Some(set) = self.sets.get_mut(key) {
            set.remove(token.as_str());
            if set.is_empty() {
                self.sets.remove(key);
            }
        }
    }

    /// How long until `need` more entries of set `key` have expired (as acquire_permits.lua
    /// answers a busy caller).
    fn until_expired(&mut self, key: &str, need: u64, now: Instant) -> Duration {
        let Some(set) = self.holders(key, now) else {
            return Duration::ZERO;
        };
        let mut expiries: Vec<(Instant, u32)> =
            set.values().map(|e| (e.expires_at, e.count)).collect();
        expiries.sort_unstable();
        let mut freed = 0u64;
        for (at, count) in expiries {
            freed += u64::from(count);
            if freed >= need {
                return at.saturating_duration_since(now);
            }
        }
        Duration::ZERO
    }

    /// The latest expiry among the entries of set `key`.
    fn latest_expiry(&mut self, key: &str, now: Instant) -> Option<Instant> {
        self.holders(key, now)?.values().map(|e| e.expires_at).max()
    }

    /// Mints a fence under `fence_key`, as fence.lua does: max(last + 1, wall-clock µs).
    fn mint(&mut self, fence_key: &str, now: Instant) -> u64 {
        let last = self
            .get(fence_key, now)
            .and_then(|v| v.data.parse::<u64>().ok())
            .unwrap_or(0);
        let fence = (last + 1).max(now_micros());
        self.set(fence_key, fence.to_string(), FENCE_KEPT, now);
        fence
    }

    /// The remaining ttl of string key `key`, if it is live.
    fn pttl(&self, key: &str, now: Instant) -> Option<Duration> {
        self.get(key, now)
            .map(|v| v.expires_at.saturating_duration_since(now))
    }

    /// Whether `key` holds `token` (marked `!` or not).
    fn held(&self, key: &str, token: &Token, now: Instant) -> Ownership {
        match self.get(key, now) {
            Some(v) if v.data.strip_suffix(STARVING) == Some(token.as_str()) => Ownership::Ours,
            Some(v) if v.data == token.as_str() => Ownership::Ours,
            Some(_) => Ownership::Theirs,
            None => Ownership::Expired,
        }
    }
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A leader record's fields as the memory store keeps them: term, writer's token, identity.
fn memory_record(data: &str) -> Option<(u64, &str, &str)> {
    let mut parts = data.splitn(3, '\n');
    let term = parts.next()?.parse().ok()?;
    Some((term, parts.next()?, parts.next()?))
}

impl MemoryStore {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state, locked, and the time read once it is held, as a script reads `TIME` inside
    /// its atomic run: a time read before the lock could predate another caller's write, and
    /// a busy lock would then report more time left than its ttl.
    fn state_now(&self) -> (std::sync::MutexGuard<'_, State>, Instant) {
        let state = self.state();
        (state, Instant::now())
    }

    fn take_lock(&self, req: &Acquire<'_>) -> AcquireReply {
        let Acquire {
            keys,
            token,
            ttl,
            waits,
            mint,
            ..
        } = *req;
        let (mut state, now) = self.state_now();
        if state.held(&keys.lock, token, now) == Ownership::Theirs {
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
        // mark stays): either way a new, higher fence if the lease mints it now.
        let value = match state.get(&keys.lock, now) {
            Some(v) if v.data != STARVING => v.data.clone(),
            _ => token.as_str().to_owned(),
        };
        state.set(&keys.lock, value, ttl, now);
        let fence = mint.then(|| state.mint(&keys.fence, now));
        AcquireReply::Granted { fence }
    }

    /// As `mint.lua`: a fence only while the lock holds the token.
    fn mint_fence(&self, keys: &LockKeys, token: &Token) -> MintReply {
        let (mut state, now) = self.state_now();
        match state.held(&keys.lock, token, now) {
            Ownership::Ours => MintReply::Minted(state.mint(&keys.fence, now)),
            other => MintReply::Not(other),
        }
    }

    /// As `acquire_all.lua`: every lock free (or already its token's), then all taken.
    fn take_all(&self, req: &AcquireAll<'_>) -> AllReply {
        let AcquireAll {
            keys, tokens, ttl, ..
        } = *req;
        let (mut state, now) = self.state_now();
        for (index, (k, token)) in keys.iter().zip(tokens).enumerate() {
            if state.held(&k.lock, token, now) == Ownership::Theirs {
                return AllReply::Busy {
                    index,
                    pttl: state.pttl(&k.lock, now),
                };
            }
        }
        let mut fences = Vec::with_capacity(keys.len());
        for (k, token) in keys.iter().zip(tokens) {
            let value = match state.get(&k.lock, now) {
                Some(v) => v.data.clone(),
                None => token.as_str().to_owned(),
            };
            state.set(&k.lock, value, ttl, now);
            fences.push(state.mint(&k.fence, now));
        }
        AllReply::Granted { fences }
    }

    /// As `acquire_permits.lua`.
    fn take_permits(&self, item: &PermitsItem<'_>) -> AcquireReply {
        let (mut state, now) = self.state_now();
        let keys = item.keys;
        let held = state.held_entries(&keys.set, now);
        let retry = state.holds_entries(&keys.set, item.token, now);
        // Another waiter's claim keeps the permits it needs (`<count>:<token>`).
        let claim = state.get(&keys.claim, now).and_then(|v| {
            let (count, token) = v.data.split_once(':')?;
            Some((count.parse::<u64>().ok()?, token.to_owned()))
        });
        let mine = claim
            .as_ref()
            .is_some_and(|(_, t)| t == item.token.as_str());
        let kept = match &claim {
            Some((count, _)) if !mine => *count,
            _ => 0,
        };
        let (count, permits) = (u64::from(item.count), u64::from(item.permits));
        if retry || held + count + kept <= permits {
            state.put_entries(&keys.set, item.token, item.count, item.ttl, now);
            if mine {
                state.values.remove(&keys.claim);
            }
            let fence = state.mint(&keys.fence, now);
            return AcquireReply::Granted { fence: Some(fence) };
        }
        let need = held + count + kept - permits;
        let wait = if need > held {
            state.pttl(&keys.claim, now).unwrap_or_default()
        } else {
            state.until_expired(&keys.set, need, now)
        };
        if item.waits == Waits::Starving && (claim.is_none() || mine) {
            let data = format!("{}:{}", item.count, item.token.as_str());
            state.set(&keys.claim, data, wait + CLAIM, now);
        }
        AcquireReply::Busy { pttl: Some(wait) }
    }

    /// As `acquire_read.lua` and `acquire_write.lua` (a writer's key holds its token, or the
    /// `!`-free value a lock has here; no `*` mark is needed in memory).
    fn take_rw(&self, req: &RwAcquire<'_>) -> AcquireReply {
        let RwAcquire {
            side,
            keys,
            token,
            ttl,
            waits,
        } = *req;
        let (mut state, now) = self.state_now();
        let readers = &keys.readers.set;
        let busy = |pttl: Option<Duration>| AcquireReply::Busy { pttl };
        match side {
            Side::Read => {
                if !state.holds_entries(readers, token, now) {
                    if let Some(pttl) = state.pttl(&keys.writer.lock, now) {
                        return busy(Some(pttl));
                    }
                    if let Some(pttl) = state.pttl(&keys.intent, now) {
                        return busy(Some(pttl));
                    }
                }
                state.put_entries(readers, token, 1, ttl, now);
            }
            Side::Write => match state.held(&keys.writer.lock, token, now) {
                Ownership::Ours => {
                    if let Some(v) = state.values.get_mut(&keys.writer.lock) {
                        v.expires_at = now + ttl;
                    }
                }
                Ownership::Theirs => return busy(state.pttl(&keys.writer.lock, now)),
                Ownership::Expired => {
                    if let Some(latest) = state.latest_expiry(readers, now) {
                        let wait = latest.saturating_duration_since(now);
                        if waits != Waits::No {
                            state.set(&keys.intent, "1".to_owned(), wait + CLAIM, now);
                        }
                        return busy(Some(wait));
                    }
                    state.set(&keys.writer.lock, token.as_str().to_owned(), ttl, now);
                    state.values.remove(&*keys.intent);
                }
            },
        }
        let fence = state.mint(&keys.readers.fence, now);
        AcquireReply::Granted { fence: Some(fence) }
    }

    /// As `fair.lua`.
    fn fair_call(&self, call: &FairCall<'_>) -> FairReply {
        let (mut state, now) = self.state_now();
        let keys = call.keys();
        let mut queue = state.fair.remove(&*keys.queue).unwrap_or_default();
        queue.prune(now);
        let reply = match *call {
            FairCall::Count { .. } => FairReply::Count(queue.places.len() as u64),
            FairCall::Leave { waiter, .. } => {
                let was_first = queue.first() == Some(waiter);
                queue.remove(waiter);
                if was_first
                    && state.get(&keys.lock.lock, now).is_none()
                    && !queue.places.is_empty()
                {
                    self.wakeups.wake_one(&keys.lock.channel, false);
                }
                FairReply::Left
            }
            FairCall::Take(ref take) => {
                let reply = Self::fair_take(&mut state, &mut queue, take, now);
                let ahead = match (reply, queue.places.get(take.waiter)) {
                    (AcquireReply::Busy { .. }, Some((number, _))) => {
                        queue.order.range(..*number).count() as u64
                    }
                    _ => 0,
                };
                FairReply::Take { reply, ahead }
            }
        };
        if !queue.places.is_empty() {
            state.fair.insert(keys.queue.to_string(), queue);
        }
        reply
    }

    fn fair_take(
        state: &mut State,
        queue: &mut FairQueue,
        take: &FairTake<'_>,
        now: Instant,
    ) -> AcquireReply {
        let FairTake {
            keys,
            token,
            ttl,
            waiter,
            joins,
            mint,
            ..
        } = *take;
        let held = state.held(&keys.lock.lock, token, now);
        let turn = queue.first().is_none_or(|first| first == waiter);
        if held == Ownership::Ours || (held == Ownership::Expired && turn) {
            state.set(&keys.lock.lock, token.as_str().to_owned(), ttl, now);
            queue.remove(waiter);
            let fence = mint.then(|| state.mint(&keys.lock.fence, now));
            return AcquireReply::Granted { fence };
        }
        let wait = match state.pttl(&keys.lock.lock, now) {
            Some(pttl) => pttl,
            None => queue
                .first()
                .and_then(|first| queue.places.get(first))
                .map_or(Duration::ZERO, |(_, until)| {
                    until.saturating_duration_since(now)
                }),
        };
        if joins {
            let number = match queue.places.get(waiter) {
                Some((number, _)) => *number,
                None => {
                    queue.next += 1;
                    queue.order.insert(queue.next, waiter.to_owned());
                    queue.next
                }
            };
            queue
                .places
                .insert(waiter.to_owned(), (number, now + FAIR_CLAIM));
        }
        AcquireReply::Busy { pttl: Some(wait) }
    }

    /// As `acquire_path.lua`: every level checked top-down against its holders and its
    /// intent mark, then every level taken. The waited marks are not needed here (a release
    /// always wakes the local waiters).
    fn take_path(&self, req: &PathAcquire<'_>) -> AcquireReply {
        let PathAcquire {
            keys,
            mode,
            token,
            waiter,
            ttl,
            waits,
        } = *req;
        let (mut state, now) = self.state_now();
        let levels = keys.levels.len();
        let mode_on = |i: usize| mode.on_level(i, levels);
        let held = keys
            .levels
            .last()
            .is_some_and(|last| state.holds_entries(last.holders_of(mode), token, now));
        if !held {
            for (i, level) in keys.levels.iter().enumerate() {
                let wanted = mode_on(i);
                let latest = HierarchyMode::ALL
                    .into_iter()
                    .filter(|other| !other.compatible_with(wanted))
                    .filter_map(|other| state.latest_expiry(level.holders_of(other), now))
                    .max();
                let intent = state
                    .get(&level.intent, now)
                    .map(|v| (v.data.clone(), v.expires_at));
                let foreign = intent
                    .as_ref()
                    .and_then(|(data, at)| Some((data.split_at_checked(1)?, *at)))
                    .filter(|((_, owner), _)| *owner != waiter);
                if let Some(latest) = latest {
                    let wait = latest.saturating_duration_since(now);
                    if waits != Waits::No && foreign.is_none() {
                        let mark = format!("{}{waiter}", wanted.index() + 1);
                        state.set(&level.intent, mark, wait + CLAIM, now);
                    }
                    return AcquireReply::Busy { pttl: Some(wait) };
                }
                if let Some(((index, _), at)) = foreign {
                    let marked = index
                        .parse::<usize>()
                        .ok()
                        .and_then(|i| HierarchyMode::ALL.get(i.wrapping_sub(1)).copied());
                    if marked.is_some_and(|m| !m.compatible_with(wanted)) {
                        return AcquireReply::Busy {
                            pttl: Some(at.saturating_duration_since(now)),
                        };
                    }
                }
            }
        }
        for (i, level) in keys.levels.iter().enumerate() {
            state.put_entries(level.holders_of(mode_on(i)), token, 1, ttl, now);
            let ours = state
                .get(&level.intent, now)
                .is_some_and(|v| v.data.get(1..) == Some(waiter));
            if ours {
                state.values.remove(&level.intent);
            }
        }
        let fence = state.mint(&keys.fence, now);
        AcquireReply::Granted { fence: Some(fence) }
    }

    /// As `release_path.lua`; wakes the hierarchy's local waiters.
    fn free_path(&self, req: &PathRelease<'_>) -> Ownership {
        let (keys, mode, token) = (req.keys, req.mode, req.token);
        let (mut state, now) = self.state_now();
        let levels = keys.levels.len();
        let live = keys.levels.last().is_some_and(|last| {
            state.holds_entries(
                last.holders_of(mode.on_level(levels - 1, levels)),
                token,
                now,
            )
        });
        for (i, level) in keys.levels.iter().enumerate() {
            state.remove_entries(level.holders_of(mode.on_level(i, levels)), token);
        }
        drop(state);
        self.freed_entries(live, &keys.channel)
    }

    /// As `release_writer.lua`: wakes a local writer and a local reader.
    fn free_writer(&self, keys: &RwKeys, token: &Token) -> Ownership {
        let (mut state, now) = self.state_now();
        let held = state.held(&keys.writer.lock, token, now);
        if held == Ownership::Ours {
            state.values.remove(&keys.writer.lock);
            drop(state);
            self.wakeups.wake_one(&keys.writer.channel, false);
            self.wakeups.wake_one(&keys.readable, false);
        }
        held
    }

    /// As `release_entries.lua`; wakes a local waiter.
    fn free_entries(&self, keys: &SetKeys, token: &Token) -> Ownership {
        let (mut state, now) = self.state_now();
        let live = state.holds_entries(&keys.set, token, now);
        state.remove_entries(&keys.set, token);
        drop(state);
        self.freed_entries(live, &keys.channel)
    }

    /// A holder set's release, once its entries are out: ours if they were `live` (then a
    /// local waiter on `channel` is woken), else expired.
    fn freed_entries(&self, live: bool, channel: &str) -> Ownership {
        if !live {
            return Ownership::Expired;
        }
        self.wakeups.wake_one(channel, false);
        Ownership::Ours
    }

    fn free_lock(&self, keys: &LockKeys, token: &Token) -> Ownership {
        let (mut state, now) = self.state_now();
        let held = state.held(&keys.lock, token, now);
        if held == Ownership::Ours {
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
        let (mut state, now) = self.state_now();
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

    fn renew_leases(&self, items: &[RenewItem<'_>]) -> Vec<Ownership> {
        let (mut state, now) = self.state_now();
        items
            .iter()
            .map(|item| {
                if item.entries > 0 {
                    // Holder-set entries, as renew.lua renews them: only while live.
                    let Some(entries) = state
                        .holders(item.key, now)
                        .and_then(|set| set.get_mut(item.token.as_str()))
                    else {
                        return Ownership::Expired;
                    };
                    entries.expires_at = now + item.ttl;
                    return Ownership::Ours;
                }
                let held = state.held(item.key, item.token, now);
                if held == Ownership::Ours
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
        let (mut state, now) = self.state_now();
        if let Some(v) = state.get(key, now) {
            return Some(v.expires_at.saturating_duration_since(now));
        }
        if let Some(Some(ttl)) = self.blooms.pttl(key) {
            return Some(ttl);
        }
        if let Some(latest) = state.latest_expiry(key, now) {
            return Some(latest.saturating_duration_since(now));
        }
        drop(state);
        let rates = self.rates();
        let now = rates.now_us();
        rates
            .entries
            .get(key)
            .filter(|(_, e)| *e > now)
            .map(|(_, e)| Duration::from_micros(u64::try_from(e - now).unwrap_or(0)))
    }

    /// How many live entries the holder set `key` has, for tests.
    #[cfg(feature = "test-util")]
    pub(crate) fn live_entries(&self, key: &str) -> u64 {
        let (mut state, now) = self.state_now();
        state.held_entries(key, now)
    }

    /// The value of a live key, for tests.
    #[cfg(feature = "test-util")]
    pub(crate) fn get(&self, key: &str) -> Option<String> {
        let (state, now) = self.state_now();
        state.get(key, now).map(|v| v.data.clone())
    }

    /// Live keys, for tests.
    #[cfg(feature = "test-util")]
    pub(crate) fn live_keys(&self) -> Vec<String> {
        let (state, now) = self.state_now();
        let mut keys: Vec<String> = state
            .values
            .iter()
            .filter(|(_, v)| v.expires_at > now)
            .map(|(k, _)| k.clone())
            .collect();
        keys.extend(
            state
                .sets
                .iter()
                .filter(|(_, set)| set.values().any(|e| e.expires_at > now))
                .map(|(k, _)| k.clone()),
        );
        keys.extend(
            state
                .records
                .iter()
                .filter(|(_, (_, at))| *at > now)
                .map(|(k, _)| k.clone()),
        );
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
        let mut state = self.state();
        let lock = state.values.remove(key).is_some() | state.sets.remove(key).is_some();
        drop(state);
        lock | self.rates().entries.remove(key).is_some()
    }
}

impl Backend for MemoryStore {
    fn kind(&self) -> StoreKind {
        StoreKind::Memory
    }

    fn refuses(&self, capability: Capability) -> Option<&'static str> {
        match capability {
            Capability::ReplicaAcknowledgement => Some(REPLICAS_UNSUPPORTED),
            // Every release wakes a local waiter at once: nothing to gain from a hand-off.
            Capability::HandOff => Some(HAND_OFF_UNSUPPORTED),
            _ => None,
        }
    }

    /// Every lock in one group: the map takes them under one lock.
    fn lock_groups(&self, keys: &[LockKeys]) -> Vec<Vec<usize>> {
        vec![(0..keys.len()).collect()]
    }

    async fn acquire(&self, req: &Acquire<'_>) -> Result<AcquireReply, StoreError> {
        if req.replicas.is_some() {
            return Err(self.lacks(Capability::ReplicaAcknowledgement));
        }
        Ok(self.take_lock(req))
    }

    async fn mint(&self, keys: &LockKeys, token: &Token) -> Result<MintReply, StoreError> {
        Ok(self.mint_fence(keys, token))
    }

    async fn release(&self, keys: &LockKeys, token: &Token) -> Result<Ownership, StoreError> {
        Ok(self.free_lock(keys, token))
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<Ownership>, StoreError> {
        Ok(self.renew_leases(items))
    }

    async fn unmark(&self, keys: &LockKeys) -> Result<(), StoreError> {
        self.clear_mark(keys);
        Ok(())
    }

    async fn acquire_all(&self, req: &AcquireAll<'_>) -> Result<AllReply, StoreError> {
        Ok(self.take_all(req))
    }

    async fn acquire_permits(&self, item: &PermitsItem<'_>) -> Result<AcquireReply, StoreError> {
        Ok(self.take_permits(item))
    }

    async fn acquire_rw(&self, req: &RwAcquire<'_>) -> Result<AcquireReply, StoreError> {
        Ok(self.take_rw(req))
    }

    async fn fair(&self, call: &FairCall<'_>) -> Result<FairReply, StoreError> {
        if let FairCall::Take(FairTake {
            replicas: Some(_), ..
        }) = call
        {
            return Err(self.lacks(Capability::ReplicaAcknowledgement));
        }
        Ok(self.fair_call(call))
    }

    async fn release_writer(&self, keys: &RwKeys, token: &Token) -> Result<Ownership, StoreError> {
        Ok(self.free_writer(keys, token))
    }

    async fn acquire_path(&self, req: &PathAcquire<'_>) -> Result<AcquireReply, StoreError> {
        Ok(self.take_path(req))
    }

    async fn release_path(&self, req: &PathRelease<'_>) -> Result<Ownership, StoreError> {
        Ok(self.free_path(req))
    }

    async fn release_entries(&self, req: &EntriesRelease<'_>) -> Result<Ownership, StoreError> {
        Ok(self.free_entries(req.keys, req.token))
    }

    async fn rate_limit(&self, req: &RateRequest<'_>) -> Result<RateReply, StoreError> {
        Ok(self.check_rate(req))
    }

    #[cfg(feature = "test-util")]
    async fn rate_limit_at(&self, at: &ratelimit::RateAt<'_>) -> Result<RateReply, StoreError> {
        Ok(self.check_rate_at(at.req, Some(at.now_us)))
    }

    async fn bloom(&self, call: &BloomCall<'_>) -> Result<Vec<ShardReply>, StoreError> {
        self.blooms.run(call)
    }

    async fn bloom_module(&self) -> Result<bool, StoreError> {
        Ok(false)
    }

    async fn fenced(&self, call: &FencedCall<'_>) -> Result<FencedReply, StoreError> {
        Ok(self.fenced.run(call))
    }

    /// As `adaptive.lua`.
    async fn adaptive(&self, call: &AdaptiveCall<'_>) -> Result<u32, StoreError> {
        let (mut state, now) = self.state_now();
        let origin = *state.adaptive_origin.get_or_insert(now);
        let window =
            u64::try_from(now.duration_since(origin).as_micros() / call.window.as_micros().max(1))
                .unwrap_or(u64::MAX);
        let before = state
            .adaptive
            .get(call.key)
            .filter(|(.., expires)| *expires > now)
            .map(|&(limit, rose, fell, _)| (limit, rose, fell));
        let (limit, rose, fell) = adaptive::decide(call, before, window);
        let expires = now.checked_add(call.keep).unwrap_or(now + FENCE_KEPT);
        state
            .adaptive
            .insert(call.key.to_owned(), (limit, rose, fell, expires));
        Ok(limit)
    }

    /// As `idempotency.lua`: a read; a start, a store or a discard only while the claim's
    /// token holds its lock.
    async fn idempotency(&self, call: &RecordCall<'_>) -> Result<RecordReply, StoreError> {
        let (mut state, now) = self.state_now();
        let found = |state: &State, record: &str| {
            state
                .records
                .get(record)
                .filter(|(_, at)| *at > now)
                .map(|(value, _)| value.clone())
        };
        let (record, lock, token) = match *call {
            RecordCall::Get { record } => return Ok(RecordReply::Record(found(&state, record))),
            RecordCall::Start {
                record,
                lock,
                token,
                ..
            } => {
                if let Some(value) = found(&state, record) {
                    return Ok(RecordReply::Record(Some(value)));
                }
                (record, lock, token)
            }
            RecordCall::Store {
                record,
                lock,
                token,
                ..
            }
            | RecordCall::Discard {
                record,
                lock,
                token,
            } => (record, lock, token),
        };
        if state.held(lock, token, now) != Ownership::Ours {
            return Ok(RecordReply::Stored(false));
        }
        let (value, ttl) = match *call {
            RecordCall::Start {
                marker: Some(marker),
                ttl,
                ..
            } => (marker, ttl),
            RecordCall::Store { value, ttl, .. } => (value, ttl),
            RecordCall::Discard { .. } => {
                state.records.remove(record);
                return Ok(RecordReply::Stored(true));
            }
            _ => return Ok(RecordReply::Stored(true)),
        };
        state.writes += 1;
        if state.writes.is_multiple_of(SWEEP_EVERY) {
            state.records.retain(|_, (_, at)| *at > now);
        }
        // A ttl too long to represent is kept for as long as the fence key is.
        let expires = now.checked_add(ttl).unwrap_or_else(|| now + FENCE_KEPT);
        state
            .records
            .insert(record.to_owned(), (value.to_vec(), expires));
        Ok(RecordReply::Stored(true))
    }

    fn wakeups(&self) -> &Arc<Wakeups> {
        &self.wakeups
    }

    /// Nothing here waits on I/O; the bound only guards against a stuck runtime.
    fn op_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn lock_value(&self, key: &str) -> Result<Option<(String, Duration)>, StoreError> {
        let (state, now) = self.state_now();
        Ok(state
            .get(key, now)
            .map(|v| (v.data.clone(), v.expires_at.saturating_duration_since(now))))
    }

    async fn scan_keys(&self, walk: &KeyWalk<'_>) -> Result<KeyScan, StoreError> {
        let (state, now) = self.state_now();
        let (prefix, max) = (walk.prefix, walk.max);
        let skipped = |k: &str| walk.skip.is_some_and(|skip| k.starts_with(skip));
        let mut keys: Vec<String> = state
            .values
            .iter()
            .filter(|(k, v)| v.expires_at > now && k.starts_with(prefix) && !skipped(k))
            .map(|(k, _)| k.clone())
            .collect();
        drop(state);
        keys.sort_unstable();
        let complete = keys.len() <= max;
        keys.truncate(max);
        Ok(KeyScan { keys, complete })
    }

    async fn announce_revoked(&self, channel: &str, key: &str) -> Result<(), StoreError> {
        self.wakeups().revoked(channel, key);
        Ok(())
    }

    async fn set_holders(&self, key: &str) -> Result<Vec<SetHolder>, StoreError> {
        let (mut state, now) = self.state_now();
        Ok(state.holders(key, now).map_or_else(Vec::new, |set| {
            set.iter()
                .map(|(token, entries)| SetHolder {
                    token: token.clone(),
                    count: entries.count,
                    remaining_ttl: entries.expires_at.saturating_duration_since(now),
                })
                .collect()
        }))
    }

    /// As `leader.lua` `put`: the record holds the term, the writer's token (it never leaves
    /// this process) and the identity.
    async fn leader_put(&self, req: &LeaderPut<'_>) -> Result<bool, StoreError> {
        let LeaderPut {
            keys: LeaderKeys {
                lock: keys,
                record_key,
            },
            token,
            record,
            ttl,
        } = *req;
        let (mut state, now) = self.state_now();
        if state.held(&keys.lock, token, now) != Ownership::Ours {
            return Ok(false);
        }
        let data = format!("{}\n{}\n{}", record.0, token.as_str(), record.1);
        let changed = state.get(record_key, now).is_none_or(|v| v.data != data);
        state.set(record_key, data, ttl, now);
        drop(state);
        if changed {
            self.wakeups.wake_one(&keys.channel, false);
        }
        Ok(true)
    }

    /// As `leader.lua` `read`.
    async fn leader_read(&self, keys: &LeaderKeys<'_>) -> Result<Option<Record>, StoreError> {
        let (state, now) = self.state_now();
        let Some((term, writer, identity)) = state
            .get(keys.record_key, now)
            .and_then(|v| memory_record(&v.data))
        else {
            return Ok(None);
        };
        if state.held(&keys.lock.lock, &Token::from_stored(writer), now) != Ownership::Ours {
            return Ok(None);
        }
        Ok(Some((term, identity.to_owned())))
    }

    /// As `leader.lua` `drop`.
    async fn leader_drop(&self, keys: &LeaderKeys<'_>, token: &Token) -> Result<bool, StoreError> {
        let LeaderKeys {
            lock: keys,
            record_key,
        } = *keys;
        let (mut state, now) = self.state_now();
        let ours = state
            .get(record_key, now)
            .and_then(|v| memory_record(&v.data))
            .is_some_and(|(_, writer, _)| writer == token.as_str());
        if !ours {
            return Ok(false);
        }
        state.values.remove(record_key);
        drop(state);
        self.wakeups.wake_one(&keys.channel, false);
        Ok(true)
    }

    /// Every waiter is in this process, and a release wakes one at once: none marks a lock.
    fn waiters_mark_locks(&self) -> bool {
        false
    }

    #[cfg(feature = "test-util")]
    async fn peek_get(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self.get(key))
    }

    #[cfg(feature = "test-util")]
    async fn peek_pttl(&self, key: &str) -> Result<Option<Duration>, StoreError> {
        Ok(self.pttl(key))
    }

    #[cfg(feature = "test-util")]
    async fn peek_delete(&self, key: &str) -> Result<bool, StoreError> {
        Ok(self.delete(key))
    }

    #[cfg(feature = "test-util")]
    async fn peek_keys(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        Ok(self
            .live_keys()
            .into_iter()
            .filter(|k| k.starts_with(prefix))
            .collect())
    }

    #[cfg(feature = "test-util")]
    async fn peek_live_entries(&self, key: &str) -> Result<u64, StoreError> {
        Ok(self.live_entries(key))
    }
}

/// Why the in-memory store refuses replica acknowledgement.
const REPLICAS_UNSUPPORTED: &str = "replica acknowledgement (replicas(n, timeout)) needs a \
    single primary, plain or behind Sentinel; this client is on the in-memory store";

/// Why the in-memory store passes no lock straight to a waiter.
const HAND_OFF_UNSUPPORTED: &str = "the in-memory store wakes a local waiter at every release; \
    there is nothing to hand off";
