//! Rate text: `"100/s burst 20"`, `"1000/h"`, `"10 per 2s"`, and the checks every rate passes.
//!
//! ```text
//! rate   = count ("/" | "per") [count] unit ["burst" count]
//! unit   = "ms" | "s" | "min" | "h" | "d"   (and their long names; "us", "ns" for exactness)
//! count  = digits, "_" may separate them ("10_000")
//! ```
//!
//! Keywords and units ignore case; spaces between the parts are optional.

use std::fmt;
use std::ops::Range;
use std::time::Duration;

use crate::bounds::{MAX_PERIOD, MAX_REFILL, MIN_PERIOD};
use crate::problem::{ParseError, Problem, Refusal};

/// A checked rate: `count` per `period`, `burst` at once (the count when no burst is written).
/// Plain data; distlock's `Rate` is built from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateText {
    /// Requests per period.
    pub count: u32,
    /// The period.
    pub period: Duration,
    /// How many may go at once.
    pub burst: u32,
}

/// The checks of a rate of `count` per `period` (with a burst of `count`): a count of at least
/// 1, a period within [`MIN_PERIOD`]`..=`[`MAX_PERIOD`], at most one request per microsecond,
/// and a refill within [`MAX_REFILL`].
///
/// # Errors
/// The first [`Refusal`] in that order.
pub fn check_rate(count: u32, period: Duration) -> Result<(), Refusal> {
    if count == 0 {
        return Err(Refusal::ZeroCount);
    }
    if !(MIN_PERIOD..=MAX_PERIOD).contains(&period) {
        return Err(Refusal::Period { period });
    }
    if u128::from(count) > period.as_micros() {
        return Err(Refusal::TooFast { count, period });
    }
    check_refill(count, period, count)
}

/// The checks of a burst for a rate that passed [`check_rate`]: at least 1, and refilled
/// within [`MAX_REFILL`].
///
/// # Errors
/// [`Refusal::ZeroBurst`] or [`Refusal::BurstTooLong`].
pub fn check_burst(count: u32, period: Duration, burst: u32) -> Result<(), Refusal> {
    if burst == 0 {
        return Err(Refusal::ZeroBurst);
    }
    check_refill(count, period, burst)
}

/// The emission interval of `count` per `period` in whole microseconds, rounded up (so the
/// long-run rate never exceeds the one written).
#[must_use]
pub fn interval_us(count: u32, period: Duration) -> u64 {
    // At most MAX_PERIOD in µs for a checked rate, which fits easily.
    let period_us = u64::try_from(period.as_micros()).unwrap_or(u64::MAX);
    period_us.div_ceil(u64::from(count.max(1)))
}

fn check_refill(count: u32, period: Duration, burst: u32) -> Result<(), Refusal> {
    let refill = u128::from(burst) * u128::from(interval_us(count, period));
    if refill > MAX_REFILL.as_micros() {
        return Err(Refusal::BurstTooLong { burst });
    }
    Ok(())
}

/// Parses and checks a rate (see the [module docs](self) for the grammar).
///
/// ```
/// use std::time::Duration;
/// use distlock_grammar::{Problem, parse_rate};
///
/// let rate = parse_rate("100/s burst 20").unwrap();
/// assert_eq!((rate.count, rate.period, rate.burst), (100, Duration::from_secs(1), 20));
///
/// let err = parse_rate("100/x").unwrap_err();
/// assert_eq!(err.problem, Problem::Unit("x".to_owned()));
/// assert_eq!(err.span, 4..5);
/// ```
///
/// # Errors
/// A [`ParseError`]: the [`Problem`] and its byte offsets in `text`.
pub fn parse_rate(text: &str) -> Result<RateText, ParseError> {
    let tokens = tokenize(text)?;
    let mut tokens = tokens.iter().copied().peekable();
    let end = text.trim_end().len();
    let missing = |problem| ParseError::new(problem, end..end);
    let found = |problem: fn(String) -> Problem, t: Token<'_>| {
        ParseError::new(problem(t.text.to_owned()), t.span())
    };
    let (count, start) = match tokens.next() {
        None => return Err(ParseError::new(Problem::Empty, 0..text.len())),
        Some(t) if t.kind == Kind::Number => (number(t)?, t.at),
        Some(t) => return Err(found(Problem::ExpectedCount, t)),
    };
    match tokens.next() {
        Some(t) if t.kind == Kind::Slash || t.is_word("per") => {}
        None => return Err(missing(Problem::NoPeriod)),
        Some(t) => return Err(found(Problem::ExpectedPer, t)),
    }
    let multiple = match tokens.next_if(|t| t.kind == Kind::Number) {
        Some(t) => number(t)?,
        None => 1,
    };
    let period = match tokens.next() {
        // At most u32::MAX days: far from overflowing a Duration.
        Some(t) if t.kind == Kind::Word => unit(t)? * multiple,
        None => return Err(missing(Problem::NoUnit)),
        Some(t) => return Err(found(Problem::Unit, t)),
    };
    let refused = |refusal, span| ParseError::new(Problem::Refused(refusal), span);
    check_rate(count, period).map_err(|r| refused(r, start..end))?;
    let mut burst = count;
    if tokens.next_if(|t| t.is_word("burst")).is_some() {
        let t = match tokens.next() {
            Some(t) if t.kind == Kind::Number => t,
            None => return Err(missing(Problem::NoBurst)),
            Some(t) => return Err(found(Problem::ExpectedBurst, t)),
        };
        burst = number(t)?;
        check_burst(count, period, burst).map_err(|r| refused(r, t.span()))?;
    }
    match tokens.next() {
        None => Ok(RateText {
            count,
            period,
            burst,
        }),
        Some(t) => Err(ParseError::new(
            Problem::Trailing(text[t.at..end].to_owned()),
            t.at..end,
        )),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Digits, perhaps with `_` between them.
    Number,
    /// Letters: a unit or a keyword.
    Word,
    /// `/`.
    Slash,
}

/// One piece of a rate's text.
#[derive(Debug, Clone, Copy)]
struct Token<'a> {
    kind: Kind,
    text: &'a str,
    /// Byte offset of `text` in the whole text.
    at: usize,
}

impl Token<'_> {
    fn is_word(self, keyword: &str) -> bool {
        self.kind == Kind::Word && self.text.eq_ignore_ascii_case(keyword)
    }

    fn span(self) -> Range<usize> {
        self.at..self.at + self.text.len()
    }
}

fn tokenize(text: &str) -> Result<Vec<Token<'_>>, ParseError> {
    let mut tokens = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let kind = if c.is_whitespace() {
            continue;
        } else if c.is_ascii_digit() {
            Kind::Number
        } else if c.is_alphabetic() {
            Kind::Word
        } else if c == '/' {
            Kind::Slash
        } else {
            return Err(ParseError::new(
                Problem::Character(c),
                at..at + c.len_utf8(),
            ));
        };
        let mut end = at + c.len_utf8();
        if kind != Kind::Slash {
            let continues = |c: char| match kind {
                Kind::Number => c.is_ascii_digit() || c == '_',
                _ => c.is_alphabetic(),
            };
            while let Some((i, next)) = chars.next_if(|&(_, next)| continues(next)) {
                end = i + next.len_utf8();
            }
        }
        tokens.push(Token {
            kind,
            text: &text[at..end],
            at,
        });
    }
    Ok(tokens)
}

/// A count: digits with optional single `_` between them, up to `u32::MAX`. Zero is left to
/// the checks, which say which part may not be zero.
fn number(t: Token<'_>) -> Result<u32, ParseError> {
    let digits = t.text;
    if digits.ends_with('_') || digits.contains("__") {
        return Err(ParseError::new(
            Problem::Number(digits.to_owned()),
            t.span(),
        ));
    }
    digits
        .replace('_', "")
        .parse()
        .map_err(|_| ParseError::new(Problem::Number(digits.to_owned()), t.span()))
}

/// Units of rate text: accepted spellings (lowercase) and their length. The first spelling is
/// the one a period prints with ([`PeriodText`]).
const UNITS: &[(&[&str], Duration)] = &[
    (&["d", "day", "days"], Duration::from_secs(24 * 3600)),
    (
        &["h", "hr", "hrs", "hour", "hours"],
        Duration::from_secs(3600),
    ),
    (
        &["min", "m", "mins", "minute", "minutes"],
        Duration::from_secs(60),
    ),
    (
        &["s", "sec", "secs", "second", "seconds"],
        Duration::from_secs(1),
    ),
    (
        &["ms", "msec", "millisecond", "milliseconds"],
        Duration::from_millis(1),
    ),
    (
        &["us", "\u{b5}s", "\u{3bc}s", "microsecond", "microseconds"],
        Duration::from_micros(1),
    ),
    (
        &["ns", "nanosecond", "nanoseconds"],
        Duration::from_nanos(1),
    ),
];

fn unit(t: Token<'_>) -> Result<Duration, ParseError> {
    let lower = t.text.to_lowercase();
    UNITS
        .iter()
        .find(|(spellings, _)| spellings.contains(&lower.as_str()))
        .map(|&(_, unit)| unit)
        .ok_or_else(|| ParseError::new(Problem::Unit(t.text.to_owned()), t.span()))
}

/// A period as rate text writes it: a whole number of the largest unit that divides it, and
/// that unit (`1min`, `90s`, `1d`; exact down to `ns`). [`parts`](Self::parts) gives the two
/// apart, for `100/s` (a count of one unit is written without its number).
///
/// ```
/// use std::time::Duration;
/// use distlock_grammar::PeriodText;
///
/// assert_eq!(PeriodText(Duration::from_secs(90 * 60)).to_string(), "90min");
/// assert_eq!(PeriodText(Duration::from_secs(1)).parts(), (1, "s"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeriodText(pub Duration);

impl PeriodText {
    /// How many of which unit.
    #[must_use]
    pub fn parts(self) -> (u128, &'static str) {
        let nanos = self.0.as_nanos();
        let (spellings, unit) = UNITS
            .iter()
            .find(|(_, unit)| nanos.is_multiple_of(unit.as_nanos()))
            .unwrap_or(&UNITS[UNITS.len() - 1]);
        (nanos / unit.as_nanos(), spellings[0])
    }
}

impl fmt::Display for PeriodText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (n, name) = self.parts();
        write!(f, "{n}{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> RateText {
        parse_rate(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    fn err(text: &str) -> (Problem, Range<usize>) {
        let e = parse_rate(text).expect_err(text);
        assert_eq!(e.rate, None);
        (e.problem, e.span)
    }

    fn rate(count: u32, period: Duration, burst: u32) -> RateText {
        RateText {
            count,
            period,
            burst,
        }
    }

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn the_valid_forms() {
        assert_eq!(ok("100/s burst 20"), rate(100, SEC, 20));
        assert_eq!(ok("1000/h"), rate(1000, 3600 * SEC, 1000));
        assert_eq!(ok("10 per 2s"), rate(10, 2 * SEC, 10));
        for text in [
            "10/2s",
            "10 / 2 s",
            "10per2s",
            "10 PER 2 Seconds",
            "10 per 2 sec",
        ] {
            assert_eq!(ok(text), rate(10, 2 * SEC, 10), "{text:?}");
        }
        assert_eq!(ok("10_000/d"), rate(10_000, 86_400 * SEC, 10_000));
        assert_eq!(ok("3/m"), rate(3, 60 * SEC, 3));
        assert_eq!(ok("1 per 1500\u{b5}s").period, Duration::from_micros(1500));
        assert_eq!(ok("1 per 1500\u{3bc}s").period, Duration::from_micros(1500));
        assert_eq!(ok("1 per 1000000ns").period, Duration::from_millis(1));
        assert_eq!(ok("  2/s  Burst  1 "), rate(2, SEC, 1));
    }

    #[test]
    fn each_problem_with_its_offset() {
        let cases: [(&str, Problem, Range<usize>); 14] = [
            ("", Problem::Empty, 0..0),
            ("  ", Problem::Empty, 0..2),
            ("s/100", Problem::ExpectedCount("s".into()), 0..1),
            ("100", Problem::NoPeriod, 3..3),
            ("100 every s", Problem::ExpectedPer("every".into()), 4..9),
            ("100/", Problem::NoUnit, 4..4),
            ("100/2 ", Problem::NoUnit, 5..5),
            ("100/x", Problem::Unit("x".into()), 4..5),
            ("100/s burst", Problem::NoBurst, 11..11),
            ("100/s burst x", Problem::ExpectedBurst("x".into()), 12..13),
            (
                "100/s burst 2 x y ",
                Problem::Trailing("x y".into()),
                14..17,
            ),
            ("100/s, burst 20", Problem::Character(','), 5..6),
            ("4294967296/s", Problem::Number("4294967296".into()), 0..10),
            ("1/s burst 1__0", Problem::Number("1__0".into()), 10..14),
        ];
        for (text, problem, span) in cases {
            assert_eq!(err(text), (problem, span), "{text:?}");
        }
        assert_eq!(err("10_/s").0, Problem::Number("10_".into()));
        assert_eq!(err("100/s/s").0, Problem::Trailing("/s".into()));
    }

    #[test]
    fn refusals_and_the_boundaries() {
        let refused = |text: &str| match err(text) {
            (Problem::Refused(r), span) => (r, span),
            other => panic!("{text:?}: {other:?}"),
        };
        assert_eq!(refused(" 0/s"), (Refusal::ZeroCount, 1..4));
        assert_eq!(refused("5/s burst 0"), (Refusal::ZeroBurst, 10..11));
        // The period: 1 ms to 366 days, inclusive.
        assert_eq!(ok("1/ms").period, MIN_PERIOD);
        assert_eq!(ok("1 per 366d").period, MAX_PERIOD);
        assert!(matches!(refused("1 per 999us").0, Refusal::Period { .. }));
        assert!(matches!(refused("1 per 367d").0, Refusal::Period { .. }));
        assert!(matches!(refused("1 per 0s").0, Refusal::Period { .. }));
        assert!(matches!(
            refused("1 per 4294967295d").0,
            Refusal::Period { .. }
        ));
        // One per microsecond at most.
        assert_eq!(ok("1000/ms").count, 1000);
        assert_eq!(
            refused("1001/ms").0,
            Refusal::TooFast {
                count: 1001,
                period: MIN_PERIOD
            }
        );
        // A burst refills within two maximum periods.
        assert_eq!(ok("1/d burst 732").burst, 732);
        assert_eq!(
            refused("1/d burst 733").0,
            Refusal::BurstTooLong { burst: 733 }
        );
        assert_eq!(ok("4294967295/d burst 4294967295").burst, u32::MAX);
        assert_eq!(check_rate(u32::MAX, MAX_PERIOD), Ok(()));
    }

    #[test]
    fn periods_print_in_the_largest_unit() {
        for (period, text) in [
            (SEC, "1s"),
            (90 * 60 * SEC, "90min"),
            (48 * 3600 * SEC, "2d"),
            (Duration::from_millis(1500), "1500ms"),
            (Duration::from_nanos(1_000_001), "1000001ns"),
        ] {
            assert_eq!(PeriodText(period).to_string(), text);
            assert_eq!(ok(&format!("1 per {text}")).period, period);
        }
    }
}
