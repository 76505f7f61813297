//! The text grammar and the bounds that [distlock](https://docs.rs/distlock) and its
//! attribute macros ([distlock-macros](https://docs.rs/distlock-macros)) share, so that a
//! policy, a rate, a duration or a ttl is read and checked by one piece of code whether it
//! comes from a builder, a configuration file, a tower layer or `#[rate_limit(policy =
//! "...")]` at compile time.
//!
//! Use it through distlock: its constants are re-exported there (`distlock::MIN_TTL`,
//! `distlock::ratelimit::MAX_PERIOD`, ...), and its parsers are behind distlock's `FromStr`
//! impls and configuration. This crate is std only and returns plain data: the parsed value
//! ([`RateText`], [`PolicyText`], a [`Duration`](std::time::Duration)) or what is wrong and
//! where ([`ParseError`] with a [`Problem`] and byte offsets, [`DurationError`],
//! [`OutOfRange`]); the callers turn those into their own errors (typed errors at run time,
//! spanned compile errors in the macros).
//!
//! ```
//! use std::time::Duration;
//! use distlock_grammar::{Algorithm, check_ttl, parse_duration, parse_policy};
//!
//! let policy = parse_policy("api: token-bucket 100/s burst 20").unwrap();
//! assert_eq!(policy.algorithm, Algorithm::TokenBucket);
//! assert_eq!((policy.rate.count, policy.rate.burst), (100, 20));
//!
//! let ttl = parse_duration("1m 30s").unwrap();
//! assert_eq!(check_ttl(ttl), Ok(Duration::from_secs(90)));
//! ```
//!
//! The grammars are in the modules' docs: [`rate`], [`policy`], [`duration`]; the lock
//! options every door reads by name are in [`options`].

mod algorithm;
pub mod bounds;
pub mod duration;
pub mod options;
pub mod policy;
mod problem;
pub mod rate;

pub use bounds::{
    DEFAULT_TTL, MAX_BACKOFF, MAX_LOCKOUT_STEPS, MAX_LOG_LIMIT, MAX_PERIOD, MAX_POLICIES,
    MAX_POLICY_NAME_LEN, MAX_REFILL, MAX_TTL, MAX_WAIT, MIN_LOCKOUT, MIN_PERIOD, MIN_TTL,
    OutOfRange, check_lockout, check_max_wait, check_ttl,
};
pub use duration::{DurationError, DurationText, parse_duration};
pub use options::{LOCK_OPTIONS, LockOptionSpec, OptionKind, OptionValue, lock_option};
pub use policy::{Algorithm, PolicyText, check_policy, check_policy_name, kebab, parse_policy};
pub use problem::{ParseError, Problem, Refusal};
pub use rate::{PeriodText, RateText, check_burst, check_rate, interval_us, parse_rate};
