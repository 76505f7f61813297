//! [`RateLimiter`]: policies bound to a client, plus what happens around each check (the
//! deny cache, the deadline, the outage policy, shadow mode).

use std::sync::Arc;
#[cfg(feature = "test-util")]
use std::sync::atomic::AtomicU64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::deny_cache::DenyCache;
use super::{Decision, Origin, Policy, PolicyDecision};
use crate::Client;
use crate::error::{InvalidPolicy, RateLimitError, StoreError};
use crate::keys::{rate_key_head, rate_keys};
use crate::store::{MemoryStore, PolicyParams, RateReply, RateRequest, Store};

/// The most policies one limiter combines (one key each, in one script).
pub const MAX_POLICIES: usize = 8;
/// The default size of the local deny cache, in subjects.
pub const DEFAULT_DENY_CACHE: usize = 10_000;
/// The default limit on checks of one limiter waiting on the store at once.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 4096;

/// What a check does when the store cannot answer in time (down, slow, refusing, or more
/// than [`max_in_flight`](RateLimiter::max_in_flight) checks already waiting).
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use distlock::ratelimit::{Outage, Policy, Rate};
///
/// let client = distlock::Client::in_memory();
/// let policy = Policy::gcra("login", Rate::per_minute(5)?)?;
/// // Logins: better refuse than let a password-guessing burst through unmetered.
/// let logins = client.rate_limiter(policy.clone()).on_outage(Outage::FailClosed);
/// // Page views: better serve than fail while Redis restarts.
/// let views = client.rate_limiter(policy).on_outage(Outage::FailOpen);
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
    /// The check allows the request ([`Origin::FailOpen`]): availability over protection.
    FailOpen,
    /// The check is decided by an in-memory limiter with the same policies, local to this
    /// process ([`Origin::LocalFallback`]): with `n` replicas, up to `n` times the limit
    /// gets through while the store is away.
    LocalFallback,
}

/// Checks requests against one or more [`Policy`]s on a subject (a user, an API key, an IP
/// address). Cheap to clone; clones share the deny cache and the in-flight limit.
///
/// Every check is one atomic round trip (or none, when the deny cache answers). With several
/// policies the check is all-or-nothing: if any policy denies, none consumes.
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
///     ])?
///     .on_outage(Outage::LocalFallback)
///     .deadline(Duration::from_millis(50));
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
    client: Client,
    policies: Arc<[Policy]>,
    params: Arc<[PolicyParams]>,
    /// Each policy's key up to the subject (see [`rate_key_head`]).
    key_heads: Arc<[Box<str>]>,
    outage: Outage,
    deadline: Duration,
    shadow: bool,
    shared: Arc<Shared>,
}

/// State shared by clones.
struct Shared {
    deny_cache: Option<DenyCache>,
    max_in_flight: usize,
    in_flight: Semaphore,
    fallback: MemoryStore,
    degraded: AtomicBool,
    /// Round trips attempted, for tests.
    #[cfg(feature = "test-util")]
    store_calls: AtomicU64,
}

impl Shared {
    fn new(deny_cache: usize, max_in_flight: usize, policies: &[Policy]) -> Arc<Self> {
        Arc::new(Self {
            deny_cache: (deny_cache > 0).then(|| DenyCache::new(deny_cache, policies)),
            max_in_flight,
            in_flight: Semaphore::new(max_in_flight),
            fallback: MemoryStore::new(),
            degraded: AtomicBool::new(false),
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

/// Why the store gave no answer.
enum Unavailable {
    Store(StoreError),
    Overloaded(usize),
}

impl From<Unavailable> for RateLimitError {
    fn from(u: Unavailable) -> Self {
        match u {
            Unavailable::Store(e) => Self::Store(e),
            Unavailable::Overloaded(in_flight) => Self::Overloaded { in_flight },
        }
    }
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Store(e) => e.fmt(f),
            Self::Overloaded(n) => write!(f, "{n} checks already waiting on the store"),
        }
    }
}

impl Client {
    /// A rate limiter enforcing one policy. See [`RateLimiter`] for the options.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::ratelimit::{Policy, Rate};
    ///
    /// let client = distlock::Client::in_memory();
    /// let limiter = client.rate_limiter(Policy::gcra("api", Rate::per_second(100)?.burst(20)?)?);
    /// assert!(limiter.check("user:7").await?.allowed);
    /// # Ok(()) }
    /// ```
    pub fn rate_limiter(&self, policy: Policy) -> RateLimiter {
        RateLimiter::new(self.clone(), vec![policy])
    }

    /// A rate limiter enforcing several policies on each subject, all or nothing: a request
    /// passes only if every policy allows it, and then it consumes from every one. Fails if
    /// there are none, more than [`MAX_POLICIES`], or two with the same name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::ratelimit::{Policy, Rate};
    ///
    /// let client = distlock::Client::in_memory();
    /// let limiter = client.rate_limiter_all([
    ///     Policy::gcra("per-second", Rate::per_second(10)?)?,
    ///     Policy::fixed_window("per-day", Rate::per_day(2)?)?,
    /// ])?;
    /// assert!(limiter.check("user:7").await?.allowed);
    /// assert!(limiter.check("user:7").await?.allowed);
    /// let third = limiter.check("user:7").await?;
    /// assert!(!third.allowed);
    /// assert_eq!(&*third.policy, "per-day"); // the per-second policy was not consumed
    /// assert_eq!(third.policies[0].remaining, 8);
    /// # Ok(()) }
    /// ```
    pub fn rate_limiter_all(
        &self,
        policies: impl IntoIterator<Item = Policy>,
    ) -> Result<RateLimiter, InvalidPolicy> {
        let policies: Vec<Policy> = policies.into_iter().collect();
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
        Ok(RateLimiter::new(self.clone(), policies))
    }
}

impl RateLimiter {
    fn new(client: Client, policies: Vec<Policy>) -> Self {
        let policies: Arc<[Policy]> = policies.into();
        let params: Arc<[PolicyParams]> = policies.iter().map(Policy::params).collect();
        let key_heads = policies
            .iter()
            .map(|p| rate_key_head(client.prefix(), p.name(), p.algorithm().key_part()))
            .collect();
        let deadline = client.store().op_timeout();
        Self {
            client,
            policies: Arc::clone(&policies),
            key_heads,
            outage: Outage::default(),
            deadline,
            shadow: false,
            shared: Shared::new(DEFAULT_DENY_CACHE, DEFAULT_MAX_IN_FLIGHT, &policies),
            params,
        }
    }

    /// What to do when the store cannot answer (default [`Outage::FailClosed`]).
    #[must_use]
    pub fn on_outage(mut self, outage: Outage) -> Self {
        self.outage = outage;
        self
    }

    /// The most a check may take, round trip included (default: the client's response
    /// timeout, 2 s unless changed). Past it the outage policy decides. At least 1 ms.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline.max(Duration::from_millis(1));
        self
    }

    /// Shadow mode: decide and count as usual, but never deny. A request the policies deny is
    /// allowed with [`Decision::shadowed`] set and reported through `tracing` (target
    /// `distlock::ratelimit`, level INFO), and a store outage fails open. For trying a
    /// policy on live traffic before enforcing it.
    #[must_use]
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// The local deny cache's size in subjects (default [`DEFAULT_DENY_CACHE`]); 0 turns it
    /// off. Call before cloning the limiter: clones made earlier keep the old cache.
    ///
    /// After the store denies a subject, until that denial's `retry_after`, a check on the
    /// subject that the store would deny too is answered locally ([`Origin::DenyCache`]),
    /// with the figures the store would give for that check's own cost, every policy's.
    /// Checks whose figures the cache cannot tell exactly ask the store, and every answer of
    /// the store refreshes what the cache knows. Waits are counted from when the denied
    /// check was sent, so they can be short by up to a round trip.
    #[must_use]
    pub fn deny_cache(mut self, subjects: usize) -> Self {
        self.shared = Shared::new(subjects, self.shared.max_in_flight, &self.policies);
        self
    }

    /// How many checks may wait on the store at once (default [`DEFAULT_MAX_IN_FLIGHT`],
    /// at least 1; larger than tokio's `Semaphore::MAX_PERMITS` is cut to it). One more is not queued: the outage policy answers it at once, so a slow
    /// store never builds an unbounded backlog. Call before cloning the limiter.
    #[must_use]
    pub fn max_in_flight(mut self, checks: usize) -> Self {
        let cache = self
            .shared
            .deny_cache
            .as_ref()
            .map_or(0, DenyCache::capacity);
        let checks = checks.clamp(1, Semaphore::MAX_PERMITS);
        self.shared = Shared::new(cache, checks, &self.policies);
        self
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

    /// Checks one request of cost 1 on `subject`, and consumes it if allowed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::ratelimit::{Policy, Rate};
    ///
    /// let client = distlock::Client::in_memory();
    /// let logins = client.rate_limiter(Policy::gcra("login", Rate::per_minute(3)?)?);
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
        self.validate_cost(cost)?;
        if matches!(self.client.store(), Store::Quorum(_)) {
            return Err(RateLimitError::UnsupportedStore {
                reason: crate::store::quorum::RATE_LIMITS_UNSUPPORTED,
            });
        }
        // Invalid subjects are never cached, so the cache can be asked before the keys are
        // built: a hit costs no key, no round trip, and no allocation but the decision's.
        let cache = self.shared.deny_cache.as_ref();
        if let Some(hit) = cache.and_then(|c| c.lookup(subject, cost, Instant::now())) {
            // A hit is ready at once; spend tokio's cooperative budget so a caller hammering
            // a denied subject in a loop still lets the other tasks on its worker run.
            tokio::task::consume_budget().await;
            return Ok(self.enforce(subject, hit));
        }
        let keys = self.keys(subject)?;
        let sent = cache.map(DenyCache::sending);
        match self.ask_store(&keys, cost).await {
            Ok(reply) => {
                if self.shared.degraded.swap(false, Ordering::Relaxed) {
                    tracing::info!(target: "distlock::ratelimit", "rate-limit store is back");
                }
                let decision = self.decision(reply, Origin::Store);
                // Every answer refreshes or drops the subject's entry, so the cache never
                // serves figures the store has moved past.
                if let (Some(cache), Some(sent)) = (cache, sent) {
                    cache.record(subject, cost, sent, &decision);
                }
                Ok(self.enforce(subject, decision))
            }
            Err(unavailable) => {
                // Sent but unanswered (a timeout, a dropped connection): the store may have
                // applied it, so the cached figures may be stale.
                if let (Some(cache), Unavailable::Store(_)) = (cache, &unavailable)
                    && cost > 0
                {
                    cache.unanswered(subject);
                }
                self.on_unavailable(subject, &keys, cost, unavailable)
            }
        }
    }

    /// Test hook (`test-util`): one check decided at `now_us` (µs since the epoch) instead of
    /// the store's clock, straight to the store (no deny cache, no shadow mode, no outage
    /// policy). On Redis it is a separate script text, and every ttl it sets gets an hour of
    /// slack, since the server expires keys on its own clock.
    #[cfg(feature = "test-util")]
    #[doc(hidden)]
    pub async fn __check_at(
        &self,
        subject: &str,
        cost: u32,
        now_us: u64,
    ) -> Result<Decision, RateLimitError> {
        self.validate_cost(cost)?;
        let keys = self.keys(subject)?;
        let req = RateRequest {
            keys: &keys,
            params: &self.params,
            cost,
        };
        let reply = self.client.store().rate_limit_at(&req, now_us).await?;
        Ok(self.decision(reply, Origin::Store))
    }

    /// Test hook (`test-util`): the store keys of `subject`, one per policy.
    #[cfg(feature = "test-util")]
    #[doc(hidden)]
    pub fn __keys(&self, subject: &str) -> Result<Vec<String>, RateLimitError> {
        self.keys(subject)
    }

    /// Test hook (`test-util`): subjects in the deny cache.
    #[cfg(feature = "test-util")]
    #[doc(hidden)]
    pub fn __deny_cache_len(&self) -> usize {
        self.shared.deny_cache.as_ref().map_or(0, DenyCache::len)
    }

    /// Test hook (`test-util`): round trips this limiter (and its clones) attempted.
    #[cfg(feature = "test-util")]
    #[doc(hidden)]
    pub fn __store_calls(&self) -> u64 {
        self.shared.store_calls.load(Ordering::Relaxed)
    }

    /// Test hook (`test-util`): checks waiting on the store right now.
    #[cfg(feature = "test-util")]
    #[doc(hidden)]
    pub fn __in_flight(&self) -> usize {
        self.shared.max_in_flight - self.shared.in_flight.available_permits()
    }

    fn validate_cost(&self, cost: u32) -> Result<(), RateLimitError> {
        match self.policies.iter().find(|p| cost > p.limit()) {
            Some(p) => Err(RateLimitError::CostTooLarge {
                cost,
                policy: p.name().to_owned(),
                capacity: p.limit(),
            }),
            None => Ok(()),
        }
    }

    fn keys(&self, subject: &str) -> Result<Vec<String>, RateLimitError> {
        Ok(rate_keys(&self.key_heads, subject)?)
    }

    /// One round trip, bounded by the deadline and the in-flight limit.
    async fn ask_store(&self, keys: &[String], cost: u32) -> Result<RateReply, Unavailable> {
        let Ok(_permit) = self.shared.in_flight.try_acquire() else {
            return Err(Unavailable::Overloaded(self.shared.max_in_flight));
        };
        #[cfg(feature = "test-util")]
        self.shared.store_calls.fetch_add(1, Ordering::Relaxed);
        let req = RateRequest {
            keys,
            params: &self.params,
            cost,
        };
        let reply = tokio::time::timeout(self.deadline, self.client.store().rate_limit(&req))
            .await
            .map_err(|_| {
                Unavailable::Store(StoreError::Timeout {
                    after: self.deadline,
                })
            })?
            .map_err(Unavailable::Store)?;
        if reply.verdicts.len() == self.policies.len() {
            Ok(reply)
        } else {
            Err(Unavailable::Store(StoreError::Protocol {
                message: format!(
                    "{} verdicts for {} policies",
                    reply.verdicts.len(),
                    self.policies.len()
                ),
            }))
        }
    }

    fn decision(&self, reply: RateReply, origin: Origin) -> Decision {
        let per_policy = self
            .policies
            .iter()
            .zip(reply.verdicts)
            .map(|(p, v)| PolicyDecision {
                policy: Arc::clone(p.shared_name()),
                allowed: v.allowed,
                limit: u64::from(p.limit()),
                remaining: v.remaining,
                retry_after: Duration::from_micros(v.retry_us),
                reset_after: Duration::from_micros(v.reset_us),
            })
            .collect();
        Decision::from_policies(per_policy, origin)
    }

    /// Applies shadow mode to a decision.
    fn enforce(&self, subject: &str, mut decision: Decision) -> Decision {
        if self.shadow && !decision.allowed {
            tracing::info!(
                target: "distlock::ratelimit",
                subject,
                policy = &*decision.policy,
                retry_after_ms = u64::try_from(decision.retry_after.as_millis()).unwrap_or(u64::MAX),
                origin = ?decision.origin,
                "shadow mode: the rate limit would have denied this request"
            );
            decision.allowed = true;
            decision.shadowed = true;
        }
        decision
    }

    fn on_unavailable(
        &self,
        subject: &str,
        keys: &[String],
        cost: u32,
        why: Unavailable,
    ) -> Result<Decision, RateLimitError> {
        let outage = if self.shadow {
            Outage::FailOpen
        } else {
            self.outage
        };
        if !self.shared.degraded.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                target: "distlock::ratelimit",
                error = %why,
                ?outage,
                "rate-limit store unavailable; applying the outage policy until it answers again"
            );
        }
        match outage {
            Outage::FailClosed => Err(why.into()),
            Outage::FailOpen => {
                let per_policy = self
                    .policies
                    .iter()
                    .map(|p| PolicyDecision {
                        policy: Arc::clone(p.shared_name()),
                        allowed: true,
                        limit: u64::from(p.limit()),
                        remaining: u64::from(p.limit()),
                        retry_after: Duration::ZERO,
                        reset_after: Duration::ZERO,
                    })
                    .collect();
                Ok(Decision::from_policies(per_policy, Origin::FailOpen))
            }
            Outage::LocalFallback => {
                let req = RateRequest {
                    keys,
                    params: &self.params,
                    cost,
                };
                let reply = self.shared.fallback.check_rate(&req);
                Ok(self.enforce(subject, self.decision(reply, Origin::LocalFallback)))
            }
        }
    }
}
