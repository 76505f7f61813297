//! A concurrency limit that follows measured latency, shared by every replica.
//!
//! Each replica measures the latency of the requests it lets through and notes when the
//! limit held one back. Every `window` it looks at what it saw and votes on one limit kept in
//! the store:
//!
//! * **decrease** when the window's 90th percentile latency is above `tolerance` times the
//!   baseline (the lowest 10th percentile of the last 30 windows: the latency of an unloaded
//!   backend): the limit is multiplied by `backoff` (at least one less);
//! * **increase** when the limit held requests back (the limit was binding) and latency stayed
//!   near the baseline: the limit grows by `step`;
//! * otherwise it only reads the limit.
//!
//! The store applies at most one step per window of its own clock, however many replicas
//! vote: the first decrease of a window, else the first increase. So the replicas converge on
//! one limit (additive increase, multiplicative decrease: it settles where latency starts to
//! rise, the knee of the backend's capacity), instead of each guessing alone, and more
//! replicas do not make it swing harder. Between votes each replica uses the limit it last
//! read.
//!
//! `distlock-tower`'s `ConcurrencyLimitLayer` uses it with `.adaptive(..)`: the limit is the
//! permits of the layer's semaphores.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//!
//! let client = distlock::Client::in_memory();
//! let limit = client
//!     .adaptive_limit("backend")
//!     .initial(16)
//!     .bounds(2, 256)
//!     .window(Duration::from_millis(500))
//!     .build()?;
//! assert_eq!(limit.current(), 16);
//! // Per request: how long it took once let through, or that the limit held it back.
//! limit.record(Duration::from_millis(12));
//! limit.held_back();
//! // Each window (the layer calls this for you):
//! let now = limit.tick().await?;
//! assert!(now >= 2 && now <= 256);
//! # Ok(()) }
//! ```

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::error::{InvalidName, StoreError};
use crate::store::{AdaptiveCall, Capability, Vote};

/// How many windows the baseline remembers.
pub const BASELINE_WINDOWS: usize = 30;

/// The most latencies a window keeps (a sample of the first ones beyond: enough for a
/// percentile).
const MAX_SAMPLES: usize = 4096;

/// What an adaptive limit could not do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdaptiveError {
    /// The name cannot be a key: empty, or too long.
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    /// A setting out of range.
    #[error("adaptive limit setting `{setting}`: {reason}")]
    InvalidSetting {
        /// The builder's method.
        setting: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The store cannot count holders (a Redlock quorum): see
    /// [`ClientBuilder::counting_on`](crate::ClientBuilder::counting_on).
    #[error("{reason}")]
    UnsupportedStore {
        /// Why, and what to use instead.
        reason: &'static str,
    },
    /// The store failed or did not answer in time.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Settings of an [`AdaptiveLimit`]; from [`Client::adaptive_limit`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until it is built"]
pub struct AdaptiveLimitBuilder {
    client: Client,
    name: String,
    initial: u32,
    min: u32,
    max: u32,
    window: Duration,
    tolerance: f64,
    backoff: f64,
    step: u32,
}

impl AdaptiveLimitBuilder {
    pub(crate) fn new(client: Client, name: String) -> Self {
        Self {
            client,
            name,
            initial: 16,
            min: 1,
            max: 1_000,
            window: Duration::from_secs(1),
            tolerance: 1.5,
            backoff: 0.9,
            step: 1,
        }
    }

    /// The limit before any vote (default 16).
    pub fn initial(mut self, initial: u32) -> Self {
        self.initial = initial;
        self
    }

    /// The least and the greatest limit (default 1 and 1,000; `1 <= min <= max <=`
    /// [`MAX_PERMITS`](crate::MAX_PERMITS)).
    pub fn bounds(mut self, min: u32, max: u32) -> Self {
        self.min = min;
        self.max = max;
        self
    }

    /// How often each replica votes, and how often the limit may move (default 1 s; 10 ms to
    /// 1 h).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// How far above the baseline the 90th percentile latency may go before the limit falls
    /// (default 1.5: 50% slower than unloaded; above 1, at most 100).
    pub fn tolerance(mut self, tolerance: f64) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// What a decrease multiplies the limit by (default 0.9; above 0, below 1).
    pub fn backoff(mut self, backoff: f64) -> Self {
        self.backoff = backoff;
        self
    }

    /// What an increase adds (default 1; at least 1).
    pub fn step(mut self, step: u32) -> Self {
        self.step = step;
        self
    }

    /// The limit, or the first setting out of range.
    ///
    /// # Errors
    /// [`AdaptiveError::InvalidSetting`], [`AdaptiveError::InvalidName`], and
    /// [`AdaptiveError::UnsupportedStore`] on a store that cannot count holders.
    pub fn build(self) -> Result<AdaptiveLimit, AdaptiveError> {
        let bad = |setting: &'static str, reason: String| {
            Err(AdaptiveError::InvalidSetting { setting, reason })
        };
        if self.min == 0 || self.min > self.max || self.max > crate::MAX_PERMITS {
            return bad(
                "bounds",
                format!(
                    "{}..={} must have 1 <= min <= max <= {}",
                    self.min,
                    self.max,
                    crate::MAX_PERMITS
                ),
            );
        }
        if !(self.min..=self.max).contains(&self.initial) {
            return bad(
                "initial",
                format!("{} is outside {}..={}", self.initial, self.min, self.max),
            );
        }
        if !(Duration::from_millis(10)..=Duration::from_secs(3600)).contains(&self.window) {
            return bad("window", format!("{:?} is outside 10ms..=1h", self.window));
        }
        if !(self.tolerance > 1.0 && self.tolerance <= 100.0) {
            return bad(
                "tolerance",
                format!("{} is not in (1, 100]", self.tolerance),
            );
        }
        if !(self.backoff > 0.0 && self.backoff < 1.0) {
            return bad("backoff", format!("{} is not in (0, 1)", self.backoff));
        }
        if self.step == 0 {
            return bad("step", "must be at least 1".to_owned());
        }
        let counting = self.client.counting().clone();
        if let Err(refused) = counting.core().supports(Capability::HolderSets) {
            return Err(AdaptiveError::UnsupportedStore {
                reason: refused.reason,
            });
        }
        let key = crate::keys::adaptive_limit(counting.core().prefix(), &self.name)?;
        Ok(AdaptiveLimit {
            inner: Arc::new(Inner {
                client: counting,
                key,
                name: self.name,
                initial: self.initial,
                min: self.min,
                max: self.max,
                window: self.window,
                tolerance: self.tolerance,
                // Thousandths, in 1..=999.
                backoff: (self.backoff * 1000.0).round().clamp(1.0, 999.0) as u32,
                step: self.step,
                current: AtomicU32::new(self.initial),
                seen: Mutex::new(Seen::default()),
                voting: AtomicBool::new(false),
            }),
        })
    }
}

/// A concurrency limit shared by every replica, following latency; see the
/// [module docs](self). Cheap to clone.
#[derive(Debug, Clone)]
pub struct AdaptiveLimit {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: Client,
    key: String,
    name: String,
    initial: u32,
    min: u32,
    max: u32,
    window: Duration,
    tolerance: f64,
    backoff: u32,
    step: u32,
    current: AtomicU32,
    seen: Mutex<Seen>,
    voting: AtomicBool,
}

/// What this replica saw in the current window, and the baseline.
#[derive(Debug, Default)]
struct Seen {
    started: Option<Instant>,
    latencies: Vec<Duration>,
    held_back: bool,
    /// The 10th percentile of each recent window, newest last.
    lows: VecDeque<Duration>,
}

/// What a window's observations ask of the limit.
fn judge(seen: &mut Seen, tolerance: f64) -> Vote {
    let held_back = std::mem::take(&mut seen.held_back);
    let mut latencies = std::mem::take(&mut seen.latencies);
    if latencies.is_empty() {
        return if held_back {
            Vote::Increase
        } else {
            Vote::Read
        };
    }
    latencies.sort_unstable();
    let at = |q: f64| {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "an index into a short list"
        )]
        let i = ((latencies.len() - 1) as f64 * q).round() as usize;
        latencies[i.min(latencies.len() - 1)]
    };
    let (low, high) = (at(0.1), at(0.9));
    seen.lows.push_back(low);
    if seen.lows.len() > BASELINE_WINDOWS {
        seen.lows.pop_front();
    }
    let baseline = seen.lows.iter().min().copied().unwrap_or(low);
    if latencies.len() >= 3 && high.as_secs_f64() > baseline.as_secs_f64() * tolerance {
        Vote::Decrease
    } else if held_back {
        Vote::Increase
    } else {
        Vote::Read
    }
}

impl AdaptiveLimit {
    /// The name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The limit as this replica last read it.
    #[must_use]
    pub fn current(&self) -> u32 {
        self.inner.current.load(Ordering::Relaxed)
    }

    /// Notes a request let through that took `latency` (from the permit to the response).
    pub fn record(&self, latency: Duration) {
        let mut seen = self.seen();
        seen.started.get_or_insert_with(Instant::now);
        if seen.latencies.len() < MAX_SAMPLES {
            seen.latencies.push(latency);
        }
    }

    /// Notes a request the limit held back (refused or made to wait): the limit was binding.
    pub fn held_back(&self) {
        let mut seen = self.seen();
        seen.started.get_or_insert_with(Instant::now);
        seen.held_back = true;
    }

    /// Whether a window has passed since this replica's last vote (or since its first
    /// observation), so that [`tick`](Self::tick) would vote.
    #[must_use]
    pub fn due(&self) -> bool {
        self.seen()
            .started
            .is_some_and(|started| started.elapsed() >= self.inner.window)
    }

    /// Votes on the limit from what this replica saw since its last vote, and returns the
    /// shared limit after the vote (also kept for [`current`](Self::current)). Call it once
    /// per window; the layer does.
    ///
    /// # Errors
    /// [`AdaptiveError::Store`]: the limit in use stays.
    pub async fn tick(&self) -> Result<u32, AdaptiveError> {
        let vote = {
            let mut seen = self.seen();
            seen.started = Some(Instant::now());
            judge(&mut seen, self.inner.tolerance)
        };
        self.vote(vote).await
    }

    /// [`tick`](Self::tick) in the background if a window has passed and no vote is in
    /// flight: what the layer calls after each request.
    pub fn tick_if_due(&self) {
        if !self.due() || self.inner.voting.swap(true, Ordering::AcqRel) {
            return;
        }
        let limit = self.clone();
        tokio::spawn(async move {
            if let Err(err) = limit.tick().await {
                tracing::debug!(limit = %limit.inner.name, error = %err, "adaptive limit vote failed; the limit in use stays");
            }
            limit.inner.voting.store(false, Ordering::Release);
        });
    }

    /// Reads the shared limit (creating it at its initial value), without a vote.
    ///
    /// # Errors
    /// [`AdaptiveError::Store`].
    pub async fn refresh(&self) -> Result<u32, AdaptiveError> {
        self.vote(Vote::Read).await
    }

    async fn vote(&self, vote: Vote) -> Result<u32, AdaptiveError> {
        let inner = &self.inner;
        let call = AdaptiveCall {
            key: &inner.key,
            vote,
            initial: inner.initial,
            min: inner.min,
            max: inner.max,
            window: inner.window,
            backoff: inner.backoff,
            step: inner.step,
            // The state outlives many windows without a vote, then goes.
            keep: inner
                .window
                .saturating_mul(100)
                .max(Duration::from_secs(3600)),
        };
        let limit = inner.client.core().store().adaptive(&call).await?;
        let before = inner.current.swap(limit, Ordering::Relaxed);
        if before != limit {
            tracing::debug!(limit = %inner.name, from = before, to = limit, ?vote, "adaptive limit moved");
        }
        #[cfg(feature = "metrics")]
        metrics::gauge!("distlock_adaptive_limit", "name" => inner.name.clone())
            .set(f64::from(limit));
        Ok(limit)
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.inner
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Client {
    /// A concurrency limit named `name`, shared by every client of the store and moved by
    /// the latency they measure; see [`adaptive`](crate::adaptive). On the store counting
    /// primitives go to (refused on a Redlock quorum without
    /// [`counting_on`](crate::ClientBuilder::counting_on)).
    pub fn adaptive_limit(&self, name: impl Into<String>) -> AdaptiveLimitBuilder {
        AdaptiveLimitBuilder::new(self.clone(), name.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_window_votes_by_latency_and_held_back_requests() {
        let mut seen = Seen::default();
        // Nothing seen: read only; held back alone: increase.
        assert_eq!(judge(&mut seen, 1.5), Vote::Read);
        seen.held_back = true;
        assert_eq!(judge(&mut seen, 1.5), Vote::Increase);
        // Fast, and held back: increase; the baseline is 10 ms.
        seen.latencies = vec![ms(10); 20];
        seen.held_back = true;
        assert_eq!(judge(&mut seen, 1.5), Vote::Increase);
        // Slow: decrease, held back or not.
        seen.latencies = vec![ms(10), ms(30), ms(30), ms(30), ms(30)];
        seen.held_back = true;
        assert_eq!(judge(&mut seen, 1.5), Vote::Decrease);
        // Within the tolerance, not held back: read only.
        seen.latencies = vec![ms(12); 10];
        assert_eq!(judge(&mut seen, 1.5), Vote::Read);
        // The baseline forgets after BASELINE_WINDOWS windows.
        for _ in 0..BASELINE_WINDOWS {
            seen.latencies = vec![ms(40); 10];
            judge(&mut seen, 1.5);
        }
        seen.latencies = vec![ms(45); 10];
        assert_eq!(judge(&mut seen, 1.5), Vote::Read, "40 ms is the new normal");
    }

    #[tokio::test]
    async fn settings_out_of_range_are_typed_errors() {
        let client = Client::in_memory();
        let b = || client.adaptive_limit("x");
        for (built, setting) in [
            (b().bounds(0, 5).build(), "bounds"),
            (b().bounds(6, 5).build(), "bounds"),
            (b().initial(2000).build(), "initial"),
            (b().window(Duration::ZERO).build(), "window"),
            (b().tolerance(1.0).build(), "tolerance"),
            (b().tolerance(f64::NAN).build(), "tolerance"),
            (b().backoff(1.0).build(), "backoff"),
            (b().step(0).build(), "step"),
        ] {
            assert!(
                matches!(built, Err(AdaptiveError::InvalidSetting { setting: s, .. }) if s == setting),
                "{setting}"
            );
        }
        assert!(matches!(
            client.adaptive_limit("").build(),
            Err(AdaptiveError::InvalidName(_))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn the_store_moves_the_limit_at_most_once_a_window() {
        let client = Client::in_memory();
        let build = || {
            client
                .adaptive_limit("shared")
                .initial(10)
                .bounds(2, 12)
                .window(ms(100))
                .build()
                .expect("valid")
        };
        let (a, b) = (build(), build());
        assert_eq!(a.vote(Vote::Increase).await.expect("vote"), 11);
        assert_eq!(
            b.vote(Vote::Increase).await.expect("vote"),
            11,
            "one step a window"
        );
        assert_eq!(
            b.vote(Vote::Decrease).await.expect("vote"),
            9,
            "a decrease still goes"
        );
        assert_eq!(a.vote(Vote::Decrease).await.expect("vote"), 9);
        assert_eq!(a.current(), 9);
        tokio::time::advance(ms(100)).await;
        assert_eq!(a.vote(Vote::Increase).await.expect("vote"), 10);
        tokio::time::advance(ms(100)).await;
        assert_eq!(a.vote(Vote::Increase).await.expect("vote"), 11);
        tokio::time::advance(ms(100)).await;
        assert_eq!(a.vote(Vote::Increase).await.expect("vote"), 12);
        tokio::time::advance(ms(100)).await;
        assert_eq!(
            a.vote(Vote::Increase).await.expect("vote"),
            12,
            "at most max"
        );
        for _ in 0..20 {
            tokio::time::advance(ms(100)).await;
            a.vote(Vote::Decrease).await.expect("vote");
        }
        assert_eq!(b.refresh().await.expect("read"), 2, "at least min");
    }
}
