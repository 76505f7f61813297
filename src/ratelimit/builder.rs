//! [`RateLimiterBuilder`]: everything a [`RateLimiter`] is configured with, set before it
//! exists, so that clones never disagree about their settings and an unusable limiter (no
//! policies, two with one name, a store that cannot count) is refused once, when it is built,
//! instead of on every check.

use std::sync::Arc;
use std::time::Duration;

use super::decision::Combine;
use super::limiter::{DEFAULT_HYBRID_SUBJECTS, HybridSettings, MAX_POLICIES, Settings};
use super::options::{LimiterOptions, limiter_options};
use super::subject_rates::{RateLookup, RateTable};
use super::{Policy, RateLimiter};
use crate::core::Core;
use crate::error::InvalidOption;
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
    options: LimiterOptions,
    lookup: Option<Arc<dyn RateLookup>>,
    combine: Combine,
}

impl std::fmt::Debug for RateLimiterBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiterBuilder")
            .field("policies", &self.policies)
            .field("options", &self.options)
            .field("combine", &self.combine)
            .finish_non_exhaustive()
    }
}

impl RateLimiterBuilder {
    pub(crate) fn new(client: Core, policies: Vec<Policy>) -> Self {
        Self {
            client,
            policies,
            options: LimiterOptions::new(),
            lookup: None,
            combine: Combine::All,
        }
    }

    /// The builder of an any-of limiter (see
    /// [`Client::rate_limiter_any`](crate::Client::rate_limiter_any)).
    pub(crate) fn any_of(mut self) -> Self {
        self.combine = Combine::Any;
        self
    }

    limiter_options!(options);

    /// Every option at once, as a service keeps them (from a configuration file's
    /// [`LimiterConfig::options`](crate::config::LimiterConfig::options), say): replaces
    /// what earlier setters set; later setters change single options again. The policies,
    /// the [`rates_by_subject`](Self::rates_by_subject) lookup and how the policies combine
    /// are the builder's own and stay.
    pub fn options(mut self, options: LimiterOptions) -> Self {
        self.options = options;
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

    /// The limiter, or why it cannot be: [`RateLimitError::InvalidPolicy`] for no policies,
    /// more than [`MAX_POLICIES`] or two with one name, an option out of its bounds (what
    /// [`LimiterOptions::check`] refuses, as
    /// [`InvalidPolicy::LimiterOption`] naming it, or as the variant of its own a bound had
    /// before: [`LogRetention`](InvalidPolicy::LogRetention),
    /// [`HybridShare`](InvalidPolicy::HybridShare), [`HybridSync`](InvalidPolicy::HybridSync),
    /// [`HybridInShadowMode`](InvalidPolicy::HybridInShadowMode)) or a hybrid mode the
    /// policies cannot take; [`RateLimitError::UnsupportedStore`] when the client's store
    /// cannot count (a Redlock quorum).
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
        self.options
            .check()
            .map_err(|invalid| self.refused(invalid))?;
        let hybrid = match self.options.hybrid {
            None => None,
            Some((share, sync)) => Some(self.hybrid_settings(share, sync)?),
        };
        if let Err(refused) = self.client.supports(crate::store::Capability::RateLimits) {
            return Err(RateLimitError::UnsupportedStore {
                reason: refused.reason,
            });
        }
        let options = self.options;
        let rates = self.lookup.map(|lookup| {
            let (ttl, subjects) = options.rate_cache;
            Arc::new(RateTable::new(lookup, ttl, subjects))
        });
        // Checked: at most MAX_PERIOD, which fits.
        let keep_log_us = options.keep_logs.map_or(0, |keep| {
            i64::try_from(keep.as_micros()).unwrap_or(i64::MAX)
        });
        let deadline = options
            .deadline
            .unwrap_or_else(|| self.client.store().op_timeout());
        Ok(RateLimiter::new(
            self.client,
            self.policies,
            Settings {
                outage: options.outage,
                deadline,
                breaker: options.breaker.breaker(),
                max_wait: options.max_wait,
                rates,
                shadow: options.shadow,
                deny_cache: options.deny_cache,
                deny_cache_max_age: options.deny_cache_max_age,
                max_in_flight: options.max_in_flight,
                keep_log_us,
                hybrid,
                combine: self.combine,
            },
        ))
    }
}

impl RateLimiterBuilder {
    /// An option [`LimiterOptions::check`] refused, as `build` reports it: the bounds that
    /// had a variant of their own before the options had one home keep it.
    fn refused(&self, invalid: InvalidOption) -> InvalidPolicy {
        let options = &self.options;
        match (invalid.field(), options.keep_logs, options.hybrid) {
            ("keep_logs_for", Some(keep), _) => InvalidPolicy::LogRetention {
                keep,
                max: super::MAX_PERIOD,
            },
            ("hybrid.share", _, Some((share, _))) => InvalidPolicy::HybridShare {
                share,
                limit: self.least_limit(),
            },
            ("hybrid.sync", _, Some((_, sync))) => InvalidPolicy::HybridSync {
                sync,
                max: super::MAX_PERIOD,
            },
            ("hybrid", ..) => InvalidPolicy::HybridInShadowMode,
            _ => InvalidPolicy::LimiterOption(invalid),
        }
    }

    /// The least limit of the policies.
    fn least_limit(&self) -> u32 {
        self.policies.iter().map(Policy::limit).min().unwrap_or(0)
    }

    /// The hybrid mode's settings, checked against the policies and how they combine (the
    /// options alone were checked by [`LimiterOptions::check`]).
    fn hybrid_settings(&self, share: u32, sync: Duration) -> Result<HybridSettings, InvalidPolicy> {
        let least = self.least_limit();
        if share > least {
            return Err(InvalidPolicy::HybridShare {
                share,
                limit: least,
            });
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
