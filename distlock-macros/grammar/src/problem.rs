//! What can be wrong with rate or policy text: [`Problem`] (with [`Refusal`] for text that is
//! well formed but names a rate or policy that cannot work), and where: [`ParseError`].

use std::fmt;
use std::ops::Range;
use std::time::Duration;

use crate::algorithm::Algorithm;
use crate::bounds::{MAX_LOG_LIMIT, MAX_PERIOD, MAX_REFILL, MIN_PERIOD};

/// What a rate looks like, for messages.
const RATE_EXAMPLES: &str = "\"100/s\", \"1000/h burst 50\", \"10 per 2s\"";

/// Why a text is not a rate or a policy. Its [`Display`](fmt::Display) says what is wrong
/// without repeating the text (callers put the text around it); where it is wrong is in the
/// [`ParseError`] that carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// A policy without `name:` in front.
    NoName,
    /// Not one of the algorithms' names (the words as written, trimmed).
    Algorithm(String),
    /// The rate is empty.
    Empty,
    /// A character no rate has.
    Character(char),
    /// The rate starts with something else than its count (what it starts with).
    ExpectedCount(String),
    /// Digits that are not a count from 0 to `u32::MAX` (or with a misplaced `_`).
    Number(String),
    /// A count and nothing after it.
    NoPeriod,
    /// Something else than `/` or `per` after the count.
    ExpectedPer(String),
    /// A period without its unit.
    NoUnit,
    /// A word that is not a unit.
    Unit(String),
    /// `burst` and nothing after it.
    NoBurst,
    /// Something else than a number after `burst`.
    ExpectedBurst(String),
    /// Text after the rate (all of it, trimmed).
    Trailing(String),
    /// Well formed, but a rate or policy that cannot work.
    Refused(Refusal),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoName => f.write_str(
                "no name; write `<name>: [<algorithm>] <rate>`, e.g. \"api: 100/s burst 20\" or \
                 \"uploads: sliding-log 5/min\"",
            ),
            Self::Algorithm(found) => write!(
                f,
                "unknown algorithm {found:?}; use gcra, token-bucket, fixed-window, \
                 sliding-window or sliding-log"
            ),
            Self::Empty => write!(
                f,
                "it is empty; write `<count>/<period> [burst <n>]`, e.g. {RATE_EXAMPLES}"
            ),
            Self::Character(c) => write!(
                f,
                "unexpected {c:?}; a rate is `<count>/<period> [burst <n>]`, e.g. \
                 {RATE_EXAMPLES}"
            ),
            Self::ExpectedCount(found) => write!(
                f,
                "it starts with `{found}` instead of a count; write `<count>/<period>`, e.g. \
                 {RATE_EXAMPLES}"
            ),
            Self::Number(found) => {
                write!(f, "`{found}` is not a whole number from 0 to {}", u32::MAX)
            }
            Self::NoPeriod => write!(
                f,
                "no period; write `<count>/<period>` or `<count> per <period>`, e.g. \
                 {RATE_EXAMPLES}"
            ),
            Self::ExpectedPer(found) => {
                write!(f, "expected `/` or `per` after the count, found `{found}`")
            }
            Self::NoUnit => {
                f.write_str("the period has no unit; use ms, s, min, h or d (`10 per 2s`)")
            }
            Self::Unit(found) => write!(f, "unknown unit `{found}`; use ms, s, min, h or d"),
            Self::NoBurst => f.write_str("`burst` needs a number after it (`burst 20`)"),
            Self::ExpectedBurst(found) => write!(
                f,
                "expected the burst's number after `burst`, found `{found}`"
            ),
            Self::Trailing(found) => write!(
                f,
                "unexpected `{found}` after the period; only `burst <n>` may follow"
            ),
            Self::Refused(refusal) => refusal.fmt(f),
        }
    }
}

/// A rate or policy that is well formed but cannot work: the checks of distlock's `Rate` and
/// `Policy` constructors, which call [`check_rate`](crate::check_rate),
/// [`check_burst`](crate::check_burst) and [`check_policy`](crate::check_policy) for them.
///
/// Not `#[non_exhaustive]`: distlock maps every refusal into its `InvalidPolicy`, and pins
/// this crate's exact version, so a new refusal is a compile error there rather than a
/// fallback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A count of zero would deny everything.
    ZeroCount,
    /// A burst of zero would deny everything.
    ZeroBurst,
    /// The period is outside [`MIN_PERIOD`]`..=`[`MAX_PERIOD`].
    Period {
        /// The period given.
        period: Duration,
    },
    /// More than one request per microsecond (the algorithms count in microseconds).
    TooFast {
        /// The count given.
        count: u32,
        /// The period given.
        period: Duration,
    },
    /// The burst takes longer than [`MAX_REFILL`] to refill at the rate.
    BurstTooLong {
        /// The burst given.
        burst: u32,
    },
    /// A policy name that is not 1 to 64 characters of `A-Z a-z 0-9 . _ -`.
    Name {
        /// The name given.
        name: String,
    },
    /// A window algorithm given a burst different from its count.
    BurstNotSupported {
        /// The policy's name.
        name: String,
        /// Its algorithm.
        algorithm: Algorithm,
        /// The burst given.
        burst: u32,
        /// The count given.
        count: u32,
    },
    /// A sliding log with more than [`MAX_LOG_LIMIT`] requests per window.
    LogTooLarge {
        /// The policy's name.
        name: String,
        /// The count given.
        count: u32,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroCount => f.write_str("invalid rate: the count must be at least 1"),
            Self::ZeroBurst => f.write_str("invalid rate: the burst must be at least 1"),
            Self::Period { period } => write!(
                f,
                "invalid rate: the period {period:?} is outside {MIN_PERIOD:?}..={MAX_PERIOD:?}"
            ),
            Self::TooFast { count, period } => write!(
                f,
                "invalid rate: {count} per {period:?} is more than one per microsecond"
            ),
            Self::BurstTooLong { burst } => write!(
                f,
                "invalid rate: a burst of {burst} takes longer than {MAX_REFILL:?} to refill at \
                 this rate"
            ),
            Self::Name { name } => write!(
                f,
                "invalid policy name {name:?}: use 1 to 64 characters of A-Z, a-z, 0-9, '.', \
                 '_', '-'"
            ),
            Self::BurstNotSupported {
                name,
                algorithm,
                burst,
                count,
            } => write!(
                f,
                "invalid policy `{name}`: a {} allows `count` per window; it takes no separate \
                 burst (got burst {burst} for count {count})",
                algorithm.config_name()
            ),
            Self::LogTooLarge { name, count } => write!(
                f,
                "invalid policy `{name}`: a sliding log is capped at {MAX_LOG_LIMIT} requests \
                 per window, got {count}; the sliding window counter approximates it in O(1)"
            ),
        }
    }
}

impl std::error::Error for Refusal {}

/// A [`Problem`] and where it is in the text that was parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// What is wrong.
    pub problem: Problem,
    /// Where, as byte offsets into the text that was parsed: the offending part, an empty
    /// range where a missing part should be, or the whole part a refusal is about.
    pub span: Range<usize>,
    /// For a policy's text, the byte range of its rate (trimmed), when the problem is in the
    /// rate; `None` for a problem with the name or the algorithm, or for a rate's own text.
    pub rate: Option<Range<usize>>,
}

impl ParseError {
    pub(crate) fn new(problem: Problem, span: Range<usize>) -> Self {
        Self {
            problem,
            span,
            rate: None,
        }
    }

    /// The refusal, when the text was well formed but names a rate or policy that cannot
    /// work.
    #[must_use]
    pub fn refusal(&self) -> Option<&Refusal> {
        match &self.problem {
            Problem::Refused(refusal) => Some(refusal),
            _ => None,
        }
    }
}

impl fmt::Display for ParseError {
    /// The problem's message (the caller adds the text it was found in).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.problem.fmt(f)
    }
}

impl std::error::Error for ParseError {}
