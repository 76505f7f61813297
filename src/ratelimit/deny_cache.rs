//! The local deny cache: after the store denies a subject and says when to come back, the
//! same subject is denied locally until then, with no round trip.
//!
//! It is exact, not a heuristic: a denial of cost `c` with `retry_after = t` means no
//! request of cost `c` or more can pass before `t` (others only consume more, never less),
//! and `t` is counted from when the check was *sent*, which is no later than the moment the
//! store decided. Smaller costs and peeks below the cached cost still ask the store.
//!
//! Bounded: at most `capacity` subjects. When full, expired entries are swept, but only once
//! the earliest expiry has passed (so a full cache of live entries costs nothing per
//! insert); if it is still full, the new denial is simply not cached.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio::time::Instant;

use super::{Decision, Origin};

pub(crate) struct DenyCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

struct Inner {
    entries: HashMap<String, Entry>,
    /// No entry expires before this; sweeping earlier would free nothing.
    earliest: Option<Instant>,
}

struct Entry {
    /// When the check was sent; the cached figures are as of then.
    at: Instant,
    until: Instant,
    cost: u32,
    decision: Decision,
}

impl DenyCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                earliest: None,
            }),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A cached denial that covers a request of `cost` (peeks count as 1) at `now`.
    pub(crate) fn lookup(&self, subject: &str, cost: u32, now: Instant) -> Option<Decision> {
        let mut inner = self.inner();
        let entry = inner.entries.get(subject)?;
        if now >= entry.until {
            inner.entries.remove(subject);
            return None;
        }
        (cost.max(1) >= entry.cost).then(|| entry.decision.aged(now - entry.at, Origin::DenyCache))
    }

    /// Remembers a denial of a check sent at `sent`.
    pub(crate) fn insert(&self, subject: &str, cost: u32, sent: Instant, decision: &Decision) {
        let until = sent + decision.retry_after;
        let now = Instant::now();
        if until <= now {
            return;
        }
        let mut inner = self.inner();
        if inner.entries.len() >= self.capacity && !inner.entries.contains_key(subject) {
            if inner.earliest.is_some_and(|e| e <= now) {
                inner.entries.retain(|_, e| e.until > now);
                inner.earliest = inner.entries.values().map(|e| e.until).min();
            }
            if inner.entries.len() >= self.capacity {
                return;
            }
        }
        inner.earliest = Some(inner.earliest.map_or(until, |e| e.min(until)));
        inner.entries.insert(
            subject.to_owned(),
            Entry {
                at: sent,
                until,
                cost: cost.max(1),
                decision: decision.clone(),
            },
        );
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn len(&self) -> usize {
        self.inner().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::ratelimit::PolicyDecision;

    fn denial(retry_ms: u64) -> Decision {
        Decision::from_policies(
            vec![PolicyDecision {
                policy: Arc::from("p"),
                allowed: false,
                limit: 1,
                remaining: 0,
                retry_after: Duration::from_millis(retry_ms),
                reset_after: Duration::from_millis(retry_ms),
            }],
            Origin::Store,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn denies_until_retry_after_for_the_same_or_a_larger_cost() {
        let cache = DenyCache::new(4);
        let sent = Instant::now();
        cache.insert("a", 2, sent, &denial(100));
        assert!(
            cache.lookup("a", 1, Instant::now()).is_none(),
            "a smaller cost asks"
        );
        let hit = cache.lookup("a", 3, Instant::now()).expect("cached");
        assert_eq!(hit.origin, Origin::DenyCache);
        tokio::time::advance(Duration::from_millis(60)).await;
        let hit = cache.lookup("a", 2, Instant::now()).expect("still cached");
        assert_eq!(hit.retry_after, Duration::from_millis(40));
        tokio::time::advance(Duration::from_millis(40)).await;
        assert!(cache.lookup("a", 2, Instant::now()).is_none(), "expired");
        assert_eq!(cache.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn stays_bounded_and_sweeps_only_when_something_expired() {
        let cache = DenyCache::new(3);
        let now = Instant::now();
        for (i, ms) in [10, 20, 30].into_iter().enumerate() {
            cache.insert(&format!("s{i}"), 1, now, &denial(ms));
        }
        cache.insert("late", 1, now, &denial(50));
        assert_eq!(cache.len(), 3, "full of live entries: not cached");
        assert!(cache.lookup("late", 1, Instant::now()).is_none());
        tokio::time::advance(Duration::from_millis(15)).await;
        cache.insert("late", 1, Instant::now(), &denial(50));
        assert_eq!(cache.len(), 3, "one expired entry made room");
        assert!(cache.lookup("late", 1, Instant::now()).is_some());
        assert!(cache.lookup("s0", 1, Instant::now()).is_none());
    }
}
