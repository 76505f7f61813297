//! [`LimiterOptions`]: a rate limiter's options that do not depend on its policies or its
//! store, as one value, and the one place their bounds are checked, so the builder, the
//! configuration file, and `#[rate_limit]` refuse the same values with the same errors.

use std::time::Duration;

use distlock_grammar::DurationText as T;

use super::breaker::CircuitBreaker;
use super::limiter::{DEFAULT_DENY_CACHE, DEFAULT_DENY_CACHE_MAX_AGE, DEFAULT_MAX_IN_FLIGHT};
use super::outage::Outage;
use super::subject_rates::{DEFAULT_RATE_CACHE_SUBJECTS, DEFAULT_RATE_CACHE_TTL};
use super::{MAX_PERIOD, MAX_WAIT};
use crate::error::InvalidOption;
use crate::error::InvalidPolicy;

/// The setters of a limiter's options, documented once: `limiter_options!()` on
/// [`LimiterOptions`] itself, `limiter_options!(options)` on a builder that keeps its
/// [`LimiterOptions`] in a field named `options`.
macro_rules! limiter_options {
    ($($options:ident)?) => {
        /// What to do when the store cannot answer (default [`Outage::FailClosed`](crate::ratelimit::Outage::FailClosed)).
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
        pub fn on_outage(mut self, outage: crate::ratelimit::Outage) -> Self {
            self$(.$options)?.outage = outage;
            self
        }

        /// The most a check may take, round trip included (default: the client's response
        /// timeout, 2 s unless changed). Past it the outage policy decides. Zero is refused
        /// ([`LimiterOptions::check`](crate::ratelimit::LimiterOptions::check)): a check needs
        /// at least 1 ms.
        pub fn deadline(mut self, deadline: ::std::time::Duration) -> Self {
            self$(.$options)?.deadline = ::core::option::Option::Some(deadline);
            self
        }

        /// The circuit breaker in front of the store (default: a
        /// [`CircuitBreaker::new`](crate::ratelimit::CircuitBreaker::new) of the limiter's own,
        /// made when it is built and shared by its clones); `None` asks the store on every check, however
        /// often it failed. Pass a clone of one breaker to several limiters of one store to
        /// share what they learn.
        pub fn circuit_breaker(
            mut self,
            breaker: ::core::option::Option<crate::ratelimit::CircuitBreaker>,
        ) -> Self {
            self$(.$options)?.breaker = crate::ratelimit::options::BreakerChoice::from(breaker);
            self
        }

        /// How long [`acquire`](crate::ratelimit::RateLimiter::acquire) waits at most for its
        /// turn (default `Duration::MAX`: as long as it takes, up to
        /// [`MAX_WAIT`](crate::ratelimit::MAX_WAIT)). A request whose turn would come later is
        /// refused at once, without waiting. Zero makes `acquire` a
        /// [`check`](crate::ratelimit::RateLimiter::check). Anything longer than `MAX_WAIT`
        /// but `Duration::MAX` is refused, as `#[rate_limit]` refuses it.
        pub fn max_wait(mut self, max_wait: ::std::time::Duration) -> Self {
            self$(.$options)?.max_wait = max_wait;
            self
        }

        /// How long a subject's looked-up rates are kept (default 60 s; zero looks up on every
        /// check, one lookup at a time per subject; at most a year is kept) and for how many
        /// subjects (default 10 000; 0 is refused; when full, expired entries go, then all). Only used with
        /// [`rates_by_subject`](crate::ratelimit::RateLimiterBuilder::rates_by_subject).
        pub fn rate_cache(mut self, ttl: ::std::time::Duration, subjects: usize) -> Self {
            self$(.$options)?.rate_cache = (ttl, subjects);
            self
        }

        /// Shadow mode: decide and count as usual, but never deny. A request the policies deny is
        /// allowed with [`Decision::shadowed`](crate::ratelimit::Decision::shadowed) set and reported through
        /// `tracing` (target `distlock::ratelimit`, level INFO), and a store outage fails open.
        /// For trying a policy on live traffic before enforcing it.
        pub fn shadow(mut self, shadow: bool) -> Self {
            self$(.$options)?.shadow = shadow;
            self
        }

        /// The local deny cache's size in subjects (default [`DEFAULT_DENY_CACHE`](crate::ratelimit::DEFAULT_DENY_CACHE)); 0 turns it
        /// off.
        ///
        /// After the store denies a subject, until that denial's `retry_after`, a check on the
        /// subject that the store would deny too is answered locally
        /// ([`Origin::DenyCache`](crate::ratelimit::Origin::DenyCache)), with the figures the store would
        /// give for that check's own cost, every policy's. Checks whose figures the cache cannot
        /// tell exactly ask the store, and every answer of the store refreshes what the cache
        /// knows. Waits are counted from when the denied check was sent, so they can be short by
        /// up to a round trip. One denial answers for at most
        /// [`deny_cache_max_age`](Self::deny_cache_max_age).
        pub fn deny_cache(mut self, subjects: usize) -> Self {
            self$(.$options)?.deny_cache = subjects;
            self
        }

        /// The longest the deny cache answers from one denial (default
        /// [`DEFAULT_DENY_CACHE_MAX_AGE`](crate::ratelimit::DEFAULT_DENY_CACHE_MAX_AGE), 1 s); zero turns the cache off.
        ///
        /// A [`reset`](crate::ratelimit::RateLimiter::reset), refund or rate change made through another replica
        /// happens in the store, where this limiter's cache cannot see it: the cache may keep
        /// answering the old denial until its `retry_after`, which for a lockout can be minutes.
        /// This bounds that: every replica sees such a change within this age of the denial it
        /// cached. A subject denied for longer costs one round trip per age instead of none.
        pub fn deny_cache_max_age(mut self, age: ::std::time::Duration) -> Self {
            self$(.$options)?.deny_cache_max_age = age;
            self
        }

        /// Hybrid mode, for very high rates: each replica leases `share` units of a subject's
        /// budget from the store in one round trip (a partial grant, as
        /// [`check_up_to`](crate::ratelimit::RateLimiter::check_up_to)) and answers the subject's next checks
        /// from them locally, with no round trip, until they run out or `sync` has passed since
        /// the lease; then it gives back what it did not use
        /// ([`refund`](crate::ratelimit::RateLimiter::refund)) and leases again. A local answer says
        /// [`Origin::LocalShare`](crate::ratelimit::Origin::LocalShare).
        ///
        /// **The price is exactness.** Every unit is charged in the store before it is handed
        /// out, so the store's count is never below what was used; but a leased unit may be used
        /// up to `sync` after it was charged, so over any window the requests that pass may
        /// exceed what the policy allows in it by at most **`share × replicas`** (each replica
        /// holds at most `share` charged-but-unused units at any instant). And units a replica
        /// holds without using them are kept from the others until it gives them back: once
        /// `sync` has passed, at the replica's next check of the subject or next lease of any
        /// subject (a sweep at most once per `sync`), or at
        /// [`return_shares`](crate::ratelimit::RateLimiter::return_shares); a replica that stops checking
        /// keeps them until the policy refills them. The default is no share: every check
        /// exact.
        ///
        /// What uses the share: [`check`](crate::ratelimit::RateLimiter::check) and
        /// [`check_n`](crate::ratelimit::RateLimiter::check_n) with a cost up to `share` (a larger cost is
        /// checked exactly). Peeks, [`check_up_to`](crate::ratelimit::RateLimiter::check_up_to), waits,
        /// reservations, refunds and penalties go to the store as without it;
        /// [`reset`](crate::ratelimit::RateLimiter::reset) also drops this replica's share of the subject
        /// (other replicas keep theirs until their sync). At most
        /// [`DEFAULT_HYBRID_SUBJECTS`](crate::ratelimit::DEFAULT_HYBRID_SUBJECTS) subjects hold a share at
        /// once; checks on others are exact until older shares go back. While the store is away,
        /// the outage policy answers the leases: failing open passes each check without a
        /// share, and the local fallback's leases are answered locally as
        /// [`Origin::LocalFallback`](crate::ratelimit::Origin::LocalFallback) and never given back to the
        /// store. Call
        /// [`return_shares`](crate::ratelimit::RateLimiter::return_shares) when a replica stops.
        ///
        /// [`LimiterOptions::check`](crate::ratelimit::LimiterOptions::check) refuses a `share`
        /// of 0, a `sync` of zero or longer than [`MAX_PERIOD`](crate::ratelimit::MAX_PERIOD)
        /// and shadow mode (whose uncounted passes a share cannot hold);
        /// [`build`](crate::ratelimit::RateLimiterBuilder::build) also refuses a `share` above
        /// a policy's limit, and an any-of limiter
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
        pub fn hybrid(mut self, share: u32, sync: ::std::time::Duration) -> Self {
            self$(.$options)?.hybrid = ::core::option::Option::Some((share, sync));
            self
        }

        /// How many checks may wait on the store at once (default
        /// [`DEFAULT_MAX_IN_FLIGHT`](crate::ratelimit::DEFAULT_MAX_IN_FLIGHT); 0 is refused;
        /// more than tokio's `Semaphore::MAX_PERMITS` is cut to it). One more is not
        /// queued: the outage policy answers it at once, so a slow store never builds an
        /// unbounded backlog.
        pub fn max_in_flight(mut self, checks: usize) -> Self {
            self$(.$options)?.max_in_flight = checks;
            self
        }

        /// How long a [sliding log](crate::ratelimit::Algorithm::SlidingLog) outlives its newest entry
        /// (default: its window; a longer window keeps it that long), so that a window made
        /// longer later, by [`rates_by_subject`](crate::ratelimit::RateLimiterBuilder::rates_by_subject) or a deploy, still counts
        /// the entries of the old one: set it to the longest window a plan may give the policy.
        /// While a log lives it keeps its newest `limit` entries whatever their age, so this
        /// costs no more entries per subject, only idle subjects' logs kept longer. Other
        /// algorithms carry what was used across a rate change without it.
        /// [`LimiterOptions::check`](crate::ratelimit::LimiterOptions::check) (and so
        /// [`build`](crate::ratelimit::RateLimiterBuilder::build)) refuses zero or more than [`MAX_PERIOD`](crate::ratelimit::MAX_PERIOD)
        /// ([`InvalidPolicy::LogRetention`](crate::InvalidPolicy::LogRetention)).
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
        pub fn keep_logs_for(mut self, keep: ::std::time::Duration) -> Self {
            self$(.$options)?.keep_logs = ::core::option::Option::Some(keep);
            self
        }
    };
}
pub(crate) use limiter_options;

/// A rate limiter's options as one value: what [`RateLimiterBuilder`](super::RateLimiterBuilder)
/// sets one by one but its policies and its
/// [`rates_by_subject`](super::RateLimiterBuilder::rates_by_subject) lookup, kept where a
/// service keeps its settings, checked once by [`check`](Self::check), and applied whole with
/// [`RateLimiterBuilder::options`](super::RateLimiterBuilder::options).
///
/// Every front door maps into this type and nothing else checks these bounds: the builder
/// (whose [`build`](super::RateLimiterBuilder::build) calls [`check`](Self::check)), a
/// configuration file's limiter table ([`LimiterConfig`](crate::config::LimiterConfig)), and
/// `#[rate_limit]`. What depends on the policies (a hybrid share above a policy's limit, an
/// any-of limiter in hybrid mode) or on the store (whether it can count) is checked by
/// `build`.
///
/// Defaults: fail closed, the client's response timeout as the deadline, a circuit breaker of
/// the limiter's own, `acquire` waits as long as it takes, rates looked up kept 60 s for
/// 10 000 subjects, no shadow mode, a deny cache of 10 000 subjects answering for at most 1 s
/// per denial, 4096 checks in flight, sliding logs kept for their window, no hybrid mode.
///
/// ```
/// use std::time::Duration;
/// use distlock::ratelimit::{LimiterOptions, Outage};
///
/// let api = LimiterOptions::new()
///     .on_outage(Outage::LocalFallback)
///     .deadline(Duration::from_millis(50))
///     .deny_cache(50_000);
/// assert!(api.check().is_ok());
///
/// let err = LimiterOptions::new().deadline(Duration::ZERO).check().unwrap_err();
/// assert_eq!(err.field(), "deadline");
/// assert_eq!(err.to_string(), "deadline: zero; a check needs at least 1ms");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
#[must_use = "options do nothing until a builder takes them"]
pub struct LimiterOptions {
    pub(crate) outage: Outage,
    /// `None`: the client's response timeout.
    pub(crate) deadline: Option<Duration>,
    pub(crate) breaker: BreakerChoice,
    pub(crate) max_wait: Duration,
    /// How long looked-up rates are kept, and for how many subjects.
    pub(crate) rate_cache: (Duration, usize),
    pub(crate) shadow: bool,
    pub(crate) deny_cache: usize,
    pub(crate) deny_cache_max_age: Duration,
    pub(crate) max_in_flight: usize,
    /// How long sliding logs outlive their newest entry (`None`: their window).
    pub(crate) keep_logs: Option<Duration>,
    /// The hybrid mode's share and sync interval, if on.
    pub(crate) hybrid: Option<(u32, Duration)>,
}

/// Which circuit breaker a limiter gets.
#[derive(Debug, Clone)]
pub(crate) enum BreakerChoice {
    /// A [`CircuitBreaker::new`] of its own, made when it is built (so options applied to
    /// two builders do not make their limiters share one).
    Own,
    /// None: every check asks the store.
    Off,
    /// This one, shared with whoever else holds a clone of it.
    Given(CircuitBreaker),
}

impl From<Option<CircuitBreaker>> for BreakerChoice {
    fn from(breaker: Option<CircuitBreaker>) -> Self {
        breaker.map_or(Self::Off, Self::Given)
    }
}

/// Two choices are equal when they give a limiter the same breaker: the same kind, or the
/// same shared breaker (its clones), not merely one with the same settings.
impl PartialEq for BreakerChoice {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Own, Self::Own) | (Self::Off, Self::Off) => true,
            (Self::Given(a), Self::Given(b)) => a.is_same(b),
            _ => false,
        }
    }
}

impl BreakerChoice {
    /// The breaker a limiter being built gets.
    pub(crate) fn breaker(&self) -> Option<CircuitBreaker> {
        match self {
            Self::Own => Some(CircuitBreaker::new()),
            Self::Off => None,
            Self::Given(breaker) => Some(breaker.clone()),
        }
    }
}

impl Default for LimiterOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl LimiterOptions {
    /// The defaults (see the type's documentation).
    pub fn new() -> Self {
        Self {
            outage: Outage::default(),
            deadline: None,
            breaker: BreakerChoice::Own,
            max_wait: Duration::MAX,
            rate_cache: (DEFAULT_RATE_CACHE_TTL, DEFAULT_RATE_CACHE_SUBJECTS),
            shadow: false,
            deny_cache: DEFAULT_DENY_CACHE,
            deny_cache_max_age: DEFAULT_DENY_CACHE_MAX_AGE,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            keep_logs: None,
            hybrid: None,
        }
    }

    limiter_options!();

    /// What to do when the store cannot answer.
    #[must_use]
    pub fn get_outage(&self) -> Outage {
        self.outage
    }

    /// The deadline of a check, if set (`None`: the client's response timeout).
    #[must_use]
    pub fn get_deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// The circuit breaker given to [`circuit_breaker`](Self::circuit_breaker), if one was;
    /// `None` for the default (a breaker of the limiter's own) and for none at all, which
    /// [`get_breaker_on`](Self::get_breaker_on) tells apart.
    #[must_use]
    pub fn get_circuit_breaker(&self) -> Option<&CircuitBreaker> {
        match &self.breaker {
            BreakerChoice::Given(breaker) => Some(breaker),
            BreakerChoice::Own | BreakerChoice::Off => None,
        }
    }

    /// Whether the limiter gets a circuit breaker (its own or a given one).
    #[must_use]
    pub fn get_breaker_on(&self) -> bool {
        !matches!(self.breaker, BreakerChoice::Off)
    }

    /// How long `acquire` waits at most ([`Duration::MAX`]: as long as it takes).
    #[must_use]
    pub fn get_max_wait(&self) -> Duration {
        self.max_wait
    }

    /// How long looked-up rates are kept, and for how many subjects.
    #[must_use]
    pub fn get_rate_cache(&self) -> (Duration, usize) {
        self.rate_cache
    }

    /// Whether shadow mode is on.
    #[must_use]
    pub fn get_shadow(&self) -> bool {
        self.shadow
    }

    /// The deny cache's size in subjects (0: off).
    #[must_use]
    pub fn get_deny_cache(&self) -> usize {
        self.deny_cache
    }

    /// The longest the deny cache answers from one denial (zero: off).
    #[must_use]
    pub fn get_deny_cache_max_age(&self) -> Duration {
        self.deny_cache_max_age
    }

    /// How many checks may wait on the store at once.
    #[must_use]
    pub fn get_max_in_flight(&self) -> usize {
        self.max_in_flight
    }

    /// How long sliding logs outlive their newest entry, if set (`None`: their window).
    #[must_use]
    pub fn get_keep_logs_for(&self) -> Option<Duration> {
        self.keep_logs
    }

    /// The hybrid mode's share and sync interval, if it is on.
    #[must_use]
    pub fn get_hybrid(&self) -> Option<(u32, Duration)> {
        self.hybrid
    }

    /// Checks every option against its bounds: the one place they are checked. The first
    /// refused option is returned, named as its setter is (`"deadline"`, `"max_in_flight"`,
    /// ...; `"rate_cache.subjects"`, `"hybrid.share"` and `"hybrid.sync"` for part of one,
    /// `"hybrid"` for hybrid mode with shadow mode).
    ///
    /// # Errors
    /// [`InvalidOption`] naming the field: a zero deadline, a `max_wait` longer than
    /// [`MAX_WAIT`] but not `Duration::MAX`, a rate cache of 0 subjects, `max_in_flight` 0, a
    /// `keep_logs_for` of zero or longer than [`MAX_PERIOD`], a hybrid share of 0, a hybrid
    /// sync of zero or longer than [`MAX_PERIOD`], hybrid mode with shadow mode.
    pub fn check(&self) -> Result<(), InvalidOption> {
        let refuse = |field, reason: String| Err(InvalidOption::new(field, reason));
        if self.deadline.is_some_and(|d| d.is_zero()) {
            return refuse("deadline", "zero; a check needs at least 1ms".to_owned());
        }
        if distlock_grammar::check_max_wait(self.max_wait).is_err() {
            return refuse(
                "max_wait",
                format!(
                    "{} is longer than {}: no turn is reserved further ahead (Duration::MAX, \
                     \"forever\" in a file, waits as long as it takes)",
                    T(self.max_wait),
                    T(MAX_WAIT)
                ),
            );
        }
        if self.rate_cache.1 == 0 {
            return refuse(
                "rate_cache.subjects",
                "zero; the cache holds at least one subject".to_owned(),
            );
        }
        if self.max_in_flight == 0 {
            return refuse(
                "max_in_flight",
                "zero; at least one check must be able to wait on the store".to_owned(),
            );
        }
        if let Some(keep) = self.keep_logs
            && (keep.is_zero() || keep > MAX_PERIOD)
        {
            return refuse(
                "keep_logs_for",
                format!(
                    "{} is not above zero and at most {}",
                    T(keep),
                    T(MAX_PERIOD)
                ),
            );
        }
        if let Some((share, sync)) = self.hybrid {
            if share == 0 {
                return refuse(
                    "hybrid.share",
                    "zero; each replica leases at least one unit".to_owned(),
                );
            }
            if sync.is_zero() || sync > MAX_PERIOD {
                return refuse(
                    "hybrid.sync",
                    format!(
                        "{} is not above zero and at most {}",
                        T(sync),
                        T(MAX_PERIOD)
                    ),
                );
            }
            if self.shadow {
                return refuse("hybrid", InvalidPolicy::HybridInShadowMode.to_string());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(options: LimiterOptions) -> &'static str {
        options.check().expect_err("refused").field()
    }

    #[test]
    fn every_bound_is_refused_by_name_and_extremes_never_panic() {
        let ms = Duration::from_millis;
        let new = LimiterOptions::new;
        assert!(new().check().is_ok());
        assert_eq!(refused(new().deadline(Duration::ZERO)), "deadline");
        for deadline in [Duration::from_nanos(1), ms(1), Duration::MAX] {
            assert!(new().deadline(deadline).check().is_ok(), "{deadline:?}");
        }
        assert_eq!(refused(new().max_wait(MAX_WAIT + ms(1))), "max_wait");
        for wait in [Duration::ZERO, MAX_WAIT, Duration::MAX] {
            assert!(new().max_wait(wait).check().is_ok(), "{wait:?}");
        }
        assert_eq!(refused(new().rate_cache(ms(1), 0)), "rate_cache.subjects");
        for ttl in [Duration::ZERO, Duration::MAX] {
            assert!(new().rate_cache(ttl, usize::MAX).check().is_ok());
        }
        assert_eq!(refused(new().max_in_flight(0)), "max_in_flight");
        assert!(new().max_in_flight(usize::MAX).check().is_ok());
        for subjects in [0, usize::MAX] {
            assert!(new().deny_cache(subjects).check().is_ok());
        }
        for age in [Duration::ZERO, Duration::MAX] {
            assert!(new().deny_cache_max_age(age).check().is_ok());
        }
        for keep in [Duration::ZERO, MAX_PERIOD + ms(1), Duration::MAX] {
            assert_eq!(refused(new().keep_logs_for(keep)), "keep_logs_for");
        }
        assert!(new().keep_logs_for(MAX_PERIOD).check().is_ok());
        assert_eq!(refused(new().hybrid(0, ms(100))), "hybrid.share");
        for sync in [Duration::ZERO, MAX_PERIOD + ms(1), Duration::MAX] {
            assert_eq!(refused(new().hybrid(u32::MAX, sync)), "hybrid.sync");
        }
        assert!(new().hybrid(u32::MAX, MAX_PERIOD).check().is_ok());
        assert_eq!(refused(new().hybrid(1, ms(100)).shadow(true)), "hybrid");
        assert!(new().shadow(true).check().is_ok());
    }

    /// Every extreme the check lets through builds a limiter that checks, without a panic.
    #[tokio::test]
    async fn the_extremes_it_accepts_make_a_working_limiter() {
        use crate::ratelimit::{Policy, Rate, SubjectRates};

        let client = crate::Client::in_memory();
        let policy = Policy::gcra("api", Rate::per_second(10).expect("rate")).expect("policy");
        for options in [
            LimiterOptions::new()
                .deadline(Duration::MAX)
                .max_wait(Duration::MAX)
                .rate_cache(Duration::MAX, usize::MAX)
                .deny_cache(usize::MAX)
                .deny_cache_max_age(Duration::MAX)
                .max_in_flight(usize::MAX)
                .keep_logs_for(MAX_PERIOD),
            LimiterOptions::new()
                .rate_cache(Duration::ZERO, 1)
                .deny_cache(0)
                .max_in_flight(1)
                .hybrid(10, MAX_PERIOD),
        ] {
            let limiter = client
                .rate_limiter(policy.clone())
                .options(options)
                .rates_by_subject(|_: String| async { Ok::<_, InvalidPolicy>(SubjectRates::new()) })
                .build()
                .expect("built");
            assert!(limiter.check("user:7").await.expect("checked").allowed);
            assert!(limiter.acquire("user:7").await.is_ok());
        }
    }

    #[test]
    fn the_builders_setters_and_the_values_agree() {
        let breaker = CircuitBreaker::new();
        let options = LimiterOptions::new()
            .on_outage(Outage::FailOpen)
            .deadline(Duration::from_millis(50))
            .circuit_breaker(Some(breaker.clone()))
            .hybrid(5, Duration::from_secs(1));
        assert_eq!(options.get_outage(), Outage::FailOpen);
        assert_eq!(options.get_deadline(), Some(Duration::from_millis(50)));
        assert!(
            options
                .get_circuit_breaker()
                .is_some_and(|b| b.is_same(&breaker))
        );
        assert_eq!(options.get_hybrid(), Some((5, Duration::from_secs(1))));
        // The same breaker is the same option; another with the same settings is not.
        assert_eq!(options, options.clone());
        assert_ne!(
            options,
            options.clone().circuit_breaker(Some(CircuitBreaker::new()))
        );
        let off = LimiterOptions::new().circuit_breaker(None);
        assert!(!off.get_breaker_on() && off.get_circuit_breaker().is_none());
        assert!(LimiterOptions::new().get_breaker_on());
        assert_eq!(LimiterOptions::new(), LimiterOptions::default());
    }
}
