//! Rates per subject: a limiter whose policies take each subject's rate from a lookup the
//! user supplies (a tenant's plan), cached, with one lookup at a time per subject.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio::time::Instant;

use super::deny_cache::{Recovery, recoveries};
use super::{Policy, Rate};
use crate::store::PolicyParams;

/// The default time a looked-up rate is kept.
pub const DEFAULT_RATE_CACHE_TTL: Duration = Duration::from_secs(60);
/// The default number of subjects whose rates are kept.
pub const DEFAULT_RATE_CACHE_SUBJECTS: usize = 10_000;
/// How long a failed lookup's fallback is kept before the lookup is tried again.
const FAILED_LOOKUP_KEPT: Duration = Duration::from_secs(1);
/// The longest looked-up rates are kept, whatever the cache's ttl (a point in time must
/// exist that far ahead: `Duration::MAX` would overflow one).
const MAX_KEPT: Duration = super::MAX_PERIOD;

/// What a [`RateLookup`] can fail with.
pub type LookupError = Box<dyn std::error::Error + Send + Sync>;

/// One subject's rates, by policy name; the limiter's policies that are not named keep their
/// own rate.
///
/// ```
/// # fn main() -> Result<(), distlock::InvalidPolicy> {
/// use distlock::ratelimit::{Rate, SubjectRates};
///
/// let pro = SubjectRates::new()
///     .rate("per-second", Rate::per_second(100)?)
///     .rate("per-day", Rate::per_day(1_000_000)?);
/// # let _ = pro;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubjectRates {
    rates: Vec<(String, Rate)>,
}

impl SubjectRates {
    /// No rates of its own: the limiter's policies as they are.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The rate of the policy named `policy` for this subject.
    #[must_use]
    pub fn rate(mut self, policy: impl Into<String>, rate: Rate) -> Self {
        let policy = policy.into();
        self.rates.retain(|(name, _)| *name != policy);
        self.rates.push((policy, rate));
        self
    }
}

/// Where a limiter finds a subject's rates: a database, a plan service, a configuration map.
/// Implemented by every `Fn(String) -> impl Future<Output = Result<SubjectRates, E>>`.
///
/// The limiter caches the answers (see
/// [`rates_by_subject`](super::RateLimiterBuilder::rates_by_subject)); a lookup that fails (or takes
/// longer than the limiter's deadline, or names a rate its policy cannot take) is logged, and
/// the subject keeps the rates it had (or the policies' own) for a second before the lookup
/// is tried again.
pub trait RateLookup: Send + Sync + 'static {
    /// The rates of `subject`.
    fn rates(
        &self,
        subject: String,
    ) -> Pin<Box<dyn Future<Output = Result<SubjectRates, LookupError>> + Send + 'static>>;
}

impl<F, Fut, E> RateLookup for F
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<SubjectRates, E>> + Send + 'static,
    E: Into<LookupError>,
{
    fn rates(
        &self,
        subject: String,
    ) -> Pin<Box<dyn Future<Output = Result<SubjectRates, LookupError>> + Send + 'static>> {
        let future = self(subject);
        Box::pin(async move { future.await.map_err(Into::into) })
    }
}

/// A subject's policies as the store sees them.
#[derive(Debug, Clone)]
pub(crate) struct Effective {
    pub(crate) policies: Arc<[Policy]>,
    pub(crate) params: Arc<[PolicyParams]>,
    /// How the policies recover, for the deny cache.
    pub(super) recovery: Arc<[Recovery]>,
    /// How long sliding logs are kept after their newest entry, µs (0: their window; see
    /// [`keep_logs_for`](super::RateLimiterBuilder::keep_logs_for)).
    keep_log_us: i64,
}

impl Effective {
    pub(crate) fn of(policies: Arc<[Policy]>, keep_log_us: i64) -> Arc<Self> {
        let params = policies
            .iter()
            .map(|p| PolicyParams {
                keep_us: keep_log_us,
                ..p.params()
            })
            .collect();
        let recovery = recoveries(&policies);
        Arc::new(Self {
            policies,
            params,
            recovery,
            keep_log_us,
        })
    }
}

/// The lookup and its cache, shared by a limiter's clones.
pub(crate) struct RateTable {
    lookup: Arc<dyn RateLookup>,
    ttl: Duration,
    capacity: usize,
    slots: Mutex<HashMap<String, Arc<SubjectEntry>>>,
}

/// One subject's rates: filled by one lookup, which concurrent checks of the subject await.
#[derive(Default)]
struct SubjectEntry {
    cell: OnceCell<(Arc<Effective>, Instant)>,
}

impl SubjectEntry {
    fn fresh(&self, now: Instant) -> bool {
        self.cell.get().is_none_or(|(_, until)| *until > now)
    }
}

impl RateTable {
    pub(crate) fn new(lookup: Arc<dyn RateLookup>, ttl: Duration, capacity: usize) -> Self {
        Self {
            lookup,
            ttl,
            capacity,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// `subject`'s policies: `base` with the looked-up rates, from the cache or one lookup
    /// (bounded by `deadline`).
    pub(crate) async fn effective(
        &self,
        subject: &str,
        base: &Arc<Effective>,
        deadline: Duration,
    ) -> Arc<Effective> {
        let now = Instant::now();
        let (slot, stale) = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            match slots.get(subject) {
                Some(slot) if slot.fresh(now) => (Arc::clone(slot), None),
                existing => {
                    let stale = existing.and_then(|s| s.cell.get().map(|(e, _)| Arc::clone(e)));
                    if slots.len() >= self.capacity {
                        slots.retain(|_, s| s.fresh(now));
                        if slots.len() >= self.capacity {
                            slots.clear();
                        }
                    }
                    let slot = Arc::new(SubjectEntry::default());
                    slots.insert(subject.to_owned(), Arc::clone(&slot));
                    (slot, stale)
                }
            }
        };
        let (effective, _) = slot
            .cell
            .get_or_init(|| async {
                let fallback = || stale.clone().unwrap_or_else(|| Arc::clone(base));
                let answer =
                    tokio::time::timeout(deadline, self.lookup.rates(subject.to_owned())).await;
                let failed = |why: String| {
                    tracing::warn!(
                        target: "distlock::ratelimit",
                        subject = %crate::logging::redacted(subject),
                        error = %why,
                        "rate lookup failed; the subject keeps its previous rates for now"
                    );
                    (
                        fallback(),
                        Instant::now() + FAILED_LOOKUP_KEPT.min(self.ttl),
                    )
                };
                match answer {
                    Err(_) => failed(format!("no answer within {deadline:?}")),
                    Ok(Err(err)) => failed(err.to_string()),
                    Ok(Ok(rates)) => match apply(base, &rates) {
                        Ok(effective) => (effective, Instant::now() + self.ttl.min(MAX_KEPT)),
                        Err(why) => failed(why),
                    },
                }
            })
            .await;
        Arc::clone(effective)
    }
}

/// `base` with `rates` applied; an unknown policy or a rate its algorithm refuses is an error.
fn apply(base: &Arc<Effective>, rates: &SubjectRates) -> Result<Arc<Effective>, String> {
    if rates.rates.is_empty() {
        return Ok(Arc::clone(base));
    }
    for (name, _) in &rates.rates {
        if !base.policies.iter().any(|p| p.name() == name) {
            return Err(format!("the limiter has no policy named `{name}`"));
        }
    }
    let policies = base
        .policies
        .iter()
        .map(
            |p| match rates.rates.iter().find(|(name, _)| name == p.name()) {
                // The policy's lockout stays: only the rate is the subject's own.
                Some((_, rate)) => p.with_rate(*rate).map_err(|e| e.to_string()),
                None => Ok(p.clone()),
            },
        )
        .collect::<Result<Vec<Policy>, String>>()?;
    Ok(Effective::of(policies.into(), base.keep_log_us))
}
