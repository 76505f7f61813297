//! [`Rate`]: how many requests per period, and how many may go at once, and its text form
//! (`"100/s burst 20"`) for configuration files.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub use distlock_grammar::{MAX_PERIOD, MIN_PERIOD};
use distlock_grammar::{PeriodText, Problem, RateText, Refusal};

use super::Algorithm;
use crate::error::InvalidPolicy;

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
///
/// # Text form
///
/// A rate also parses from text ([`FromStr`]) and prints as text ([`Display`](fmt::Display)),
/// for limits that come from configuration:
///
/// ```text
/// rate   = count ("/" | "per") period ["burst" count]
/// period = [count] unit                  such as "s", "2s", "10 min", "500ms"
/// unit   = "ms" | "s" | "min" | "h" | "d"
/// count  = a whole number, "_" may separate its digits ("10_000")
/// ```
///
/// Units also take their long names (`sec`, `second(s)`, `m`, `minute(s)`, `hr`, `hour(s)`,
/// `day(s)`, ...), and `us` and `ns` exist so that every period prints exactly; keywords and
/// units ignore case, and spaces between the parts are optional. A rate prints in one
/// canonical form that parses back to it (`"100/s burst 20"`, `"10 per 2s"`). Text that is not a rate is refused with a [`ParseRateError`] that says what
/// was wrong and what was expected; a well-formed rate that cannot work (`"0/s"`) with the
/// [`InvalidPolicy`] its constructor would give. With the `serde` feature a rate serialises
/// as this text.
///
/// ```
/// use std::time::Duration;
/// use distlock::ratelimit::Rate;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// assert_eq!("100/s burst 20".parse::<Rate>()?, Rate::per_second(100)?.burst(20)?);
/// assert_eq!("1000/h".parse::<Rate>()?, Rate::per_hour(1000)?);
/// assert_eq!("5/min".parse::<Rate>()?, Rate::per_minute(5)?);
/// assert_eq!("10 per 2s".parse::<Rate>()?, Rate::per(10, Duration::from_secs(2))?);
/// assert_eq!(Rate::per(10, Duration::from_secs(2))?.to_string(), "10 per 2s");
///
/// let err = "100/x".parse::<Rate>().unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "invalid rate \"100/x\": unknown unit `x`; use ms, s, min, h or d"
/// );
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
        distlock_grammar::check_rate(count, period).map_err(refused)?;
        Ok(Self {
            count,
            period,
            burst: count,
        })
    }

    /// Sets the burst: how many requests may go at once (the bucket's capacity). At least 1.
    pub fn burst(self, burst: u32) -> Result<Self, InvalidPolicy> {
        distlock_grammar::check_burst(self.count, self.period, burst).map_err(refused)?;
        Ok(Self { burst, ..self })
    }

    /// The rate the grammar parsed (and checked as [`per`](Self::per) and
    /// [`burst`](Self::burst) check).
    pub(crate) fn from_text(rate: RateText) -> Self {
        Self {
            count: rate.count,
            period: rate.period,
            burst: rate.burst,
        }
    }

    /// The rate as the grammar's plain data, for its policy checks.
    pub(crate) fn text(self) -> RateText {
        RateText {
            count: self.count,
            period: self.period,
            burst: self.burst,
        }
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
        distlock_grammar::interval_us(self.count, self.period)
    }
}

/// The constructors' refusal as the error they return: the one place a [`Refusal`] of the
/// grammar becomes an [`InvalidPolicy`].
pub(crate) fn refused(refusal: Refusal) -> InvalidPolicy {
    match refusal {
        Refusal::ZeroCount => InvalidPolicy::Zero { what: "count" },
        Refusal::ZeroBurst => InvalidPolicy::Zero { what: "burst" },
        Refusal::Period { period } => InvalidPolicy::Period {
            period,
            min: MIN_PERIOD,
            max: MAX_PERIOD,
        },
        Refusal::TooFast { count, period } => InvalidPolicy::TooFast { count, period },
        Refusal::BurstTooLong { burst } => InvalidPolicy::BurstTooLong {
            burst,
            max: distlock_grammar::MAX_REFILL,
        },
        Refusal::Name { name } => InvalidPolicy::Name { name },
        Refusal::BurstNotSupported {
            name,
            algorithm,
            burst,
            count,
        } => InvalidPolicy::BurstNotSupported {
            policy: name,
            algorithm: Algorithm::from(algorithm).name(),
            burst,
            count,
        },
        Refusal::LogTooLarge { name, count } => InvalidPolicy::LogTooLarge {
            policy: name,
            limit: count,
            max: super::MAX_LOG_LIMIT,
        },
    }
}

/// Writes a duration as a rate writes its period: `1min`, `90s`, `1d` (exact: down to `ns`).
pub(crate) fn write_span(f: &mut fmt::Formatter<'_>, span: Duration) -> fmt::Result {
    fmt::Display::fmt(&PeriodText(span), f)
}

impl fmt::Display for Rate {
    /// `count/unit`, `count per Nunit`, then ` burst b` when the burst differs from the count:
    /// text that [`FromStr`] parses back to an equal rate.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match PeriodText(self.period).parts() {
            (1, name) => write!(f, "{}/{name}", self.count)?,
            (n, name) => write!(f, "{} per {n}{name}", self.count)?,
        }
        if self.burst != self.count {
            write!(f, " burst {}", self.burst)?;
        }
        Ok(())
    }
}

impl FromStr for Rate {
    type Err = ParseRateError;

    /// Parses the [text form](Rate#text-form): `"100/s burst 20"`, `"1000/h"`, `"10 per 2s"`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_rate(text).map_err(|problem| ParseRateError {
            input: text.to_owned(),
            problem,
        })
    }
}

/// Parses a whole rate (the grammar's); the error says what is wrong without repeating the
/// text.
pub(crate) fn parse_rate(text: &str) -> Result<Rate, RateProblem> {
    distlock_grammar::parse_rate(text)
        .map(Rate::from_text)
        .map_err(|err| RateProblem::from(err.problem))
}

/// Why a text is not a [`Rate`]: what was wrong, and what the [text form](Rate#text-form)
/// expects there.
///
/// A text that is well formed but names a rate that cannot work (`"0/s"`, `"1 per 400d"`)
/// carries the [`InvalidPolicy`] the constructors give; [`invalid_policy`](Self::invalid_policy)
/// returns it. The message includes it, so [`source`](std::error::Error::source) is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseRateError {
    input: String,
    problem: RateProblem,
}

impl ParseRateError {
    /// The text that was parsed.
    #[must_use]
    pub fn input(&self) -> &str {
        &self.input
    }

    /// The constructor's refusal, when the text was well formed but the rate is invalid.
    #[must_use]
    pub fn invalid_policy(&self) -> Option<&InvalidPolicy> {
        match &self.problem {
            RateProblem::Invalid(invalid) => Some(invalid),
            _ => None,
        }
    }
}

impl fmt::Display for ParseRateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.problem {
            RateProblem::Invalid(invalid) => write!(f, "{invalid} (from {:?})", self.input),
            problem => write!(f, "invalid rate {:?}: {problem}", self.input),
        }
    }
}

impl std::error::Error for ParseRateError {}

/// What is wrong with a rate's text; shared with the policy parser, which adds its own
/// context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RateProblem {
    /// Not a rate: the grammar's problem, which says what was expected.
    Text(Problem),
    /// Well formed, but refused as the constructors refuse it.
    Invalid(InvalidPolicy),
}

impl From<Problem> for RateProblem {
    fn from(problem: Problem) -> Self {
        match problem {
            Problem::Refused(refusal) => Self::Invalid(refused(refusal)),
            problem => Self::Text(problem),
        }
    }
}

impl fmt::Display for RateProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Text(problem) => problem.fmt(f),
            Self::Invalid(invalid) => invalid.fmt(f),
        }
    }
}

#[cfg(feature = "serde")]
mod serde_impl {
    //! A rate (de)serialises as its text form, in every format.

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Rate;
    use crate::ratelimit::text::deserialize_parsed;

    impl Serialize for Rate {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_str(self)
        }
    }

    impl<'de> Deserialize<'de> for Rate {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserialize_parsed(
                deserializer,
                "a rate as text, such as \"100/s burst 20\" or \"10 per 2s\"",
            )
        }
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

    fn parse(text: &str) -> Rate {
        text.parse()
            .unwrap_or_else(|e| panic!("{text:?} should parse: {e}"))
    }

    fn parse_err(text: &str) -> String {
        match text.parse::<Rate>() {
            Ok(rate) => panic!("{text:?} should not parse, got {rate:?}"),
            Err(e) => {
                assert_eq!(e.input(), text);
                e.to_string()
            }
        }
    }

    #[test]
    fn parses_the_documented_forms() {
        let per = |count, period| Rate::per(count, period).expect("valid");
        let secs = Duration::from_secs;
        assert_eq!(
            parse("100/s burst 20"),
            per(100, secs(1)).burst(20).expect("valid")
        );
        assert_eq!(parse("1000/h"), per(1000, secs(3600)));
        assert_eq!(parse("5/min"), per(5, secs(60)));
        assert_eq!(parse("10 per 2s"), per(10, secs(2)));
        // Spacing, case, long unit names: the grammar's (`distlock_grammar::parse_rate`),
        // whose tests go through every spelling; one of them here.
        assert_eq!(parse("10 PER 2 Seconds"), per(10, secs(2)));
        assert_eq!(parse("10_000/d"), per(10_000, secs(24 * 3600)));
        assert_eq!(parse("3/m"), per(3, secs(60)));
        assert_eq!(parse("3 per 1 minute"), per(3, secs(60)));
        assert_eq!(parse("7/hours"), per(7, secs(3600)));
        assert_eq!(parse("1 per 500ms"), per(1, Duration::from_millis(500)));
        assert_eq!(parse("1 per 1500us"), per(1, Duration::from_micros(1500)));
        assert_eq!(
            parse("1 per 1500\u{b5}s"),
            per(1, Duration::from_micros(1500))
        );
        assert_eq!(
            parse("  2/s  Burst  1 "),
            per(2, secs(1)).burst(1).expect("valid")
        );
    }

    #[test]
    fn prints_text_that_parses_back() {
        let rates = [
            Rate::per_second(100).and_then(|r| r.burst(20)),
            Rate::per_hour(1000),
            Rate::per(10, Duration::from_secs(2)),
            Rate::per(1, Duration::from_millis(1500)),
            Rate::per(1, Duration::from_nanos(1_000_001)),
            Rate::per(7, Duration::from_secs(90 * 60)),
            Rate::per(u32::MAX, MAX_PERIOD),
            Rate::per_day(1).and_then(|r| r.burst(2)),
        ];
        for rate in rates {
            let rate = rate.expect("valid");
            let text = rate.to_string();
            assert_eq!(parse(&text), rate, "{text:?}");
        }
        let text = |rate: Result<Rate, InvalidPolicy>| rate.expect("valid").to_string();
        assert_eq!(
            text(Rate::per_second(100).and_then(|r| r.burst(20))),
            "100/s burst 20"
        );
        assert_eq!(text(Rate::per_minute(5)), "5/min");
        assert_eq!(text(Rate::per(10, Duration::from_secs(2))), "10 per 2s");
        assert_eq!(
            text(Rate::per(7, Duration::from_secs(90 * 60))),
            "7 per 90min"
        );
        assert_eq!(
            text(Rate::per(1, Duration::from_millis(1500))),
            "1 per 1500ms"
        );
        assert_eq!(
            text(Rate::per(4, Duration::from_secs(48 * 3600))),
            "4 per 2d"
        );
    }

    #[test]
    fn says_what_is_wrong() {
        let cases = [
            (
                "",
                "invalid rate \"\": it is empty; write `<count>/<period> [burst <n>]`",
            ),
            ("  ", "it is empty"),
            ("s/100", "it starts with `s` instead of a count"),
            (
                "100",
                "no period; write `<count>/<period>` or `<count> per <period>`",
            ),
            (
                "100 every s",
                "expected `/` or `per` after the count, found `every`",
            ),
            ("100/", "the period has no unit; use ms, s, min, h or d"),
            ("100/2", "the period has no unit"),
            (
                "100/x",
                "invalid rate \"100/x\": unknown unit `x`; use ms, s, min, h or d",
            ),
            ("100/s/s", "unexpected `/s` after the period"),
            ("100/s burst", "`burst` needs a number after it"),
            (
                "100/s burst x",
                "expected the burst's number after `burst`, found `x`",
            ),
            (
                "100/s 20",
                "unexpected `20` after the period; only `burst <n>` may follow",
            ),
            ("100/s burst 2 x y", "unexpected `x y` after the period"),
            ("100/s, burst 20", "unexpected ','"),
            ("1.5/s", "unexpected '.'"),
            ("-1/s", "unexpected '-'"),
            (
                "4294967296/s",
                "`4294967296` is not a whole number from 0 to 4294967295",
            ),
            ("1__0/s", "`1__0` is not a whole number"),
            ("10_/s", "`10_` is not a whole number"),
        ];
        for (text, expected) in cases {
            let message = parse_err(text);
            assert!(message.contains(expected), "{text:?}: {message}");
        }
    }

    #[test]
    fn refuses_well_formed_rates_that_cannot_work() {
        let invalid = |text: &str| {
            let err = text.parse::<Rate>().expect_err(text);
            (err.invalid_policy().cloned(), err.to_string())
        };
        let (kind, message) = invalid("0/s");
        assert_eq!(kind, Some(InvalidPolicy::Zero { what: "count" }));
        assert_eq!(
            message,
            "invalid rate: the count must be at least 1 (from \"0/s\")"
        );
        let (kind, _) = invalid("5/s burst 0");
        assert_eq!(kind, Some(InvalidPolicy::Zero { what: "burst" }));
        assert!(matches!(
            invalid("1 per 0s").0,
            Some(InvalidPolicy::Period { .. })
        ));
        assert!(matches!(
            invalid("1 per 367d").0,
            Some(InvalidPolicy::Period { .. })
        ));
        // The largest multiple of the largest unit does not overflow.
        assert!(matches!(
            invalid("1 per 4294967295d").0,
            Some(InvalidPolicy::Period { .. })
        ));
        assert!(matches!(
            invalid("1001/ms").0,
            Some(InvalidPolicy::TooFast { .. })
        ));
        assert!(matches!(
            invalid("1/d burst 1000").0,
            Some(InvalidPolicy::BurstTooLong { .. })
        ));
        assert_eq!(
            "100/x"
                .parse::<Rate>()
                .expect_err("bad unit")
                .invalid_policy(),
            None
        );
    }

    #[cfg(feature = "serde")]
    #[test]
    fn serialises_as_its_text() {
        let rate = Rate::per_second(100)
            .and_then(|r| r.burst(20))
            .expect("valid");
        let json = serde_json::to_string(&rate).expect("serialise");
        assert_eq!(json, "\"100/s burst 20\"");
        assert_eq!(
            serde_json::from_str::<Rate>(&json).expect("round trip"),
            rate
        );

        let message = |json: &str| {
            serde_json::from_str::<Rate>(json)
                .expect_err(json)
                .to_string()
        };
        assert!(
            message("\"100/x\"").starts_with("invalid rate \"100/x\": unknown unit `x`"),
            "{}",
            message("\"100/x\"")
        );
        assert!(message("100").starts_with(
            "invalid type: integer `100`, expected a rate as text, such as \"100/s burst 20\""
        ));
        assert!(message("\"0/s\"").contains("the count must be at least 1"));
    }
}
