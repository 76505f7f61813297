//! What a limiter does when its store cannot answer: the [`Outage`] policy, why the store
//! gave no answer, and the outage's log and metrics: one line when it starts, a summary at
//! most once a minute while it lasts, one line with the count when it ends, never a line per
//! refused request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::metrics::{self, Outcome, Reason};
use crate::error::{RateLimitError, StoreError};

/// How often a summary of an ongoing outage is logged at most.
const SUMMARY_EVERY: Duration = Duration::from_secs(60);

/// What a check does when the store cannot answer in time (down, slow, refusing, or more
/// than [`max_in_flight`](super::RateLimiterBuilder::max_in_flight) checks already waiting).
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use distlock::ratelimit::{Outage, Policy, Rate};
///
/// let client = distlock::Client::in_memory();
/// let policy = Policy::gcra("login", Rate::per_minute(5)?)?;
/// // Logins: better refuse than let a password-guessing burst through unmetered.
/// let logins = client.rate_limiter(policy.clone()).on_outage(Outage::FailClosed).build()?;
/// // Page views: better serve than fail while Redis restarts.
/// let views = client.rate_limiter(policy).on_outage(Outage::FailOpen).build()?;
/// # let _ = (logins, views);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Outage {
    /// The check fails with [`RateLimitError::Store`] (or
    /// [`Overloaded`](RateLimitError::Overloaded)) within its deadline; the caller refuses
    /// the request as unavailable (the tower layer answers 503 with `Retry-After`). Nothing
    /// gets through unmetered. The default.
    #[default]
    FailClosed,
    /// The check allows the request ([`Origin::FailOpen`](super::Origin::FailOpen)): availability over protection.
    FailOpen,
    /// The check is decided by an in-memory limiter with the same policies, local to this
    /// process ([`Origin::LocalFallback`](super::Origin::LocalFallback)): with `n` replicas, up to `n` times the limit
    /// gets through while the store is away.
    LocalFallback,
}

impl Outage {
    /// The name in configuration: `"fail-closed"`, `"fail-open"` or `"local-fallback"`.
    /// [`FromStr`](std::str::FromStr) also takes `_` or a space for `-` and ignores case.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::FailClosed => "fail-closed",
            Self::FailOpen => "fail-open",
            Self::LocalFallback => "local-fallback",
        }
    }

    const ALL: [Self; 3] = [Self::FailClosed, Self::FailOpen, Self::LocalFallback];
}

impl std::fmt::Display for Outage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Outage {
    type Err = ParseOutageError;

    /// `fail-closed`, `fail-open` or `local-fallback`; `_` or a space may stand for `-`, and
    /// case does not matter (`"Fail open"`, `"LOCAL_FALLBACK"`).
    ///
    /// ```
    /// use distlock::ratelimit::Outage;
    ///
    /// assert_eq!("fail-open".parse(), Ok(Outage::FailOpen));
    /// assert_eq!("Local fallback".parse(), Ok(Outage::LocalFallback));
    /// let err = "open".parse::<Outage>().unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "unknown outage policy \"open\"; use fail-closed, fail-open or local-fallback"
    /// );
    /// ```
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let wanted = super::text::kebab(text);
        Self::ALL
            .into_iter()
            .find(|outage| outage.name() == wanted)
            .ok_or_else(|| ParseOutageError {
                input: text.to_owned(),
            })
    }
}

/// A text that names no [`Outage`] policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown outage policy {input:?}; use fail-closed, fail-open or local-fallback")]
pub struct ParseOutageError {
    input: String,
}

impl ParseOutageError {
    /// The text that was parsed.
    #[must_use]
    pub fn input(&self) -> &str {
        &self.input
    }
}

/// `Outage` as its name (`"fail-open"`), both ways.
#[cfg(feature = "serde")]
mod serde_impl {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Outage;
    use crate::ratelimit::text::deserialize_parsed;

    impl Serialize for Outage {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_str(self.name())
        }
    }

    impl<'de> Deserialize<'de> for Outage {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserialize_parsed(
                deserializer,
                "\"fail-closed\", \"fail-open\" or \"local-fallback\"",
            )
        }
    }
}

/// Why the store gave no answer.
pub(super) enum Unavailable {
    Store(StoreError),
    Overloaded(usize),
    /// The circuit breaker skipped the store; the next probe is due in this long.
    Skipped(Duration),
}

impl From<Unavailable> for RateLimitError {
    fn from(u: Unavailable) -> Self {
        match u {
            Unavailable::Store(e) => Self::Store(e),
            Unavailable::Overloaded(in_flight) => Self::Overloaded { in_flight },
            Unavailable::Skipped(retry_in) => Self::CircuitOpen { retry_in },
        }
    }
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Store(e) => e.fmt(f),
            Self::Overloaded(n) => write!(f, "{n} checks already waiting on the store"),
            Self::Skipped(d) => write!(f, "circuit breaker open, next probe in {d:?}"),
        }
    }
}

impl Unavailable {
    fn reason(&self) -> Reason {
        match self {
            Self::Store(_) => Reason::Store,
            Self::Overloaded(_) => Reason::Overloaded,
            Self::Skipped(_) => Reason::CircuitOpen,
        }
    }
}

/// One limiter's (and its clones') view of its store's availability. The store answering
/// costs one atomic load while nothing is wrong.
pub(super) struct OutageLog {
    /// The limiter's first policy: the metrics' label.
    policy: Arc<str>,
    degraded: AtomicBool,
    ongoing: Mutex<Option<Ongoing>>,
}

struct Ongoing {
    since: Instant,
    /// Operations the store did not answer since `since`.
    unanswered: u64,
    last_summary: Instant,
    breaker_open: bool,
}

impl OutageLog {
    pub(super) fn new(policy: Arc<str>) -> Self {
        Self {
            policy,
            degraded: AtomicBool::new(false),
            ongoing: Mutex::new(None),
        }
    }

    fn ongoing(&self) -> std::sync::MutexGuard<'_, Option<Ongoing>> {
        self.ongoing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The store did not answer an operation (`why`), and `outage` decided it (`None`: a
    /// reset, refund or penalty, which fails).
    pub(super) fn unanswered(&self, why: &Unavailable, outage: Option<Outage>) {
        let outcome = match outage {
            Some(Outage::FailClosed) => Outcome::FailedClosed,
            Some(Outage::FailOpen) => Outcome::FailedOpen,
            Some(Outage::LocalFallback) => Outcome::LocalFallback,
            None => Outcome::Error,
        };
        metrics::unavailable(&self.policy, why.reason(), outcome);
        let skipped = matches!(why, Unavailable::Skipped(_));
        let now = Instant::now();
        let mut ongoing = self.ongoing();
        match &mut *ongoing {
            None => {
                self.degraded.store(true, Ordering::Relaxed);
                tracing::warn!(
                    target: "distlock::ratelimit",
                    policy = &*self.policy,
                    error = %why,
                    ?outage,
                    "rate-limit store unavailable; applying the outage policy until it answers again"
                );
                *ongoing = Some(Ongoing {
                    since: now,
                    unanswered: 1,
                    last_summary: now,
                    breaker_open: skipped,
                });
                if skipped {
                    metrics::breaker_open(&self.policy, true);
                }
            }
            Some(o) => {
                o.unanswered += 1;
                if skipped && !o.breaker_open {
                    o.breaker_open = true;
                    metrics::breaker_open(&self.policy, true);
                }
                if now - o.last_summary >= SUMMARY_EVERY {
                    o.last_summary = now;
                    tracing::warn!(
                        target: "distlock::ratelimit",
                        policy = &*self.policy,
                        for_s = (now - o.since).as_secs(),
                        unanswered = o.unanswered,
                        error = %why,
                        "rate-limit store still unavailable"
                    );
                }
            }
        }
    }

    /// The store answered.
    pub(super) fn answered(&self) {
        if !self.degraded.load(Ordering::Relaxed) {
            return;
        }
        let Some(ended) = self.ongoing().take() else {
            return;
        };
        self.degraded.store(false, Ordering::Relaxed);
        if ended.breaker_open {
            metrics::breaker_open(&self.policy, false);
        }
        tracing::info!(
            target: "distlock::ratelimit",
            policy = &*self.policy,
            after_ms = u64::try_from(ended.since.elapsed().as_millis()).unwrap_or(u64::MAX),
            unanswered = ended.unanswered,
            "rate-limit store is back"
        );
    }
}
