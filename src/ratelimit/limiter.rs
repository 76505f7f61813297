//! [`RateLimiter`]: policies bound to a client, plus what happens around each check (the
//! deny cache, the deadline, the outage policy and shadow mode, in `limiter/asking.rs`).
//!
//! ```text
//! limiter.rs             RateLimiter: checks, peeks, partial grants, resets, refunds
//! limiter/waiting.rs     acquire, acquire_n, reserve: a turn reserved in the store
//! limiter/asking.rs      one operation on the store (breaker, deadline, in-flight limit,
//!                        deny cache), the outage policy, shadow mode, the decision a
//!                        reply makes, the subject's keys
//! limiter/hybrid.rs      shares of a subject's budget answered locally
//! limiter/test_hooks.rs  test-util only
//! ```

use std::sync::Arc;
#[cfg(feature = "test-util")]
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::breaker::CircuitBreaker;
use super::decision::Combine;
use super::deny_cache::DenyCache;
use super::metrics::{self, CheckTimer};
use super::outage::{Outage, OutageLog};
use super::subject_rates::{Effective, RateTable};
use super::{Decision, Origin, Policy};
use crate::core::Core;
use crate::error::RateLimitError;
use crate::keys::{LOCK_KEY_PART, rate_key_head};
use crate::store::{MemoryStore, RateOp, RateReply, RateRequest};

mod asking;
mod hybrid;
#[cfg(feature = "test-util")]
mod test_hooks;
mod waiting;
pub use self::hybrid::DEFAULT_HYBRID_SUBJECTS;
pub(super) use self::hybrid::HybridSettings;
use self::hybrid::Shares;
#[cfg(feature = "test-util")]
pub use self::test_hooks::TestOp;

pub use distlock_grammar::{MAX_POLICIES, MAX_WAIT};

/// The default size of the local deny cache, in subjects.
pub const DEFAULT_DENY_CACHE: usize = 10_000;
/// The default longest time the deny cache answers from one denial: how soon a
/// [`reset`](RateLimiter::reset), refund or rate change made through another replica (or
/// another limiter) is seen here at the latest.
pub const DEFAULT_DENY_CACHE_MAX_AGE: Duration = Duration::from_secs(1);
/// The default limit on checks of one limiter waiting on the store at once.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 4096;

/// Checks requests against one or more [`Policy`]s on a subject (a user, an API key, an IP
/// address). Made by [`Client::rate_limiter`](crate::Client::rate_limiter) and its [builder](super::RateLimiterBuilder).
/// Cheap to clone; clones share the deny cache and the in-flight limit.
///
/// Every check is one atomic round trip (or none, when the deny cache answers). With several
/// policies the check is all-or-nothing: if any policy denies, none consumes; or, for a
/// limiter made by [`Client::rate_limiter_any`](crate::Client::rate_limiter_any), the first
/// policy that allows is charged, alone.
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
/// let upload = limiter.check_n("user:7", 5).await?; // costs 5 units
/// let state = limiter.peek("user:7").await?; // consumes nothing
/// # let _ = (upload, state);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RateLimiter {
    client: Core,
    policies: Arc<[Policy]>,
    /// The policies as the store sees them, for subjects without rates of their own.
    base: Arc<Effective>,
    /// Where subjects' own rates come from, if anywhere.
    rates: Option<Arc<RateTable>>,
    /// Each policy's key up to the subject (see [`rate_key_head`]), followed by its lock's
    /// when it has a lockout.
    key_heads: Arc<[Box<str>]>,
    outage: Outage,
    deadline: Duration,
    shadow: bool,
    /// How long [`acquire`](Self::acquire) may wait for a turn.
    max_wait: Duration,
    /// Every policy is GCRA or a token bucket (and they are all or nothing): waits are
    /// reservations, served in order.
    fifo: bool,
    /// All or nothing, or any of the policies.
    combine: Combine,
    breaker: Option<CircuitBreaker>,
    shared: Arc<Shared>,
}

/// State shared by clones.
struct Shared {
    deny_cache: Option<DenyCache>,
    /// The leased shares, in hybrid mode.
    hybrid: Option<Arc<Shares>>,
    max_in_flight: usize,
    in_flight: Semaphore,
    fallback: MemoryStore,
    outage_log: OutageLog,
    /// Round trips attempted, for tests.
    #[cfg(feature = "test-util")]
    store_calls: AtomicU64,
}

impl Shared {
    fn new(settings: &Settings, max_in_flight: usize, policies: &[Policy]) -> Arc<Self> {
        let (deny_cache, max_age) = (settings.deny_cache, settings.deny_cache_max_age);
        Arc::new(Self {
            deny_cache: (deny_cache > 0 && !max_age.is_zero()).then(|| {
                DenyCache::new(deny_cache, policies)
                    .max_age(max_age)
                    .combine(settings.combine)
            }),
            hybrid: settings.hybrid.map(|h| Arc::new(Shares::new(h))),
            max_in_flight,
            in_flight: Semaphore::new(max_in_flight),
            fallback: MemoryStore::new(),
            outage_log: OutageLog::new(Arc::clone(policies[0].shared_name())),
            #[cfg(feature = "test-util")]
            store_calls: AtomicU64::new(0),
        })
    }
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("policies", &self.policies)
            .field("outage", &self.outage)
            .field("deadline", &self.deadline)
            .field("shadow", &self.shadow)
            .finish_non_exhaustive()
    }
}

/// What a [`RateLimiter`] is built with (see [`RateLimiterBuilder`](super::RateLimiterBuilder)).
pub(super) struct Settings {
    pub(super) outage: Outage,
    pub(super) deadline: Duration,
    pub(super) breaker: Option<CircuitBreaker>,
    pub(super) max_wait: Duration,
    pub(super) rates: Option<Arc<RateTable>>,
    pub(super) shadow: bool,
    pub(super) deny_cache: usize,
    pub(super) deny_cache_max_age: Duration,
    pub(super) max_in_flight: usize,
    /// How long sliding logs outlive their newest entry, µs; 0: their window.
    pub(super) keep_log_us: i64,
    /// Leased shares answered locally, if set.
    pub(super) hybrid: Option<HybridSettings>,
    /// All or nothing, or any of the policies.
    pub(super) combine: Combine,
}

impl RateLimiter {
    /// A limiter over `policies`, already validated by the builder.
    pub(super) fn new(client: Core, policies: Vec<Policy>, settings: Settings) -> Self {
        let policies: Arc<[Policy]> = policies.into();
        let base = Effective::of(Arc::clone(&policies), settings.keep_log_us);
        let key_heads = policies
            .iter()
            .flat_map(|p| {
                let own = rate_key_head(client.prefix(), p.name(), p.algorithm().key_part());
                let lock = p
                    .lockout()
                    .map(|_| rate_key_head(client.prefix(), p.name(), LOCK_KEY_PART));
                std::iter::once(own).chain(lock)
            })
            .collect();
        // A lockout is about refusing, not queueing: its limiter's waits are checks; so are
        // an any-of limiter's (a turn would have to be reserved under one policy, unknown
        // until it comes).
        let fifo = settings.combine == Combine::All
            && policies.iter().all(|p| {
                matches!(
                    p.algorithm(),
                    super::Algorithm::Gcra | super::Algorithm::TokenBucket
                ) && p.lockout().is_none()
            });
        // At least 1: `LimiterOptions::check` refuses 0.
        let max_in_flight = settings.max_in_flight.min(Semaphore::MAX_PERMITS);
        let shared = Shared::new(&settings, max_in_flight, &policies);
        let limiter = Self {
            client,
            key_heads,
            outage: settings.outage,
            deadline: settings.deadline,
            shadow: settings.shadow,
            max_wait: settings.max_wait,
            fifo,
            combine: settings.combine,
            breaker: settings.breaker,
            shared,
            policies,
            base,
            rates: settings.rates,
        };
        if limiter.shared.hybrid.is_some() {
            limiter.client.register_hybrid(Box::new(limiter.clone()));
        }
        limiter
    }

    /// The policies, in the order given.
    #[must_use]
    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    /// Whether shadow mode is on.
    #[must_use]
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// The circuit breaker in front of the store, if the limiter has one (a clone shares its
    /// state: [`is_open`](CircuitBreaker::is_open) says whether checks skip the store now).
    #[must_use]
    pub fn breaker(&self) -> Option<&CircuitBreaker> {
        self.breaker.as_ref()
    }

    /// Checks one request of cost 1 on `subject`, and consumes it if allowed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::ratelimit::{Policy, Rate};
    ///
    /// let client = distlock::Client::in_memory();
    /// let logins = client.rate_limiter(Policy::gcra("login", Rate::per_minute(3)?)?).build()?;
    /// for _ in 0..3 {
    ///     assert!(logins.check("user:7").await?.allowed);
    /// }
    /// let fourth = logins.check("user:7").await?;
    /// assert!(!fourth.allowed); // a denial is a decision, not an error
    /// assert_eq!(fourth.remaining, 0);
    /// assert!(fourth.retry_after.as_secs() > 0); // one more every 20 s
    /// // Subjects are independent.
    /// assert!(logins.check("user:8").await?.allowed);
    /// # Ok(()) }
    /// ```
    pub async fn check(&self, subject: &str) -> Result<Decision, RateLimitError> {
        self.check_n(subject, 1).await
    }

    /// What a cost-1 request would get now, consuming nothing (a check of cost 0).
    pub async fn peek(&self, subject: &str) -> Result<Decision, RateLimitError> {
        self.check_n(subject, 0).await
    }

    /// Checks a request of `cost` units (a weight: bytes, tokens, items) and consumes them if
    /// every policy allows. A cost of 0 peeks. A cost above a policy's
    /// [`limit`](Policy::limit) can never pass and fails with
    /// [`RateLimitError::CostTooLarge`] without a round trip.
    ///
    /// Errors: [`InvalidSubject`](RateLimitError::InvalidSubject) for an empty or over-long
    /// subject; with [`Outage::FailClosed`], [`Store`](RateLimitError::Store) or
    /// [`Overloaded`](RateLimitError::Overloaded) when the store cannot answer within the
    /// deadline. A denial is `Ok` with `allowed == false`.
    pub async fn check_n(&self, subject: &str, cost: u32) -> Result<Decision, RateLimitError> {
        self.counted(cost, async {
            self.check_uncounted(subject, cost)
                .await
                .map(|d| granting(d, cost))
        })
        .await
    }

    /// Times `check` and counts its decision (of `units`) in the metrics: the one wrapper of
    /// every public check.
    async fn counted(
        &self,
        units: u32,
        check: impl Future<Output = Result<Decision, RateLimitError>>,
    ) -> Result<Decision, RateLimitError> {
        let result = self.timed(check).await;
        if let Ok(decision) = &result {
            metrics::decided(decision, units);
        }
        result
    }

    /// Times `check` in the metrics, counting no decision (for a caller that counts its own).
    async fn timed<T>(&self, check: impl Future<Output = T>) -> T {
        let timer = CheckTimer::start();
        let result = check.await;
        timer.done(self.policies[0].shared_name());
        result
    }

    /// [`check_n`](Self::check_n), without its metrics.
    async fn check_uncounted(&self, subject: &str, cost: u32) -> Result<Decision, RateLimitError> {
        match &self.shared.hybrid {
            Some(shares) if cost > 0 => self.check_hybrid(shares, subject, cost).await,
            _ => self.check_exact(subject, cost).await,
        }
    }

    /// A check against the store (or the deny cache), every time.
    async fn check_exact(&self, subject: &str, cost: u32) -> Result<Decision, RateLimitError> {
        let step = Step {
            cost: Some(cost),
            cached_cost: cost,
            op: self.check_op(cost),
            unanswered_op: self.check_op(cost),
        };
        Ok(match self.pipeline(subject, step, |_| true).await? {
            Piped::Cached(hit) | Piped::Unanswered(hit) => hit,
            Piped::Answered(eff, reply) => self.decision(&eff, reply, Origin::Store),
        })
        .map(|decision| self.enforce(subject, decision))
    }

    /// The one pipeline of every check: the subject's own rates, its cost against them, the
    /// deny cache (a hit answers if `take_hit` says so), the keys, one operation on the
    /// store, and the outage policy when the store cannot answer. Shadow mode is the
    /// caller's, as are the figures it makes of the store's reply.
    pub(super) async fn pipeline(
        &self,
        subject: &str,
        step: Step,
        take_hit: impl FnOnce(&Decision) -> bool,
    ) -> Result<Piped, RateLimitError> {
        let eff = self.effective(subject).await?;
        if let Some(cost) = step.cost {
            validate_cost(&eff, cost)?;
        }
        // Invalid subjects are never cached, so the cache can be asked before the keys are
        // built: a hit costs no key, no round trip, and no allocation but the decision's.
        let cache = self.shared.deny_cache.as_ref();
        if let Some(hit) = cache
            .and_then(|c| c.lookup_for(subject, step.cached_cost, Instant::now(), &eff.recovery))
            .filter(take_hit)
        {
            // A hit is ready at once; spend tokio's cooperative budget so a caller hammering
            // a denied subject in a loop still lets the other tasks on its worker run.
            tokio::task::consume_budget().await;
            return Ok(Piped::Cached(hit));
        }
        let keys = self.keys(subject)?;
        match self.operate(subject, &keys, &eff, step.op).await {
            Ok(reply) => Ok(Piped::Answered(eff, reply)),
            Err(unavailable) => self
                .on_unavailable(subject, &keys, &eff, step.unanswered_op, unavailable)
                .map(Piped::Unanswered),
        }
    }

    /// The store's operation for a check of `cost`: all or nothing, or any of the policies.
    pub(super) fn check_op(&self, cost: u32) -> RateOp {
        match self.combine {
            Combine::All => RateOp::Check { cost },
            Combine::Any => RateOp::AnyOf { cost },
        }
    }

    /// Refuses an operation an any-of limiter does not define.
    fn defined(&self, operation: &'static str) -> Result<(), RateLimitError> {
        match self.combine {
            Combine::All => Ok(()),
            Combine::Any => Err(RateLimitError::NotForAnyOf { operation }),
        }
    }

    /// Takes as many units as every policy allows now, at most `n`, and says how many:
    /// [`granted`](Decision::granted), `0..=n`, atomically, in one round trip, for batch
    /// senders that would rather send part of a batch now than all of it later. Where
    /// [`check_n`](Self::check_n) is all or nothing, this takes the largest `k ≤ n` that a
    /// `check_n(subject, k)` would pass at that instant (the same for every algorithm; with
    /// several policies, the least any of them has left), so nothing is refused that would
    /// fit.
    ///
    /// The decision is `allowed` when it granted at least one unit; its figures are then as
    /// after consuming them (`remaining` is usually 0 when it granted less than `n`), and
    /// `retry_after` is zero. With nothing granted it is a denial with the figures of a peek:
    /// `retry_after` says when one unit will fit. `n` above a policy's limit is fine (it
    /// grants at most the limit); `n == 0` fails with [`RateLimitError::NoUnits`]. Other
    /// errors, the outage policy and the deny cache are as for [`check_n`](Self::check_n):
    /// failing open grants all `n` (and so does shadow mode, with
    /// [`shadowed`](Decision::shadowed) set when the store granted fewer); the local
    /// fallback grants what it has. An any-of limiter refuses it
    /// ([`RateLimitError::NotForAnyOf`]: it would not know which policy to grant from).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::ratelimit::{Policy, Rate};
    ///
    /// let client = distlock::Client::in_memory();
    /// let sms = client.rate_limiter(Policy::sliding_log("sms", Rate::per_minute(100)?)?).build()?;
    /// assert_eq!(sms.check_up_to("tenant:7", 70).await?.granted, 70);
    /// let second = sms.check_up_to("tenant:7", 70).await?; // only 30 fit
    /// assert!(second.allowed);
    /// assert_eq!((second.granted, second.remaining), (30, 0));
    /// let third = sms.check_up_to("tenant:7", 70).await?;
    /// assert!(!third.allowed && third.granted == 0);
    /// assert!(third.retry_after > std::time::Duration::ZERO); // when the first of the 100 leaves
    /// # Ok(()) }
    /// ```
    pub async fn check_up_to(&self, subject: &str, n: u32) -> Result<Decision, RateLimitError> {
        self.counted(n, self.check_up_to_uncounted(subject, n))
            .await
    }

    /// [`check_up_to`](Self::check_up_to), without its metrics.
    async fn check_up_to_uncounted(
        &self,
        subject: &str,
        n: u32,
    ) -> Result<Decision, RateLimitError> {
        self.defined("check_up_to")?;
        if n == 0 {
            return Err(RateLimitError::NoUnits);
        }
        // A cached denial says one unit does not fit yet (cost 0): nothing would be granted.
        let op = RateOp::CheckUpTo { max: n };
        let step = Step {
            cost: None,
            cached_cost: 0,
            op,
            unanswered_op: op,
        };
        let decision = match self.pipeline(subject, step, |_| true).await? {
            Piped::Cached(hit) | Piped::Unanswered(hit) => hit,
            Piped::Answered(eff, reply) => self.decision(&eff, reply, Origin::Store),
        };
        Ok(self.enforce_up_to(subject, decision, n))
    }

    /// Shadow mode and failing open for a [`check_up_to`](Self::check_up_to): all `n` go.
    fn enforce_up_to(&self, subject: &str, decision: Decision, n: u32) -> Decision {
        let mut decision = self.enforce(subject, decision);
        if self.shadow && decision.granted < n {
            decision.allowed = true;
            decision.shadowed = true;
            decision.granted = n;
        }
        if decision.origin == Origin::FailOpen {
            decision.granted = n;
        }
        decision
    }

    /// `subject`'s policies: the limiter's own, or with the rates looked up for it.
    async fn effective(&self, subject: &str) -> Result<Arc<Effective>, RateLimitError> {
        match &self.rates {
            None => Ok(Arc::clone(&self.base)),
            Some(table) => {
                // An unusable subject is refused before anyone is asked about it.
                crate::keys::check_name(subject)?;
                Ok(table.effective(subject, &self.base, self.deadline).await)
            }
        }
    }

    /// Clears `subject`'s state under every policy of this limiter, atomically, in one round
    /// trip: the subject starts afresh. Answers what a cost-1 request would get now.
    ///
    /// Not subject to the outage policy: when the store cannot answer within the deadline
    /// it fails with [`Store`](RateLimitError::Store) (or
    /// [`CircuitOpen`](RateLimitError::CircuitOpen)), whatever the policy; with
    /// [`Outage::LocalFallback`] the local limiter is reset as well.
    pub async fn reset(&self, subject: &str) -> Result<Decision, RateLimitError> {
        if let Some(shares) = &self.shared.hybrid {
            shares.forget(subject);
        }
        self.adjust(subject, RateOp::Reset).await
    }

    /// Gives back `units` that were charged for a request that did not happen (the upstream
    /// call failed before it was made, the job was cancelled), under every policy,
    /// atomically, in one round trip. A subject never ends up fuller than full; a refund of 0
    /// changes nothing. Answers what a cost-1 request would get now.
    ///
    /// Which units come back: GCRA and the token bucket move the subject's debt back by
    /// `units` intervals; the windows take them from the current window first (the sliding
    /// window counter then from the previous one); the sliding log drops its newest
    /// entries. Failures are those of [`reset`](Self::reset); an any-of limiter refuses a
    /// refund ([`RateLimitError::NotForAnyOf`]: it would not know which policy to credit).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::ratelimit::{Policy, Rate};
    ///
    /// let client = distlock::Client::in_memory();
    /// let exports = client.rate_limiter(Policy::sliding_log("exports", Rate::per_hour(2)?)?).build()?;
    /// exports.check("user:7").await?;
    /// exports.check("user:7").await?;
    /// assert!(!exports.check("user:7").await?.allowed);
    /// // The second export failed before it started: give it back.
    /// let now = exports.refund("user:7", 1).await?;
    /// assert!(now.allowed && now.remaining == 1);
    /// # Ok(()) }
    /// ```
    pub async fn refund(&self, subject: &str, units: u32) -> Result<Decision, RateLimitError> {
        self.adjust(subject, RateOp::Refund(units)).await
    }

    /// Charges `units` extra (a failed login, an expensive error), under every policy,
    /// atomically, in one round trip, whether or not they fit: a penalty uses up what the
    /// subject has left but never puts it in debt beyond empty, so no penalty makes a subject
    /// wait longer than the policy's reset time (and nobody can lock another subject out
    /// for longer by charging it). Answers what a cost-1 request would get now. Failures are
    /// those of [`reset`](Self::reset); an any-of limiter refuses a penalty
    /// ([`RateLimitError::NotForAnyOf`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::ratelimit::{Policy, Rate};
    ///
    /// let client = distlock::Client::in_memory();
    /// let logins = client.rate_limiter(Policy::gcra("login", Rate::per_minute(10)?)?).build()?;
    /// assert!(logins.check("alice").await?.allowed);
    /// // Wrong password: count it as four attempts.
    /// let after = logins.penalize("alice", 3).await?;
    /// assert_eq!(after.remaining, 6);
    /// # Ok(()) }
    /// ```
    pub async fn penalize(&self, subject: &str, units: u32) -> Result<Decision, RateLimitError> {
        self.adjust(subject, RateOp::Penalize(units)).await
    }

    /// A reset, refund or penalty: the store or an error (the fallback follows along).
    async fn adjust(&self, subject: &str, op: RateOp) -> Result<Decision, RateLimitError> {
        match op {
            RateOp::Refund(_) => self.defined("refund")?,
            RateOp::Penalize(_) => self.defined("penalize")?,
            _ => {}
        }
        let keys = self.keys(subject)?;
        let eff = self.effective(subject).await?;
        if self.outage == Outage::LocalFallback {
            let req = RateRequest {
                keys: &keys,
                params: &eff.params,
                op,
            };
            self.shared.fallback.check_rate(&req);
        }
        match self.operate(subject, &keys, &eff, op).await {
            Ok(reply) => Ok(self.decision(&eff, reply, Origin::Store)),
            Err(unavailable) => {
                self.shared.outage_log.unanswered(&unavailable, None);
                Err(unavailable.into())
            }
        }
    }
}

/// One run of the check [`pipeline`](RateLimiter::pipeline): what to check and ask.
#[derive(Clone, Copy)]
pub(super) struct Step {
    /// The cost checked against the subject's policies before anything else (`None`: the
    /// operation bounds itself, as a partial grant does).
    pub(super) cost: Option<u32>,
    /// The cost the deny cache is asked about.
    pub(super) cached_cost: u32,
    /// The store's operation.
    pub(super) op: RateOp,
    /// The operation the outage policy answers for when the store cannot.
    pub(super) unanswered_op: RateOp,
}

/// What the check pipeline found.
pub(super) enum Piped {
    /// The deny cache's denial: no round trip.
    Cached(Decision),
    /// The store's reply, with the subject's policies it answered for.
    Answered(Arc<Effective>, RateReply),
    /// The outage policy's decision: the store could not answer.
    Unanswered(Decision),
}

/// Refuses a cost above what one of the subject's policies allows at once.
fn validate_cost(eff: &Effective, cost: u32) -> Result<(), RateLimitError> {
    match eff.policies.iter().find(|p| cost > p.limit()) {
        Some(p) => Err(RateLimitError::CostTooLarge {
            cost,
            policy: p.name().to_owned(),
            capacity: p.limit(),
        }),
        None => Ok(()),
    }
}

/// `decision` with what it grants a request of `cost`: all of it when allowed (consumed, or
/// let through by failing open or shadow mode), nothing otherwise.
fn granting(mut decision: Decision, cost: u32) -> Decision {
    decision.granted = if decision.allowed { cost } else { 0 };
    decision
}
