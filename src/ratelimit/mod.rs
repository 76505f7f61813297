//! Distributed rate limiting: five algorithms, each one atomic round trip on Redis (or the
//! same logic in memory), with the fields of redis-cell's `CL.THROTTLE`.
//!
//! * A [`Rate`] says how many per period and how many at once (the burst); a [`Policy`]
//!   names a rate and picks an [`Algorithm`] (GCRA by default); a [`RateLimiter`], made by a
//!   [`RateLimiterBuilder`], binds one or more policies to a [`Client`](crate::Client) and
//!   answers [`Decision`]s.
//! * Time is the store's (Redis `TIME`, in microseconds), never the caller's, so replicas
//!   with skewed clocks agree. Every key has a ttl equal to the time its state stops
//!   mattering; GCRA keeps one integer per subject and policy.
//! * Keys are `<prefix>:rl:<policy>:<algorithm>:{<subject>}`: the subject is the hash tag,
//!   so all policies of one check share a slot.
//! * Around the store: a local deny cache (no round trip while a subject is known to be
//!   denied), a deadline on every check, an [`Outage`] policy for when the store cannot
//!   answer, a cap on checks in flight, and shadow mode.
//! * Errors are [`RateLimitError`] (also `distlock::RateLimitError`, at the crate root); the
//!   attribute for async functions is `#[rate_limit]`, `distlock::ratelimit::rate_limit` (also
//!   `distlock::rate_limit`; feature `macros`, on by default).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use distlock::ratelimit::{Policy, Rate};
//!
//! let client = distlock::Client::in_memory();
//! let limiter = client
//!     .rate_limiter(Policy::gcra("api", Rate::per_second(100)?.burst(20)?)?)
//!     .build()?;
//! let d = limiter.check("user:7").await?;
//! assert!(d.allowed);
//! println!("{} of {} left; full again in {:?}", d.remaining, d.limit, d.reset_after);
//! # Ok(()) }
//! ```

mod breaker;
mod builder;
mod decision;
mod deny_cache;
mod limiter;
mod lockout;
pub(crate) mod metrics;
mod options;
mod outage;
mod policy;
mod rate;
mod reservation;
mod subject_rates;
mod text;

pub use self::breaker::{
    CircuitBreaker, DEFAULT_BREAKER_FAILURES, DEFAULT_BREAKER_MAX_OPEN, DEFAULT_BREAKER_OPEN,
};
pub use self::builder::RateLimiterBuilder;
pub use self::decision::{Decision, Origin, PolicyDecision};
#[cfg(feature = "test-util")]
#[doc(hidden)]
pub use self::limiter::TestOp as __TestOp;
pub use self::limiter::{
    DEFAULT_DENY_CACHE, DEFAULT_DENY_CACHE_MAX_AGE, DEFAULT_HYBRID_SUBJECTS, DEFAULT_MAX_IN_FLIGHT,
    MAX_POLICIES, MAX_WAIT, RateLimiter,
};
pub use self::lockout::{DEFAULT_LOCKOUT_MEMORY, Lockout, MAX_LOCKOUT_STEPS, MIN_LOCKOUT};
pub use self::options::LimiterOptions;
pub use self::outage::{Outage, ParseOutageError};
pub use self::policy::ParsePolicyError;
pub use self::policy::{Algorithm, MAX_LOG_LIMIT, MAX_POLICY_NAME_LEN, Policy};
pub use self::rate::ParseRateError;
pub use self::rate::{MAX_PERIOD, MIN_PERIOD, Rate};
pub use self::reservation::Reservation;
pub use self::subject_rates::{
    DEFAULT_RATE_CACHE_SUBJECTS, DEFAULT_RATE_CACHE_TTL, LookupError, RateLookup, SubjectRates,
};
/// The limiters' errors, here beside them as well as at the crate root.
pub use crate::error::RateLimitError;
/// `#[rate_limit]`, here beside the limiters as well as at the crate root.
#[cfg(feature = "macros")]
pub use distlock_macros::rate_limit;
