//! Duration text: `"250ms"`, `"30s"`, `"1h 30min"`, `"1.5h"`.
//!
//! ```text
//! duration = "0" | span { span }
//! span     = number [ "." digits ] unit        spaces may come between and inside the parts
//! unit     = "ns" | "us" | "ms" | "s" | "min" | "h" | "d" | "w" | "M" | "y" (and long names)
//! ```
//!
//! This is the grammar distlock has always accepted for durations in configuration files,
//! layer configurations and the macros' arguments (it was humantime's), kept exactly: the same
//! texts, the same values and the same messages. Units are case sensitive (`M` is a month,
//! `m` a minute); a month is 30.44 days and a year 365.25 days. A fraction must come out as a
//! whole number of the smallest unit the span is counted in: nanoseconds up to minutes, whole
//! seconds from hours up (`"1.5h"` is fine, `"0.0001h"` is not).

use std::fmt;
use std::time::Duration;

/// Why a text is not a duration; every variant but the overflow points into the text (byte
/// offsets). The message is the one distlock's duration errors have always carried.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DurationError {
    /// A character that is neither a digit, a letter of a unit, `.` nor white space.
    InvalidCharacter {
        /// Its byte offset. (For a fraction without digits, `"1."`, the offset of the `.`.)
        at: usize,
    },
    /// Something else where a number was expected (a span must start with one).
    NumberExpected {
        /// The byte offset where the number was expected: where the white space before it
        /// starts.
        at: usize,
    },
    /// A unit that is not one of the units (or no unit at all: `unit` is empty).
    UnknownUnit {
        /// Where the unit starts (byte offset).
        start: usize,
        /// Where it ends (byte offset, exclusive).
        end: usize,
        /// The unit as written.
        unit: String,
        /// The number in front of it.
        value: u64,
    },
    /// A number too large, a fraction finer than the span's smallest unit, or a total larger
    /// than a [`Duration`] holds.
    NumberOverflow,
    /// The text is empty or only white space.
    Empty,
}

impl DurationError {
    /// The part of the text the error is about, as byte offsets (empty at the offset for a
    /// missing part; `None` for an overflow, which is about the whole).
    #[must_use]
    pub fn span(&self) -> Option<std::ops::Range<usize>> {
        match self {
            Self::InvalidCharacter { at } | Self::NumberExpected { at } => Some(*at..*at + 1),
            Self::UnknownUnit { start, end, .. } => Some(*start..*end),
            Self::NumberOverflow | Self::Empty => None,
        }
    }
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidCharacter { at } => write!(f, "invalid character at {at}"),
            Self::NumberExpected { at } => write!(f, "expected number at {at}"),
            Self::UnknownUnit { unit, value, .. } if unit.is_empty() => {
                write!(f, "time unit needed, for example {value}sec or {value}ms")
            }
            Self::UnknownUnit { unit, .. } => write!(
                f,
                "unknown time unit {unit:?}, supported units: ns, us/µs, ms, sec, min, hours, \
                 days, weeks, months, years (and few variations)"
            ),
            Self::NumberOverflow => f.write_str(
                "number is too large or cannot be represented without a lack of precision \
                 (values below 1ns are not supported)",
            ),
            Self::Empty => f.write_str("value was empty"),
        }
    }
}

impl std::error::Error for DurationError {}

/// A unit: below a second, counted in nanoseconds (`Sub(n)`: n ns each); or from a second
/// up, counted in whole seconds, with a fraction counted in nanoseconds up to minutes and in
/// whole seconds from hours up.
#[derive(Clone, Copy)]
enum Unit {
    Sub(u64),
    Secs { size: u64, fine_fraction: bool },
}

const MINUTE: u64 = 60;
const HOUR: u64 = 3600;
const DAY: u64 = 86_400;
/// 30.44 days.
const MONTH: u64 = 2_630_016;
/// 365.25 days.
const YEAR: u64 = 31_557_600;

fn unit(word: &str) -> Option<Unit> {
    let secs = |size, fine_fraction| Unit::Secs {
        size,
        fine_fraction,
    };
    Some(match word {
        "nanos" | "nsec" | "ns" => Unit::Sub(1),
        "usec" | "us" | "µs" => Unit::Sub(1_000),
        "millis" | "msec" | "ms" => Unit::Sub(1_000_000),
        "seconds" | "second" | "secs" | "sec" | "s" => secs(1, true),
        "minutes" | "minute" | "min" | "mins" | "m" => secs(MINUTE, true),
        "hours" | "hour" | "hr" | "hrs" | "h" => secs(HOUR, false),
        "days" | "day" | "d" => secs(DAY, false),
        "weeks" | "week" | "wk" | "wks" | "w" => secs(7 * DAY, false),
        "months" | "month" | "M" => secs(MONTH, false),
        "years" | "year" | "yr" | "yrs" | "y" => secs(YEAR, false),
        _ => return None,
    })
}

fn is_unit_char(c: char) -> bool {
    c.is_ascii_alphabetic() || c == 'µ'
}

/// Digits after a `.`: their value over a power of ten.
#[derive(Clone, Copy)]
struct Fraction {
    numerator: u64,
    denominator: u64,
}

/// A running total, in whole seconds and nanoseconds below one.
#[derive(Default)]
struct Total {
    secs: u64,
    nanos: u64,
}

impl Total {
    fn add(&mut self, secs: u64, nanos: u64) -> Result<(), DurationError> {
        let nanos = self
            .nanos
            .checked_add(nanos)
            .ok_or(DurationError::NumberOverflow)?;
        let secs = secs
            .checked_add(nanos / 1_000_000_000)
            .and_then(|secs| secs.checked_add(self.secs))
            .ok_or(DurationError::NumberOverflow)?;
        *self = Self {
            secs,
            nanos: nanos % 1_000_000_000,
        };
        Ok(())
    }

    /// `n` units and a fraction of one.
    fn add_span(
        &mut self,
        n: u64,
        fraction: Option<Fraction>,
        unit: Unit,
    ) -> Result<(), DurationError> {
        let overflow = || DurationError::NumberOverflow;
        match unit {
            Unit::Sub(size) => self.add(0, n.checked_mul(size).ok_or_else(overflow)?)?,
            Unit::Secs { size, .. } => self.add(n.checked_mul(size).ok_or_else(overflow)?, 0)?,
        }
        let Some(Fraction {
            numerator,
            denominator,
        }) = fraction
        else {
            return Ok(());
        };
        // The fraction in the unit's own count, which must come out whole.
        let (size, in_secs) = match unit {
            Unit::Sub(1) => return Err(overflow()),
            Unit::Sub(size) => (size, false),
            Unit::Secs {
                size,
                fine_fraction: true,
            } => (size * 1_000_000_000, false),
            Unit::Secs { size, .. } => (size, true),
        };
        let scaled = numerator.checked_mul(size).ok_or_else(overflow)?;
        if scaled % denominator != 0 {
            return Err(overflow());
        }
        let part = scaled / denominator;
        if in_secs {
            self.add(part, 0)
        } else {
            self.add(0, part)
        }
    }
}

/// Walks the text by characters, knowing their byte offsets.
struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<char> {
        self.text[self.at..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.at += c.len_utf8();
        Some(c)
    }
}

/// Parses duration text (see the [module docs](self) for the grammar). The caller trims it if
/// it should ignore white space around it.
///
/// ```
/// use std::time::Duration;
/// use distlock_grammar::parse_duration;
///
/// assert_eq!(parse_duration("1h 30min"), Ok(Duration::from_secs(5400)));
/// assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
/// assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(
///     parse_duration("30 parsecs").unwrap_err().to_string(),
///     "unknown time unit \"parsecs\", supported units: ns, us/µs, ms, sec, min, hours, days, \
///      weeks, months, years (and few variations)"
/// );
/// ```
///
/// # Errors
/// A [`DurationError`] that says what is wrong and where.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut cursor = Cursor { text, at: 0 };
    let mut total = Total::default();
    let mut n = first_digit(&mut cursor)?.ok_or(DurationError::Empty)?;
    loop {
        // The number: digits, with white space anywhere in it, then perhaps a fraction.
        let mut fraction = None;
        let mut unit_start = text.len();
        while let Some(c) = cursor.peek() {
            let at = cursor.at;
            cursor.bump();
            match c {
                '0'..='9' => {
                    n = n
                        .checked_mul(10)
                        .and_then(|n| n.checked_add(digit(c)))
                        .ok_or(DurationError::NumberOverflow)?;
                }
                c if c.is_whitespace() => {}
                c if is_unit_char(c) => {
                    unit_start = at;
                    break;
                }
                '.' => {
                    let (parsed, start) = fraction_digits(&mut cursor, at)?;
                    fraction = Some(parsed);
                    unit_start = start;
                    break;
                }
                _ => return Err(DurationError::InvalidCharacter { at }),
            }
        }
        // The unit: letters up to white space, a digit (the next span) or the end.
        let mut unit_end = text.len();
        let mut next_digit = None;
        while let Some(c) = cursor.peek() {
            let at = cursor.at;
            match c {
                '0'..='9' => {
                    cursor.bump();
                    unit_end = at;
                    next_digit = Some(digit(c));
                    break;
                }
                c if c.is_whitespace() => {
                    cursor.bump();
                    unit_end = at;
                    break;
                }
                c if is_unit_char(c) => {
                    cursor.bump();
                }
                _ => return Err(DurationError::InvalidCharacter { at }),
            }
        }
        let unit_end = unit_end.max(unit_start);
        let word = &text[unit_start..unit_end];
        let unit = unit(word).ok_or_else(|| DurationError::UnknownUnit {
            start: unit_start,
            end: unit_end,
            unit: word.to_owned(),
            value: n,
        })?;
        total.add_span(n, fraction, unit)?;
        n = match next_digit {
            Some(d) => d,
            None => match first_digit(&mut cursor)? {
                Some(d) => d,
                None => break,
            },
        };
    }
    // `nanos` is below a second; `secs` fits by construction.
    let nanos = u32::try_from(total.nanos).map_err(|_| DurationError::NumberOverflow)?;
    Ok(Duration::new(total.secs, nanos))
}

fn digit(c: char) -> u64 {
    u64::from(c) - u64::from('0')
}

/// Skips white space to the first digit of a span; `None` at the end of the text.
fn first_digit(cursor: &mut Cursor<'_>) -> Result<Option<u64>, DurationError> {
    let from = cursor.at;
    while let Some(c) = cursor.bump() {
        match c {
            '0'..='9' => return Ok(Some(digit(c))),
            c if c.is_whitespace() => {}
            _ => return Err(DurationError::NumberExpected { at: from }),
        }
    }
    Ok(None)
}

/// The digits after the `.` at `dot`, and where the unit starts (the first letter after them,
/// or the end). White space may come among the digits.
fn fraction_digits(
    cursor: &mut Cursor<'_>,
    dot: usize,
) -> Result<(Fraction, usize), DurationError> {
    let mut fraction = Fraction {
        numerator: 0,
        denominator: 1,
    };
    // The offset an invalid character is reported at: the `.` for the first, then each one's.
    let mut reported = dot;
    let mut unit_start = cursor.text.len();
    while let Some(c) = cursor.bump() {
        match c {
            '0'..='9' => {
                fraction.denominator = fraction
                    .denominator
                    .checked_mul(10)
                    .ok_or(DurationError::NumberOverflow)?;
                fraction.numerator = fraction
                    .numerator
                    .checked_mul(10)
                    .and_then(|n| n.checked_add(digit(c)))
                    .ok_or(DurationError::NumberOverflow)?;
            }
            c if c.is_whitespace() => {}
            c if is_unit_char(c) => {
                // (After no digit at all, the `.`: refused just below.)
                unit_start = reported;
                break;
            }
            _ => return Err(DurationError::InvalidCharacter { at: reported }),
        }
        reported = cursor.at;
    }
    if fraction.denominator == 1 {
        return Err(DurationError::InvalidCharacter { at: reported });
    }
    Ok((fraction, unit_start))
}

/// A duration written in the same text: the largest units first, each part its own word
/// (`"2h 37m"`, `"30days"`, `"1s 500ms"`, `"0s"`); it parses back to the same duration.
///
/// ```
/// use std::time::Duration;
/// use distlock_grammar::DurationText;
///
/// assert_eq!(DurationText(Duration::from_secs(9420)).to_string(), "2h 37m");
/// assert_eq!(DurationText(Duration::from_secs(30 * 86_400)).to_string(), "30days");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationText(pub Duration);

impl fmt::Display for DurationText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.as_secs();
        let nanos = self.0.subsec_nanos();
        if secs == 0 && nanos == 0 {
            return f.write_str("0s");
        }
        let in_year = secs % YEAR;
        let in_month = in_year % MONTH;
        let in_day = in_month % DAY;
        let parts: [(u64, &str, bool); 9] = [
            (secs / YEAR, "year", true),
            (in_year / MONTH, "month", true),
            (in_month / DAY, "day", true),
            (in_day / HOUR, "h", false),
            (in_day % HOUR / MINUTE, "m", false),
            (in_day % MINUTE, "s", false),
            (u64::from(nanos / 1_000_000), "ms", false),
            (u64::from(nanos / 1_000 % 1_000), "us", false),
            (u64::from(nanos % 1_000), "ns", false),
        ];
        let mut first = true;
        for (value, name, plural) in parts {
            if value == 0 {
                continue;
            }
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            write!(f, "{value}{name}")?;
            if plural && value > 1 {
                f.write_str("s")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Duration {
        parse_duration(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    fn err(text: &str) -> DurationError {
        parse_duration(text).expect_err(text)
    }

    #[test]
    fn the_documented_forms() {
        let secs = Duration::from_secs;
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("0s"), Duration::ZERO);
        assert_eq!(ok("250ms"), Duration::from_millis(250));
        assert_eq!(ok("30s"), secs(30));
        assert_eq!(ok("1m 30s"), secs(90));
        assert_eq!(ok("1h 30min"), secs(5400));
        assert_eq!(ok("1h30m"), secs(5400));
        assert_eq!(ok("30 s"), secs(30));
        assert_eq!(ok("1 0s"), secs(10), "white space inside a number");
        assert_eq!(ok("1.5h"), secs(5400));
        assert_eq!(ok("0.5min"), secs(30));
        assert_eq!(ok("1.25s"), Duration::from_millis(1250));
        assert_eq!(ok("2w"), secs(14 * 86_400));
        assert_eq!(ok("1M"), secs(2_630_016));
        assert_eq!(ok("1y"), secs(31_557_600));
        assert_eq!(ok("7days"), secs(7 * 86_400));
        assert_eq!(ok("3µs"), Duration::from_micros(3));
        assert_eq!(ok("17nsec"), Duration::from_nanos(17));
        assert_eq!(ok("999999999ns 1ns"), secs(1));
        assert_eq!(ok("20000000000s"), secs(20_000_000_000));
        assert_eq!(ok("1.5 s"), Duration::from_millis(1500));
    }

    #[test]
    fn each_problem_with_its_offset() {
        assert_eq!(err(""), DurationError::Empty);
        assert_eq!(err("   "), DurationError::Empty);
        assert_eq!(err("soon"), DurationError::NumberExpected { at: 0 });
        assert_eq!(err("1h x"), DurationError::NumberExpected { at: 3 });
        assert_eq!(err("1h  x"), DurationError::NumberExpected { at: 3 });
        assert_eq!(err("1,5s"), DurationError::InvalidCharacter { at: 1 });
        assert_eq!(err("1s!"), DurationError::InvalidCharacter { at: 2 });
        assert_eq!(err("1."), DurationError::InvalidCharacter { at: 1 });
        assert_eq!(err("1.s"), DurationError::InvalidCharacter { at: 1 });
        assert_eq!(err("1.,"), DurationError::InvalidCharacter { at: 1 });
        assert_eq!(err("1.5,"), DurationError::InvalidCharacter { at: 3 });
        assert_eq!(
            err("30 parsecs"),
            DurationError::UnknownUnit {
                start: 3,
                end: 10,
                unit: "parsecs".to_owned(),
                value: 30
            }
        );
        assert_eq!(err("30 parsecs").span(), Some(3..10));
        let needed = err("10");
        assert_eq!(
            needed.to_string(),
            "time unit needed, for example 10sec or 10ms"
        );
        assert_eq!(needed.span(), Some(2..2));
        assert_eq!(
            err("1S"),
            DurationError::UnknownUnit {
                start: 1,
                end: 2,
                unit: "S".to_owned(),
                value: 1
            }
        );
        assert_eq!(err("99999999999999999999s"), DurationError::NumberOverflow);
        assert_eq!(err("1.5ns"), DurationError::NumberOverflow);
        assert_eq!(err("0.0001h"), DurationError::NumberOverflow);
        assert_eq!(
            err("18446744073709551615s 1s"),
            DurationError::NumberOverflow
        );
        assert_eq!(
            err("1.00000000000000000001s"),
            DurationError::NumberOverflow
        );
        assert_eq!(err("soon").to_string(), "expected number at 0");
        assert_eq!(err("1s!").to_string(), "invalid character at 2");
        assert_eq!(err("").to_string(), "value was empty");
    }

    #[test]
    fn prints_what_parses_back() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(9420), "2h 37m"),
            (Duration::from_millis(1500), "1s 500ms"),
            (Duration::from_secs(30 * 86_400), "30days"),
            (Duration::from_secs(86_400), "1day"),
            (
                Duration::from_secs(31_557_600 + 2_630_016 * 2),
                "1year 2months",
            ),
            (Duration::new(1, 1_001_001), "1s 1ms 1us 1ns"),
        ];
        for (duration, text) in cases {
            assert_eq!(DurationText(duration).to_string(), text);
            assert_eq!(parse_duration(text), Ok(duration), "{text}");
        }
    }
}
