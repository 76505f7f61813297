//! The bounds every front door of distlock checks (the builders, the configuration loader,
//! the tower layers and the attribute macros), defined once, with the checks that use them.

use std::fmt;
use std::time::Duration;

/// The shortest lease ttl accepted.
pub const MIN_TTL: Duration = Duration::from_millis(10);
/// The longest lease ttl accepted (a lease should be renewed, not set for ever).
pub const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// The default lease ttl.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// The largest sleep between two attempts to take a lock (`retry_backoff`).
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The shortest period a rate accepts.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);
/// The longest period a rate accepts (366 days). Longer quotas belong in a database.
pub const MAX_PERIOD: Duration = Duration::from_secs(366 * 24 * 3600);
/// The longest a burst may take to refill (twice [`MAX_PERIOD`]). State lives at most this
/// long in the store, and every timestamp stays an exact integer in Redis' Lua numbers.
pub const MAX_REFILL: Duration = Duration::from_secs(2 * 366 * 24 * 3600);
/// The most requests per window a sliding log accepts (it stores one entry per request).
pub const MAX_LOG_LIMIT: u32 = 10_000;
/// The longest policy name, in bytes.
pub const MAX_POLICY_NAME_LEN: usize = 64;
/// The most policies one rate limiter (or one `#[rate_limit]` call) combines.
pub const MAX_POLICIES: usize = 8;
/// The longest a rate-limited call may wait for its turn ([`MAX_PERIOD`]).
pub const MAX_WAIT: Duration = MAX_PERIOD;
/// The most blocks a lockout escalates through.
pub const MAX_LOCKOUT_STEPS: usize = 8;
/// The shortest block, or memory of breaches, a lockout accepts (the longest is
/// [`MAX_PERIOD`]).
pub const MIN_LOCKOUT: Duration = Duration::from_millis(1);

/// A duration outside the range a setting accepts: which value, and the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfRange {
    /// The value given.
    pub value: Duration,
    /// The shortest accepted.
    pub min: Duration,
    /// The longest accepted.
    pub max: Duration,
}

impl OutOfRange {
    /// Whether the value is below the range (else it is above it).
    #[must_use]
    pub fn is_below(&self) -> bool {
        self.value < self.min
    }
}

impl fmt::Display for OutOfRange {
    /// `{value:?} is outside {min:?}..={max:?}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is outside {:?}..={:?}",
            self.value, self.min, self.max
        )
    }
}

impl std::error::Error for OutOfRange {}

/// A lease ttl within [`MIN_TTL`]`..=`[`MAX_TTL`]: the one check of that bound, whichever
/// door the ttl came through.
///
/// ```
/// use std::time::Duration;
/// use distlock_grammar::{MAX_TTL, check_ttl};
///
/// assert!(check_ttl(Duration::from_secs(30)).is_ok());
/// let err = check_ttl(MAX_TTL + Duration::from_secs(1)).unwrap_err();
/// assert!(!err.is_below());
/// ```
///
/// # Errors
/// [`OutOfRange`] with the ttl and the range.
pub fn check_ttl(ttl: Duration) -> Result<Duration, OutOfRange> {
    if (MIN_TTL..=MAX_TTL).contains(&ttl) {
        return Ok(ttl);
    }
    Err(OutOfRange {
        value: ttl,
        min: MIN_TTL,
        max: MAX_TTL,
    })
}

/// A rate-limited call's longest wait: at most [`MAX_WAIT`], or `Duration::MAX` (as long as
/// it takes, up to [`MAX_WAIT`]). The one check of that bound, whichever door the wait came
/// through.
///
/// # Errors
/// [`OutOfRange`] with the wait and `0..=MAX_WAIT`.
pub fn check_max_wait(wait: Duration) -> Result<Duration, OutOfRange> {
    if wait <= MAX_WAIT || wait == Duration::MAX {
        return Ok(wait);
    }
    Err(OutOfRange {
        value: wait,
        min: Duration::ZERO,
        max: MAX_WAIT,
    })
}

/// A lockout's block or memory within [`MIN_LOCKOUT`]`..=`[`MAX_PERIOD`].
///
/// # Errors
/// [`OutOfRange`] with the length and the range.
pub fn check_lockout(length: Duration) -> Result<Duration, OutOfRange> {
    if (MIN_LOCKOUT..=MAX_PERIOD).contains(&length) {
        return Ok(length);
    }
    Err(OutOfRange {
        value: length,
        min: MIN_LOCKOUT,
        max: MAX_PERIOD,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: Duration = Duration::from_nanos(1);

    #[test]
    fn a_wait_is_at_most_max_wait_or_forever() {
        for wait in [Duration::ZERO, MAX_WAIT, Duration::MAX] {
            assert_eq!(check_max_wait(wait), Ok(wait));
        }
        assert!(check_max_wait(MAX_WAIT + NS).is_err());
        assert!(check_max_wait(Duration::MAX - NS).is_err());
    }

    #[test]
    fn ttl_bounds_are_inclusive() {
        assert_eq!(check_ttl(MIN_TTL), Ok(MIN_TTL));
        assert_eq!(check_ttl(MAX_TTL), Ok(MAX_TTL));
        let below = check_ttl(MIN_TTL - NS).unwrap_err();
        assert!(below.is_below());
        assert_eq!(below.value, MIN_TTL - NS);
        let above = check_ttl(MAX_TTL + NS).unwrap_err();
        assert!(!above.is_below());
        assert_eq!(
            above.to_string(),
            "604800.000000001s is outside 10ms..=604800s"
        );
        assert!(check_ttl(Duration::ZERO).is_err());
    }

    #[test]
    fn lockout_bounds_are_inclusive() {
        assert!(check_lockout(MIN_LOCKOUT).is_ok());
        assert!(check_lockout(MAX_PERIOD).is_ok());
        assert!(check_lockout(MIN_LOCKOUT - NS).is_err());
        assert!(check_lockout(MAX_PERIOD + NS).is_err());
    }

    #[test]
    fn the_bounds_keep_their_values() {
        // These are part of the public API of distlock: changing one is a breaking change.
        assert_eq!(MIN_TTL, Duration::from_millis(10));
        assert_eq!(MAX_TTL, Duration::from_secs(604_800));
        assert_eq!(DEFAULT_TTL, Duration::from_secs(30));
        assert_eq!(MAX_BACKOFF, Duration::from_secs(60));
        assert_eq!(MAX_PERIOD, Duration::from_secs(31_622_400));
        assert_eq!(MAX_REFILL, 2 * MAX_PERIOD);
        assert_eq!(MAX_WAIT, MAX_PERIOD);
        assert_eq!((MAX_LOG_LIMIT, MAX_POLICY_NAME_LEN), (10_000, 64));
        assert_eq!((MAX_POLICIES, MAX_LOCKOUT_STEPS), (8, 8));
    }
}
