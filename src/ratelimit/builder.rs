//! [`RateLimiterBuilder`]: everything a [`RateLimiter`] is configured with, set before it
//! exists, so that clones never disagree about their settings and an unusable limiter (no
//! policies, two with one name, a store that cannot count) is refused once, when it is built,
//! instead of on every check.

use std::sync::Arc;
use std::time::Duration;

use super::breaker::CircuitBreaker;
use super::decision::Combine;
use super::limiter::{
    DEFAULT_DENY_CACHE, DEFAULT_DENY_CACHE_MAX_AGE, DEFAULT_HYBRID_SUBJECTS, DEFAULT_MAX_IN_FLIGHT,
    HybridSettings, MAX_POLICIES, Settings,
};
use super::outage::Outage;
use super::subject_rates::{
    DEFAULT_RATE_CACHE_SUBJECTS, DEFAULT_RATE_CACHE_TTL, RateLookup, RateTable,
};
use super::{Policy, RateLimiter};
use crate::core::Core;
use crate::error::{InvalidPolicy, RateLimitError};

/// Settings of a [`RateLimiter`], made by [`Client::rate_limiter`](crate::Client::rate_limiter),
/// [`Client::rate_limiter_all`](crate::Client::rate_limiter_all) or
/// [`Client::rate_limiter_any`](crate::Client::rate_limiter_any). Consuming: each setter returns the builder, and
/// [`build`](Self::build) checks everything once.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use distlock::ratelimit::{Outage, Policy, Rate};
///
/// let client = distlock::Client::in_memory(); // or Client::connect("redis://...").await?
/// let limiter = client
///     .rate_limiter_all([
///         Policy::gcra("per-second", Rate::per_second(10)?)?,
///         Policy::fixed_window("per-hour", Rate::per_hour(1000)?)?,
///     ])
///     .on_outage(Outage::LocalFallback)
///     .deadline(Duration::from_millis(50))
///     .build()?;
///
/// let decision = limiter.check("user:7").await?;
/// if !decision.allowed {
///     println!("slow down: retry in {:?}", decision.retry_after);
/// }
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until it is built"]
pub struct RateLimiterBuilder {
    client: Core,
    policies: Vec<Policy>,
    outage: Outage,
    deadline: Option<Duration>,
    breaker: Option<CircuitBreaker>,
    max_wait: Duration,
    lookup: Option<Arc<dyn RateLookup>>,
    rate_cache: (Duration, usize),
    shadow: bool,
    deny_cache: usize,
    deny_cache_max_age: Duration,
    max_in_flight: usize,
    keep_logs: Option<Duration>,
    hybrid: Option<(u32, Duration)>,
    combine: Combine,
}

impl std::fmt::Debug for RateLimiterBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiterBuilder")
            .field("policies", &self.policies)
            .field("outage", &self.outage)
            .field("deadline", &self.deadline)
            .field("shadow", &self.shadow)
            .field("combine", &self.combine)
            .finish_non_exhaustive()
    }
}

impl RateLimiterBuilder {
    pub(crate) fn new(client: Core, policies: Vec<Policy>) -> Self {
        Self {
            client,
            policies,
            outage: Outage::default(),
            deadline: None,
            breaker: Some(CircuitBreaker::new()),
            max_wait: Duration::MAX,
            lookup: None,
            rate_cache: (DEFAULT_RATE_CACHE_TTL, DEFAULT_RATE_CACHE_SUBJECTS),
            shadow: false,
            deny_cache: DEFAULT_DENY_CACHE,
            deny_cache_max_age: DEFAULT_DENY_CACHE_MAX_AGE,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            keep_logs: None,
            hybrid: None,
            combine: Combine::All,
        }
    }

    /// The builder of an any-of limiter (see
    /// [`Client::rate_limiter_any`](crate::Client::rate_limiter_any)).
    pub(crate) fn any_of(mut self) -> Self {
        self.combine = Combine::Any;
        self
    }

    /// What to do when the store cannot answer (default [`Outage::FailClosed`]).
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
    pub fn on_outage(mut self, outage: Outage) -> Self {
        self.outage = outage;
        self
    }

    /// The most a check may take, round trip included (default: the client's response
    /// timeout, 2 s unless changed). Past it the outage policy decides. At least 1 ms.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline.max(Duration::from_millis(1)));
        self
    }

    /// The circuit breaker in front of the store (default: a [`CircuitBreaker::new`] of its
    /// own, shared by this limiter's clones); `None` asks the store on every check, however
    /// often it failed. Pass a clone of one breaker to several limiters of one store to
    /// share what they learn.
    pub fn circuit_breaker(mut self, breaker: Option<CircuitBreaker>) -> Self {
        self.breaker = breaker;
        self
    }

    /// How long [`acquire`](RateLimiter::acquire) waits at most for its turn (default: as
    /// long as it takes, up to [`MAX_WAIT`](super::MAX_WAIT); longer values, `Duration::MAX`
    /// included, mean that). A request whose turn would come later is refused at once,
    /// without waiting. Zero makes `acquire` a [`check`](RateLimiter::check).
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// Takes each subject's rates from `lookup` (a tenant's plan): the limiter's policies keep
    /// their names and algorithms, and a policy the lookup names gets the rate it gives for
    /// that subject. Answers are cached (see [`rate_cache`](Self::rate_cache)), and concurrent
    /// checks of one subject share one lookup. A lookup that fails, takes longer than the
    /// deadline, or gives a rate the policy cannot take (an unknown name, a burst for a window)
    /// is logged at `warn`, and the subject keeps its previous rates (or the policies' own) for
    /// a second before the lookup is tried again.
    ///
    /// When a subject's rate changes, what it used carries over (see
    /// [Operating a limiter](crate::guide::rate_limiting#operating-a-limiter)): a downgrade
    /// never hands out a fresh burst.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::ratelimit::{Policy, Rate, SubjectRates};
    ///
    /// let client = distlock::Client::in_memory();
    /// let api = client
    ///     .rate_limiter(Policy::gcra("api", Rate::per_minute(2)?)?) // the free plan
    ///     .rates_by_subject(|tenant: String| async move {
    ///         // Look the tenant's plan up in your database here.
    ///         let rates = match tenant.as_str() {
    ///             "acme" => SubjectRates::new().rate("api", Rate::per_minute(100)?),
    ///             _ => SubjectRates::new(),
    ///         };
    ///         Ok::<_, distlock::InvalidPolicy>(rates)
    ///     })
    ///     .build()?;
    /// assert_eq!(api.check("acme").await?.limit, 100);
    /// assert_eq!(api.check("someone").await?.limit, 2);
    /// # Ok(()) }
    /// ```
    pub fn rates_by_subject<L: RateLookup>(mut self, lookup: L) -> Self {
        self.lookup = Some(Arc::new(lookup));
        self
    }

    /// How long a subject's looked-up rates are kept (default 60 s; zero looks up on every
    /// check, one lookup at a time per subject) and for how many subjects (default 10 000,
    /// at least 1; when full, expired entries go, then all). Only used with
    /// [`rates_by_subject`](Self::rates_by_subject).
    pub fn rate_cache(mut self, ttl: Duration, subjects: usize) -> Self {
        self.rate_cache = (ttl, subjects);
        self
    }

    /// Shadow mode: decide and count as usual, but never deny. A request the policies deny is
    /// allowed with [`Decision::shadowed`](super::Decision::shadowed) set and reported through
    /// `tracing` (target `distlock::ratelimit`, level INFO), and a store outage fails open.
    /// For trying a policy on live traffic before enforcing it.
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// The local deny cache's size in subjects (default [`DEFAULT_DENY_CACHE`]); 0 turns it
    /// off.
    ///
    /// After the store denies a subject, until that denial's `retry_after`, a check on the
    /// subject that the store would deny too is answered locally
    /// ([`Origin::DenyCache`](super::Origin::DenyCache)), with the figures the store would
    /// give for that check's own cost, every policy's. Checks whose figures the cache cannot
    /// tell exactly ask the store, and every answer of the store refreshes what the cache
    /// knows. Waits are counted from when the denied check was sent, so they can be short by
    /// up to a round trip. One denial answers for at most
    /// [`deny_cache_max_age`](Self::deny_cache_max_age).
    pub fn deny_cache(mut self, subjects: usize) -> Self {
        self.deny_cache = subjects;
        self
    }

    /// The longest the deny cache answers from one denial (default
    /// [`DEFAULT_DENY_CACHE_MAX_AGE`], 1 s); zero turns the cache off.
    ///
    /// A [`reset`](RateLimiter::reset), refund or rate change made through another replica
    /// happens in the store, where this limiter's cache cannot see it: the cache may keep
    /// answering the old denial until its `retry_after`, which for a lockout can be minutes.
    /// This bounds that: every replica sees such a change within this age of the denial it
    /// cached. A subject denied for longer costs one round trip per age instead of none.
    pub fn deny_cache_max_age(mut self, age: Duration) -> Self {
        self.deny_cache_max_age = age;
        self
    }

    /// Hybrid mode, for very high rates: each replica leases `share` units of a subject's
    /// budget from the store in one round trip (a partial grant, as
    /// [`check_up_to`](super::RateLimiter::check_up_to)) and answers the subject's next checks
    /// from them locally, with no round trip, until they run out or `sync` has passed since
    /// the lease; then it gives back what it did not use
    /// ([`refund`](super::RateLimiter::refund)) and leases again. A local answer says
    /// [`Origin::LocalShare`](super::Origin::LocalShare).
    ///
    /// **The price is exactness.** Every unit is charged in the store before it is handed
    /// out, so the store's count is never below what was used; but a leased unit may be used
    /// up to `sync` after it was charged, so over any window the requests that pass may
    /// exceed what the policy allows in it by at most **`share × replicas`** (each replica
    /// holds at most `share` charged-but-unused units at any instant). And units a replica
    /// holds without using them are kept from the others until it gives them back: once
    /// `sync` has passed, at the replica's next check of the subject or next lease of any
    /// subject (a sweep at most once per `sync`), or at
    /// [`return_shares`](super::RateLimiter::return_shares); a replica that stops checking
    /// keeps them until the policy refills them. The default is no share: every check
    /// exact.
    ///
    /// What uses the share: [`check`](super::RateLimiter::check) and
    /// [`check_n`](super::RateLimiter::check_n) with a cost up to `share` (a larger cost is
    /// checked exactly). Peeks, [`check_up_to`](super::RateLimiter::check_up_to), waits,
    /// reservations, refunds and penalties go to the store as without it;
    /// [`reset`](super::RateLimiter::reset) also drops this replica's share of the subject
    /// (other replicas keep theirs until their sync). At most
    /// [`DEFAULT_HYBRID_SUBJECTS`](super::DEFAULT_HYBRID_SUBJECTS) subjects hold a share at
    /// once; checks on others are exact until older shares go back. While the store is away,
    /// the outage policy answers the leases: failing open passes each check without a
    /// share, and the local fallback's leases are answered locally as
    /// [`Origin::LocalFallback`](super::Origin::LocalFallback) and never given back to the
    /// store. Call
    /// [`return_shares`](super::RateLimiter::return_shares) when a replica stops.
    ///
    /// [`build`](Self::build) refuses a `share` of 0 or above a policy's limit, a `sync` of
    /// zero or longer than [`MAX_PERIOD`](super::MAX_PERIOD), shadow mode (whose
    /// uncounted passes a share cannot hold), and an any-of limiter
    /// ([`rate_limiter_any`](crate::Client::rate_limiter_any): a share is a partial grant,
    /// which it does not make).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use distlock::ratelimit::{Origin, Policy, Rate};
    ///
    /// let client = distlock::Client::in_memory();
    /// // 100,000 a second per tenant; each replica leases 500 at a time and syncs every
    /// // 100 ms: with 4 replicas, at most 2,000 over the limit in any window.
    /// let ingest = client
    ///     .rate_limiter(Policy::gcra("ingest", Rate::per_second(100_000)?)?)
    ///     .hybrid(500, Duration::from_millis(100))
    ///     .build()?;
    /// let first = ingest.check("tenant:7").await?; // leases 500, uses 1
    /// assert_eq!(first.origin, Origin::Store);
    /// let second = ingest.check("tenant:7").await?; // no round trip
    /// assert_eq!(second.origin, Origin::LocalShare);
    /// assert!(second.allowed);
    /// # Ok(()) }
    /// ```
    pub fn hybrid(mut self, share: u32, sync: Duration) -> Self {
        self.hybrid = Some((share, sync));
        self
    }

    /// How many checks may wait on the store at once (default [`DEFAULT_MAX_IN_FLIGHT`], at
    /// least 1; more than tokio's `Semaphore::MAX_PERMITS` is cut to it). One more is not
    /// queued: the outage policy answers it at once, so a slow store never builds an
    /// unbounded backlog.
    pub fn max_in_flight(mut self, checks: usize) -> Self {
        self.max_in_flight = checks;
        self
    }

    /// How long a [sliding log](super::Algorithm::SlidingLog) outlives its newest entry
    /// (default: its window; a longer window keeps it that long), so that a window made
    /// longer later, by [`rates_by_subject`](Self::rates_by_subject) or a deploy, still counts
    /// the entries of the old one: set it to the longest window a plan may give the policy.
    /// While a log lives it keeps its newest `limit` entries whatever their age, so this
    /// costs no more entries per subject, only idle subjects' logs kept longer. Other
    /// algorithms carry what was used across a rate change without it. [`build`](Self::build)
    /// refuses zero or more than [`MAX_PERIOD`](super::MAX_PERIOD)
    /// ([`InvalidPolicy::LogRetention`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use distlock::ratelimit::{Policy, Rate, SubjectRates};
    ///
    /// let client = distlock::Client::in_memory();
    /// let exports = client
    ///     .rate_limiter(Policy::sliding_log("exports", Rate::per_minute(5)?)?)
    ///     // Suspended tenants get 5 per hour: keep an hour of entries.
    ///     .keep_logs_for(Duration::from_secs(3600))
    ///     .rates_by_subject(|tenant: String| async move {
    ///         let rates = match tenant.as_str() {
    ///             "suspended" => SubjectRates::new().rate("exports", Rate::per_hour(5)?),
    ///             _ => SubjectRates::new(),
    ///         };
    ///         Ok::<_, distlock::InvalidPolicy>(rates)
    ///     })
    ///     .build()?;
    /// assert!(exports.check("acme").await?.allowed);
    /// # Ok(()) }
    /// ```
    pub fn keep_logs_for(mut self, keep: Duration) -> Self {
        self.keep_logs = Some(keep);
        self
    }

    /// The limiter, or why it cannot be: [`RateLimitError::InvalidPolicy`] for no policies,
    /// more than [`MAX_POLICIES`] or two with one name; [`RateLimitError::UnsupportedStore`]
    /// when the client's store cannot count (a Redlock quorum).
    ///
    /// ```
    /// use distlock::ratelimit::{Policy, Rate};
    /// use distlock::{InvalidPolicy, RateLimitError};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = distlock::Client::in_memory();
    /// let twice = client
    ///     .rate_limiter_all([
    ///         Policy::gcra("api", Rate::per_second(10)?)?,
    ///         Policy::gcra("api", Rate::per_hour(100)?)?,
    ///     ])
    ///     .build();
    /// assert!(matches!(
    ///     twice,
    ///     Err(RateLimitError::InvalidPolicy(InvalidPolicy::DuplicateName { .. }))
    /// ));
    /// # Ok(()) }
    /// ```
    pub fn build(self) -> Result<RateLimiter, RateLimitError> {
        validate(&self.policies)?;
        let hybrid = match self.hybrid {
            None => None,
            Some((share, sync)) => Some(self.hybrid_settings(share, sync)?),
        };
        if let Err(refused) = self.client.supports(crate::store::Capability::RateLimits) {
            return Err(RateLimitError::UnsupportedStore {
                reason: refused.reason,
            });
        }
        let rates = self.lookup.map(|lookup| {
            let (ttl, subjects) = self.rate_cache;
            Arc::new(RateTable::new(lookup, ttl, subjects))
        });
        let keep_log_us = match self.keep_logs {
            None => 0,
            Some(keep) if keep.is_zero() || keep > super::MAX_PERIOD => {
                return Err(InvalidPolicy::LogRetention {
                    keep,
                    max: super::MAX_PERIOD,
                }
                .into());
            }
            // At most MAX_PERIOD: fits.
            Some(keep) => i64::try_from(keep.as_micros()).unwrap_or(i64::MAX),
        };
        let deadline = self
            .deadline
            .unwrap_or_else(|| self.client.store().op_timeout());
        Ok(RateLimiter::new(
            self.client,
            self.policies,
            Settings {
                outage: self.outage,
                deadline,
                breaker: self.breaker,
                max_wait: self.max_wait,
                rates,
                shadow: self.shadow,
                deny_cache: self.deny_cache,
                deny_cache_max_age: self.deny_cache_max_age,
                max_in_flight: self.max_in_flight,
                keep_log_us,
                hybrid,
                combine: self.combine,
            },
        ))
    }
}

impl RateLimiterBuilder {
    /// The hybrid mode's settings, checked against the policies and the other options.
    fn hybrid_settings(&self, share: u32, sync: Duration) -> Result<HybridSettings, InvalidPolicy> {
        let least = self.policies.iter().map(Policy::limit).min().unwrap_or(0);
        if share == 0 || share > least {
            return Err(InvalidPolicy::HybridShare {
                share,
                limit: least,
            });
        }
        if sync.is_zero() || sync > super::MAX_PERIOD {
            return Err(InvalidPolicy::HybridSync {
                sync,
                max: super::MAX_PERIOD,
            });
        }
        if self.shadow {
            return Err(InvalidPolicy::HybridInShadowMode);
        }
        if self.combine != Combine::All {
            return Err(InvalidPolicy::HybridAnyOf);
        }
        Ok(HybridSettings {
            share,
            sync,
            subjects: DEFAULT_HYBRID_SUBJECTS,
        })
    }
}

/// Refuses an empty set of policies, too many, or two with one name (they would share keys).
fn validate(policies: &[Policy]) -> Result<(), InvalidPolicy> {
    if policies.is_empty() {
        return Err(InvalidPolicy::NoPolicies);
    }
    if policies.len() > MAX_POLICIES {
        return Err(InvalidPolicy::TooManyPolicies {
            count: policies.len(),
            max: MAX_POLICIES,
        });
    }
    for (i, p) in policies.iter().enumerate() {
        if policies[..i].iter().any(|q| q.name() == p.name()) {
            return Err(InvalidPolicy::DuplicateName {
                name: p.name().to_owned(),
            });
        }
    }
    Ok(())
}
