//! [`Policy`]: a named [`Rate`] enforced by one [`Algorithm`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::Rate;
use crate::error::InvalidPolicy;
use crate::store::{Kind, PolicyParams};

/// The most requests per window a sliding log accepts (it stores one entry per request).
pub const MAX_LOG_LIMIT: u32 = 10_000;

/// The longest policy name, in bytes.
pub const MAX_POLICY_NAME_LEN: usize = 64;

/// How a [`Policy`] counts. All five run as one atomic script with one round trip on Redis,
/// read time from the server, and give every key a ttl.
///
/// The *boundary bound* is the most requests that can pass in any span of length `d`
/// (`L` = limit or burst, `P` = period, `T` = emission interval):
///
/// | algorithm | state per subject | any span `d ≤ P` lets through at most |
/// |---|---|---|
/// | [`Gcra`](Self::Gcra) | one integer (the TAT) | `burst + ⌊d / T⌋` |
/// | [`TokenBucket`](Self::TokenBucket) | two integers | `burst + ⌊d / T⌋` |
/// | [`FixedWindow`](Self::FixedWindow) | two integers | `2L` (`L` at the end of one window, `L` at the start of the next) |
/// | [`SlidingWindow`](Self::SlidingWindow) | three integers | `L + ⌊L·d / P⌋` |
/// | [`SlidingLog`](Self::SlidingLog) | one entry per request in the window (≤ `L`) | `L` (exact) |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// The generic cell rate algorithm (leaky bucket as a meter), as redis-cell's
    /// `CL.THROTTLE`: one key holding the theoretical arrival time. The default.
    #[default]
    Gcra,
    /// A token bucket of `burst` tokens refilled one every emission interval. Same bounds as
    /// GCRA; state is the token count and the last refill time.
    TokenBucket,
    /// `count` per window of `period`, windows aligned to the Unix epoch. Cheap and easy to
    /// explain, but lets `2 × count` through around a window boundary.
    FixedWindow,
    /// The sliding window counter: this window's count plus the previous window's count
    /// weighted by how much of it still overlaps the sliding window (rounded up). An O(1)
    /// approximation of the sliding log.
    SlidingWindow,
    /// Exact: a sorted set of the allowed requests of the last `period` (rejected requests
    /// are never stored), at most `count` ≤ [`MAX_LOG_LIMIT`] entries per subject.
    SlidingLog,
}

impl Algorithm {
    /// A short lowercase name (`"gcra"`, `"token bucket"`, ...), for logs and messages.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Gcra => "gcra",
            Self::TokenBucket => "token bucket",
            Self::FixedWindow => "fixed window",
            Self::SlidingWindow => "sliding window",
            Self::SlidingLog => "sliding log",
        }
    }

    /// The algorithm's part of a key.
    pub(crate) fn key_part(self) -> &'static str {
        match self {
            Self::Gcra => "gcra",
            Self::TokenBucket => "tb",
            Self::FixedWindow => "fw",
            Self::SlidingWindow => "sw",
            Self::SlidingLog => "sl",
        }
    }

    /// Whether `burst` means anything to this algorithm (it does for GCRA and the token
    /// bucket; window algorithms allow `count` per window).
    fn has_burst(self) -> bool {
        matches!(self, Self::Gcra | Self::TokenBucket)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A named rate enforced by one algorithm. Its name is part of the keys and of the
/// `RateLimit-Policy` HTTP field, so two policies with different limits must have different
/// names (changing a policy's rate under the same name reuses the old state, which is what
/// you want for a deploy that raises a limit).
///
/// ```
/// use distlock::ratelimit::{Algorithm, Policy, Rate};
///
/// # fn main() -> Result<(), distlock::InvalidPolicy> {
/// let api = Policy::gcra("api", Rate::per_second(100)?.burst(20)?)?;
/// assert_eq!(api.limit(), 20);
///
/// let hourly = Policy::fixed_window("api-hourly", Rate::per_hour(1000)?)?;
/// assert_eq!(hourly.algorithm(), Algorithm::FixedWindow);
///
/// // A window allows `count` per window: a different burst is refused, not ignored.
/// assert!(Policy::fixed_window("w", Rate::per_second(10)?.burst(3)?).is_err());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Policy {
    name: Arc<str>,
    algorithm: Algorithm,
    rate: Rate,
}

impl Policy {
    /// A policy with any algorithm. Fails if the name is not 1 to 64 characters of
    /// `A-Z a-z 0-9 . _ -`, if a window algorithm is given a burst different from its count,
    /// or if a sliding log's count exceeds [`MAX_LOG_LIMIT`].
    pub fn new(
        name: impl Into<String>,
        algorithm: Algorithm,
        rate: Rate,
    ) -> Result<Self, InvalidPolicy> {
        let name = name.into();
        let valid_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if name.is_empty() || name.len() > MAX_POLICY_NAME_LEN || !name.chars().all(valid_char) {
            return Err(InvalidPolicy::Name { name });
        }
        if !algorithm.has_burst() && rate.capacity() != rate.count() {
            return Err(InvalidPolicy::BurstNotSupported {
                policy: name,
                algorithm: algorithm.name(),
                burst: rate.capacity(),
                count: rate.count(),
            });
        }
        if algorithm == Algorithm::SlidingLog && rate.count() > MAX_LOG_LIMIT {
            return Err(InvalidPolicy::LogTooLarge {
                policy: name,
                limit: rate.count(),
                max: MAX_LOG_LIMIT,
            });
        }
        Ok(Self {
            name: name.into(),
            algorithm,
            rate,
        })
    }

    /// A [GCRA](Algorithm::Gcra) policy (the default algorithm).
    pub fn gcra(name: impl Into<String>, rate: Rate) -> Result<Self, InvalidPolicy> {
        Self::new(name, Algorithm::Gcra, rate)
    }

    /// A [token bucket](Algorithm::TokenBucket) policy.
    pub fn token_bucket(name: impl Into<String>, rate: Rate) -> Result<Self, InvalidPolicy> {
        Self::new(name, Algorithm::TokenBucket, rate)
    }

    /// A [fixed window](Algorithm::FixedWindow) policy: `rate.count()` per `rate.period()`.
    pub fn fixed_window(name: impl Into<String>, rate: Rate) -> Result<Self, InvalidPolicy> {
        Self::new(name, Algorithm::FixedWindow, rate)
    }

    /// A [sliding window counter](Algorithm::SlidingWindow) policy.
    pub fn sliding_window(name: impl Into<String>, rate: Rate) -> Result<Self, InvalidPolicy> {
        Self::new(name, Algorithm::SlidingWindow, rate)
    }

    /// A [sliding log](Algorithm::SlidingLog) policy.
    pub fn sliding_log(name: impl Into<String>, rate: Rate) -> Result<Self, InvalidPolicy> {
        Self::new(name, Algorithm::SlidingLog, rate)
    }

    /// The policy's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn shared_name(&self) -> &Arc<str> {
        &self.name
    }

    /// The algorithm.
    #[must_use]
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The rate.
    #[must_use]
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// How many requests (cost units) may go at once: the burst for GCRA and the token
    /// bucket, the count for window algorithms. A single request costing more than this is
    /// refused with [`RateLimitError::CostTooLarge`](crate::RateLimitError::CostTooLarge).
    #[must_use]
    pub fn limit(&self) -> u32 {
        self.rate.capacity()
    }

    /// The time in which [`limit`](Self::limit) requests become available again from empty:
    /// the period for window algorithms, burst × emission interval for GCRA and the token
    /// bucket. This is the `w` of the `RateLimit-Policy` HTTP field.
    #[must_use]
    pub fn window(&self) -> Duration {
        if self.algorithm.has_burst() {
            self.rate.emission_interval() * self.rate.capacity()
        } else {
            self.rate.period()
        }
    }

    /// The policy as the stores see it.
    pub(crate) fn params(&self) -> PolicyParams {
        let (unit, count) = if self.algorithm.has_burst() {
            (self.rate.interval_us(), self.rate.capacity())
        } else {
            (self.rate.period_us(), self.rate.count())
        };
        PolicyParams {
            kind: match self.algorithm {
                Algorithm::Gcra => Kind::Gcra,
                Algorithm::TokenBucket => Kind::TokenBucket,
                Algorithm::FixedWindow => Kind::FixedWindow,
                Algorithm::SlidingWindow => Kind::SlidingWindow,
                Algorithm::SlidingLog => Kind::SlidingLog,
            },
            // Both fit: the unit is at most MAX_PERIOD in µs (< 2^45), the count a u32.
            unit_us: i64::try_from(unit).unwrap_or(i64::MAX),
            count: i64::from(count),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        let rate = Rate::per_second(1).expect("valid");
        assert!(Policy::gcra("api.v1_read-x", rate).is_ok());
        for bad in ["", "a b", "a:b", "{x}", "é", &"x".repeat(65)] {
            assert!(
                matches!(Policy::gcra(bad, rate), Err(InvalidPolicy::Name { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn windows_refuse_a_burst_and_logs_are_capped() {
        let rate = Rate::per_second(10).expect("valid");
        assert!(Policy::sliding_window("w", rate.burst(10).expect("valid")).is_ok());
        assert!(matches!(
            Policy::sliding_window("w", rate.burst(11).expect("valid")),
            Err(InvalidPolicy::BurstNotSupported { .. })
        ));
        assert!(Policy::sliding_log("l", Rate::per_second(10_000).expect("valid")).is_ok());
        assert!(matches!(
            Policy::sliding_log("l", Rate::per_second(10_001).expect("valid")),
            Err(InvalidPolicy::LogTooLarge { .. })
        ));
    }

    #[test]
    fn window_is_the_time_to_refill_the_limit() {
        let p = Policy::gcra(
            "g",
            Rate::per_second(100)
                .and_then(|r| r.burst(20))
                .expect("valid"),
        )
        .expect("valid");
        assert_eq!(p.window(), Duration::from_millis(200));
        let w = Policy::fixed_window("w", Rate::per_minute(10).expect("valid")).expect("valid");
        assert_eq!(w.window(), Duration::from_secs(60));
    }
}
