//! [`Rate`]: how many requests per period, and how many may go at once.

use std::time::Duration;

use crate::error::InvalidPolicy;

/// The shortest period a [`Rate`] accepts.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);
/// The longest period a [`Rate`] accepts (366 days). Longer quotas belong in a database.
pub const MAX_PERIOD: Duration = Duration::from_secs(366 * 24 * 3600);
/// The longest a burst may take to refill (twice [`MAX_PERIOD`]). State lives at most this
/// long in the store, and every timestamp stays an exact integer in Redis' Lua numbers.
const MAX_REFILL: Duration = Duration::from_secs(2 * 366 * 24 * 3600);

/// A rate: `count` requests per `period`, of which up to `burst` may go at once.
///
/// * `count / period` is the long-run rate. GCRA and the token bucket spread it evenly: one
///   request every `period / count` (the *emission interval*, rounded **up** to a whole
///   microsecond, so the long-run rate never exceeds the one written).
/// * `burst` is the capacity: how many requests may go back to back after a quiet spell.
///   It defaults to `count`, so `Rate::per_second(100)?` lets 100 through at once and then
///   one every 10 ms. Window algorithms allow exactly `count` per window and take no
///   separate burst.
///
/// Every constructor validates, so a rate that exists is usable: zero counts or bursts,
/// periods outside [`MIN_PERIOD`]`..=`[`MAX_PERIOD`], more than one request per microsecond,
/// and bursts that take more than two maximum periods to refill are refused with an
/// [`InvalidPolicy`] that says which.
///
/// ```
/// use std::time::Duration;
/// use distlock::ratelimit::Rate;
///
/// # fn main() -> Result<(), distlock::InvalidPolicy> {
/// let api = Rate::per_second(100)?.burst(20)?; // 100/s on average, at most 20 at once
/// assert_eq!(api.emission_interval(), Duration::from_millis(10));
/// assert_eq!(api.capacity(), 20);
///
/// let uploads = Rate::per(5, Duration::from_secs(10))?; // 5 per 10 s, all 5 at once
/// assert_eq!(uploads.capacity(), 5);
///
/// assert!(Rate::per_second(0).is_err());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    count: u32,
    period: Duration,
    burst: u32,
}

impl Rate {
    /// `count` per second, burst `count`.
    pub fn per_second(count: u32) -> Result<Self, InvalidPolicy> {
        Self::per(count, Duration::from_secs(1))
    }

    /// `count` per minute, burst `count`.
    pub fn per_minute(count: u32) -> Result<Self, InvalidPolicy> {
        Self::per(count, Duration::from_secs(60))
    }

    /// `count` per hour, burst `count`.
    pub fn per_hour(count: u32) -> Result<Self, InvalidPolicy> {
        Self::per(count, Duration::from_secs(3600))
    }

    /// `count` per day, burst `count`.
    pub fn per_day(count: u32) -> Result<Self, InvalidPolicy> {
        Self::per(count, Duration::from_secs(24 * 3600))
    }

    /// `count` per `period`, burst `count`.
    pub fn per(count: u32, period: Duration) -> Result<Self, InvalidPolicy> {
        if count == 0 {
            return Err(InvalidPolicy::Zero { what: "count" });
        }
        if !(MIN_PERIOD..=MAX_PERIOD).contains(&period) {
            return Err(InvalidPolicy::Period {
                period,
                min: MIN_PERIOD,
                max: MAX_PERIOD,
            });
        }
        if u128::from(count) > period.as_micros() {
            return Err(InvalidPolicy::TooFast { count, period });
        }
        Self {
            count,
            period,
            burst: count,
        }
        .checked()
    }

    /// Sets the burst: how many requests may go at once (the bucket's capacity). At least 1.
    pub fn burst(self, burst: u32) -> Result<Self, InvalidPolicy> {
        if burst == 0 {
            return Err(InvalidPolicy::Zero { what: "burst" });
        }
        Self { burst, ..self }.checked()
    }

    fn checked(self) -> Result<Self, InvalidPolicy> {
        let refill = u128::from(self.burst) * u128::from(self.interval_us());
        if refill > MAX_REFILL.as_micros() {
            return Err(InvalidPolicy::BurstTooLong {
                burst: self.burst,
                max: MAX_REFILL,
            });
        }
        Ok(self)
    }

    /// Requests per period.
    #[must_use]
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The period.
    #[must_use]
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The burst: how many may go at once.
    #[must_use]
    pub fn capacity(&self) -> u32 {
        self.burst
    }

    /// The spacing of requests at the long-run rate: `period / count`, rounded up to a whole
    /// microsecond.
    #[must_use]
    pub fn emission_interval(&self) -> Duration {
        Duration::from_micros(self.interval_us())
    }

    pub(crate) fn period_us(&self) -> u64 {
        // At most MAX_PERIOD in µs, which fits easily.
        u64::try_from(self.period.as_micros()).unwrap_or(u64::MAX)
    }

    pub(crate) fn interval_us(&self) -> u64 {
        self.period_us().div_ceil(u64::from(self.count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_burst_to_count_and_rounds_the_interval_up() {
        let r = Rate::per(3, Duration::from_secs(1)).expect("valid");
        assert_eq!(r.capacity(), 3);
        assert_eq!(r.interval_us(), 333_334);
        assert_eq!(
            Rate::per_minute(60).expect("valid").interval_us(),
            1_000_000
        );
    }

    #[test]
    fn refuses_what_cannot_work() {
        assert_eq!(
            Rate::per_second(0),
            Err(InvalidPolicy::Zero { what: "count" })
        );
        assert_eq!(
            Rate::per_second(5).and_then(|r| r.burst(0)),
            Err(InvalidPolicy::Zero { what: "burst" })
        );
        assert!(matches!(
            Rate::per(1, Duration::from_micros(999)),
            Err(InvalidPolicy::Period { .. })
        ));
        assert!(matches!(
            Rate::per(1, MAX_PERIOD + Duration::from_secs(1)),
            Err(InvalidPolicy::Period { .. })
        ));
        assert!(matches!(
            Rate::per(1001, Duration::from_millis(1)),
            Err(InvalidPolicy::TooFast { .. })
        ));
        assert!(Rate::per(1000, Duration::from_millis(1)).is_ok());
        assert!(matches!(
            Rate::per_day(1).and_then(|r| r.burst(1000)),
            Err(InvalidPolicy::BurstTooLong { .. })
        ));
        assert!(Rate::per(u32::MAX, MAX_PERIOD).is_ok());
    }
}
