//! [`CircuitBreaker`]: stop asking a store that keeps failing, so that an outage costs each
//! check nothing instead of its whole deadline.
//!
//! Three phases, one owner (the mutex), one transition per event:
//!
//! ```text
//! Closed ──(N failures in a row)──▶ Open(d) ──(d passed: one probe admitted)──▶ Probing(d)
//!   ▲                                 ▲                                            │
//!   └──────────(any success)──────────┼────────────────────────────────────────────┤
//!                                     └────(probe failed or dropped: Open(2d, ≤ max))┘
//! ```
//!
//! While open (and while the probe is out), every check is answered by the limiter's outage
//! policy at once. The probe is a real check: the first one after the open interval goes to
//! the store, and its answer closes the breaker or opens it again for twice as long.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::InvalidPolicy;

/// The default number of failures in a row that open the breaker.
pub const DEFAULT_BREAKER_FAILURES: u32 = 3;
/// How long the breaker first stays open by default.
pub const DEFAULT_BREAKER_OPEN: Duration = Duration::from_millis(100);
/// The longest the breaker stays open by default (the interval doubles up to it).
pub const DEFAULT_BREAKER_MAX_OPEN: Duration = Duration::from_millis(500);
/// The longest open interval accepted.
const MAX_OPEN: Duration = Duration::from_secs(3600);

/// A circuit breaker for a rate limiter's store: after a few failures in a row (errors or
/// missed deadlines), the store is skipped for a short interval and every check is answered
/// by the limiter's [`Outage`](super::Outage) policy at once; then one check probes the store,
/// and its answer closes the breaker or opens it again for twice as long (up to a maximum).
///
/// Every [`RateLimiter`](super::RateLimiter) has one by default
/// ([`DEFAULT_BREAKER_FAILURES`] failures, open for [`DEFAULT_BREAKER_OPEN`] doubling to
/// [`DEFAULT_BREAKER_MAX_OPEN`]); its clones share it. Clones of a `CircuitBreaker` share
/// their state too, so one breaker can serve several limiters of one store.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use distlock::ratelimit::{CircuitBreaker, Policy, Rate};
///
/// let client = distlock::Client::in_memory();
/// let breaker = CircuitBreaker::new()
///     .trip_after(5)?
///     .open_for(Duration::from_millis(50), Duration::from_secs(2))?;
/// let api = client
///     .rate_limiter(Policy::gcra("api", Rate::per_second(100)?)?)
///     .circuit_breaker(Some(breaker.clone())).build()?;
/// let logins = client
///     .rate_limiter(Policy::gcra("login", Rate::per_minute(5)?)?)
///     .circuit_breaker(Some(breaker)).build()?; // one store, one breaker
/// # let _ = (api, logins);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CircuitBreaker {
    failures: u32,
    first_open: Duration,
    max_open: Duration,
    phase: Arc<Mutex<Phase>>,
}

impl std::fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("failures", &self.failures)
            .field("first_open", &self.first_open)
            .field("max_open", &self.max_open)
            .field("open", &self.is_open())
            .finish()
    }
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Asking the store; `failures` in a row so far.
    Closed { failures: u32 },
    /// Skipping the store until `until`; it was opened for `open_for`.
    Open { until: Instant, open_for: Duration },
    /// One probe is out; the others skip the store.
    Probing { open_for: Duration },
}

/// What the breaker lets a check do.
#[derive(Debug)]
pub(crate) enum Admit {
    /// Ask the store.
    Ask,
    /// Ask the store as the probe; report the answer through the guard.
    Probe(ProbeGuard),
    /// Skip the store; the next probe is due in this long.
    Skip(Duration),
}

/// The probe's duty to report: dropped without a report (its check was cancelled), it counts
/// as a failure, so the breaker never waits for a probe that will not come back.
#[derive(Debug)]
pub(crate) struct ProbeGuard {
    breaker: Option<CircuitBreaker>,
}

impl ProbeGuard {
    pub(crate) fn report(mut self, ok: bool) {
        if let Some(breaker) = self.breaker.take() {
            breaker.report(ok);
        }
    }
}

impl Drop for ProbeGuard {
    fn drop(&mut self) {
        if let Some(breaker) = self.breaker.take() {
            breaker.report(false);
        }
    }
}

impl Default for CircuitBreaker {
    fn default() -> Self {
        Self::new()
    }
}

impl CircuitBreaker {
    /// A breaker with the defaults: open after [`DEFAULT_BREAKER_FAILURES`] failures in a
    /// row, for [`DEFAULT_BREAKER_OPEN`], doubling up to [`DEFAULT_BREAKER_MAX_OPEN`].
    #[must_use]
    pub fn new() -> Self {
        Self {
            failures: DEFAULT_BREAKER_FAILURES,
            first_open: DEFAULT_BREAKER_OPEN,
            max_open: DEFAULT_BREAKER_MAX_OPEN,
            phase: Arc::new(Mutex::new(Phase::Closed { failures: 0 })),
        }
    }

    /// Whether `other` is this breaker (a clone of it, sharing its state), not merely one
    /// with the same settings.
    pub(crate) fn is_same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.phase, &other.phase)
    }

    /// Opens after `failures` failures in a row (at least 1).
    pub fn trip_after(mut self, failures: u32) -> Result<Self, InvalidPolicy> {
        if failures == 0 {
            return Err(InvalidPolicy::CircuitBreaker {
                reason: "it must trip after at least 1 failure".to_owned(),
            });
        }
        self.failures = failures;
        Ok(self)
    }

    /// Stays open `first` the first time, then twice as long after each failed probe, up to
    /// `max`. Both at least 1 ms and at most 1 hour, and `first ≤ max`.
    pub fn open_for(mut self, first: Duration, max: Duration) -> Result<Self, InvalidPolicy> {
        let range = Duration::from_millis(1)..=MAX_OPEN;
        if !range.contains(&first) || !range.contains(&max) || first > max {
            return Err(InvalidPolicy::CircuitBreaker {
                reason: format!(
                    "open_for({first:?}, {max:?}): both must be within 1ms..=1h, the first no \
                     longer than the longest"
                ),
            });
        }
        self.first_open = first;
        self.max_open = max;
        Ok(self)
    }

    /// Whether the store is being skipped right now (open, or a probe is out).
    #[must_use]
    pub fn is_open(&self) -> bool {
        !matches!(*self.phase(), Phase::Closed { .. })
    }

    fn phase(&self) -> MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a check may ask the store now.
    pub(crate) fn admit(&self) -> Admit {
        let now = Instant::now();
        let mut phase = self.phase();
        match *phase {
            Phase::Closed { .. } => Admit::Ask,
            Phase::Open { until, open_for } if now >= until => {
                *phase = Phase::Probing { open_for };
                drop(phase);
                Admit::Probe(ProbeGuard {
                    breaker: Some(self.clone()),
                })
            }
            Phase::Open { until, .. } => Admit::Skip(until - now),
            // The probe is out: it answers within its deadline.
            Phase::Probing { open_for } => Admit::Skip(open_for.min(self.first_open)),
        }
    }

    /// The store answered (`ok`) or failed a check that asked it.
    pub(crate) fn report(&self, ok: bool) {
        let mut phase = self.phase();
        let now = Instant::now();
        *phase = match (*phase, ok) {
            (_, true) => Phase::Closed { failures: 0 },
            (Phase::Closed { failures }, false) if failures + 1 >= self.failures => Phase::Open {
                until: now + self.first_open,
                open_for: self.first_open,
            },
            (Phase::Closed { failures }, false) => Phase::Closed {
                failures: failures + 1,
            },
            (Phase::Probing { open_for }, false) => {
                let open_for = open_for.saturating_mul(2).min(self.max_open);
                Phase::Open {
                    until: now + open_for,
                    open_for,
                }
            }
            // A check admitted before the breaker opened failed late: already open.
            (open @ Phase::Open { .. }, false) => open,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> CircuitBreaker {
        CircuitBreaker::new()
            .trip_after(2)
            .and_then(|b| b.open_for(Duration::from_millis(100), Duration::from_millis(300)))
            .expect("valid")
    }

    #[tokio::test(start_paused = true)]
    async fn opens_probes_and_backs_off() {
        let b = breaker();
        assert!(matches!(b.admit(), Admit::Ask));
        b.report(false);
        assert!(!b.is_open(), "one failure is not enough");
        b.report(false);
        assert!(b.is_open());
        assert!(matches!(b.admit(), Admit::Skip(d) if d == Duration::from_millis(100)));
        tokio::time::advance(Duration::from_millis(100)).await;
        let Admit::Probe(probe) = b.admit() else {
            panic!("the first check after the interval probes")
        };
        assert!(matches!(b.admit(), Admit::Skip(_)), "one probe at a time");
        probe.report(false);
        assert!(matches!(b.admit(), Admit::Skip(d) if d == Duration::from_millis(200)));
        tokio::time::advance(Duration::from_millis(200)).await;
        let Admit::Probe(probe) = b.admit() else {
            panic!("probe")
        };
        drop(probe); // cancelled: counts as failed
        assert!(matches!(b.admit(), Admit::Skip(d) if d == Duration::from_millis(300)));
        tokio::time::advance(Duration::from_millis(300)).await;
        let Admit::Probe(probe) = b.admit() else {
            panic!("probe")
        };
        probe.report(true);
        assert!(!b.is_open());
        assert!(matches!(b.admit(), Admit::Ask));
    }

    #[test]
    fn settings_are_checked() {
        assert!(CircuitBreaker::new().trip_after(0).is_err());
        let b = CircuitBreaker::new;
        assert!(
            b().open_for(Duration::ZERO, Duration::from_secs(1))
                .is_err()
        );
        assert!(
            b().open_for(Duration::from_secs(2), Duration::from_secs(1))
                .is_err()
        );
        assert!(b().open_for(Duration::from_secs(1), Duration::MAX).is_err());
        assert!(
            b().open_for(Duration::from_millis(1), Duration::from_secs(3600))
                .is_ok()
        );
    }
}
