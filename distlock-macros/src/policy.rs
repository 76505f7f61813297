//! The one-line policy text of `#[rate_limit(policy = "api: 100/s burst 20")]`, checked at
//! compile time.
//!
//! This is the grammar of the runtime's `impl FromStr for distlock::ratelimit::Policy`, with
//! the same checks as its constructors (`Rate::per`, `Rate::burst`, `Policy::new`), so that a
//! policy that compiles is one the runtime builds. A proc-macro crate cannot call the runtime
//! at compile time, so the grammar is written twice; it is small, and the tests at the end of
//! this file hold the two to each other: every text of a corpus (and a few thousand generated
//! ones) must be accepted by both or refused by both, and give the same policy.
//!
//! ```text
//! policy    = name ":" [algorithm] rate
//! algorithm = "gcra" | "token-bucket" | "fixed-window" | "sliding-window" | "sliding-log"
//! rate      = count ("/" | "per") [count] unit ["burst" count]
//! unit      = "ms" | "s" | "min" | "h" | "d" (and their long names)
//! count     = digits, "_" may separate them ("10_000")
//! ```

use std::time::Duration;

/// The shortest period a rate accepts (`distlock::ratelimit::MIN_PERIOD`).
const MIN_PERIOD: Duration = Duration::from_millis(1);
/// The longest period a rate accepts (`distlock::ratelimit::MAX_PERIOD`).
const MAX_PERIOD: Duration = Duration::from_secs(366 * 24 * 3600);
/// The longest a burst may take to refill (twice `MAX_PERIOD`).
const MAX_REFILL: Duration = Duration::from_secs(2 * 366 * 24 * 3600);
/// The most requests per window a sliding log accepts (`distlock::ratelimit::MAX_LOG_LIMIT`).
const MAX_LOG_LIMIT: u32 = 10_000;
/// The longest policy name (`distlock::ratelimit::MAX_POLICY_NAME_LEN`).
const MAX_NAME_LEN: usize = 64;

/// An algorithm, by the name of its `distlock::ratelimit::Algorithm` variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Algorithm {
    Gcra,
    TokenBucket,
    FixedWindow,
    SlidingWindow,
    SlidingLog,
}

impl Algorithm {
    const ALL: [Self; 5] = [
        Self::Gcra,
        Self::TokenBucket,
        Self::FixedWindow,
        Self::SlidingWindow,
        Self::SlidingLog,
    ];

    /// The name in configuration.
    fn config_name(self) -> &'static str {
        match self {
            Self::Gcra => "gcra",
            Self::TokenBucket => "token-bucket",
            Self::FixedWindow => "fixed-window",
            Self::SlidingWindow => "sliding-window",
            Self::SlidingLog => "sliding-log",
        }
    }

    /// The runtime's variant name.
    pub(crate) fn variant(self) -> &'static str {
        match self {
            Self::Gcra => "Gcra",
            Self::TokenBucket => "TokenBucket",
            Self::FixedWindow => "FixedWindow",
            Self::SlidingWindow => "SlidingWindow",
            Self::SlidingLog => "SlidingLog",
        }
    }

    /// Whether `burst` means anything to it (window algorithms allow `count` per window).
    fn has_burst(self) -> bool {
        matches!(self, Self::Gcra | Self::TokenBucket)
    }

    /// `gcra`, `token-bucket`, ...: `_` or spaces may stand for `-`; case does not matter.
    fn parse(text: &str) -> Option<Self> {
        let words: Vec<&str> = text
            .split(|c: char| c.is_whitespace() || c == '-' || c == '_')
            .filter(|word| !word.is_empty())
            .collect();
        let wanted = words.join("-").to_ascii_lowercase();
        Self::ALL.into_iter().find(|a| a.config_name() == wanted)
    }
}

/// A checked policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PolicyText {
    pub(crate) name: String,
    pub(crate) algorithm: Algorithm,
    pub(crate) count: u32,
    pub(crate) period: Duration,
    pub(crate) burst: u32,
}

impl PolicyText {
    /// How many units may go at once: the burst, or the count for a window.
    pub(crate) fn limit(&self) -> u32 {
        self.burst
    }
}

/// What a policy looks like, for messages.
const POLICY_EXAMPLES: &str = "\"api: 100/s burst 20\" or \"uploads: sliding-log 5/min\"";
/// What a rate looks like, for messages.
const RATE_EXAMPLES: &str = "\"100/s\", \"1000/h burst 50\", \"10 per 2s\"";

/// Parses and checks a policy; the error is a complete message.
pub(crate) fn parse(text: &str) -> Result<PolicyText, String> {
    // Names, algorithms and rates have no `:`, so a colon too many is in the name.
    let Some((name, spec)) = text.rsplit_once(':') else {
        return Err(format!(
            "invalid policy {text:?}: no name; write `<name>: [<algorithm>] <rate>`, e.g. \
             {POLICY_EXAMPLES}"
        ));
    };
    // The algorithm is the words before the rate: the first word that starts with a digit.
    let rate_at = spec
        .char_indices()
        .find(|&(i, c)| {
            c.is_ascii_digit()
                && spec[..i]
                    .chars()
                    .next_back()
                    .is_none_or(char::is_whitespace)
        })
        .map_or(spec.len(), |(i, _)| i);
    let (algorithm, rate) = spec.split_at(rate_at);
    let algorithm = if algorithm.trim().is_empty() {
        Algorithm::Gcra
    } else {
        Algorithm::parse(algorithm).ok_or_else(|| {
            format!(
                "unknown algorithm {:?} in policy {text:?}; use gcra, token-bucket, \
                 fixed-window, sliding-window or sliding-log",
                algorithm.trim()
            )
        })?
    };
    let (count, period, burst) = parse_rate(rate).map_err(|problem| match problem {
        Problem::Syntax(problem) => {
            format!(
                "invalid rate {:?} in policy {text:?}: {problem}",
                rate.trim()
            )
        }
        Problem::Invalid(invalid) => format!("{invalid} (from {text:?})"),
    })?;
    let name = name.trim();
    let valid_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > MAX_NAME_LEN || !name.chars().all(valid_char) {
        return Err(format!(
            "invalid policy name {name:?}: use 1 to 64 characters of A-Z, a-z, 0-9, '.', '_', \
             '-' (from {text:?})"
        ));
    }
    if !algorithm.has_burst() && burst != count {
        return Err(format!(
            "invalid policy `{name}`: a {} allows `count` per window; it takes no separate \
             burst (got burst {burst} for count {count})",
            algorithm.config_name()
        ));
    }
    if algorithm == Algorithm::SlidingLog && count > MAX_LOG_LIMIT {
        return Err(format!(
            "invalid policy `{name}`: a sliding log is capped at {MAX_LOG_LIMIT} requests per \
             window, got {count}; the sliding window counter approximates it in O(1)"
        ));
    }
    Ok(PolicyText {
        name: name.to_owned(),
        algorithm,
        count,
        period,
        burst,
    })
}

/// Why a rate's text is refused.
enum Problem {
    /// Not a rate: what is wrong, without the text.
    Syntax(String),
    /// Well formed, but not a rate that can work.
    Invalid(String),
}

/// `count ("/" | "per") [count] unit ["burst" count]` → (count, period, burst), checked as
/// `Rate::per(count, period)?.burst(burst)?` checks them.
fn parse_rate(text: &str) -> Result<(u32, Duration, u32), Problem> {
    let syntax = |message: String| Problem::Syntax(message);
    let tokens = tokenize(text).map_err(syntax)?;
    let mut tokens = tokens.iter().copied().peekable();
    let count = match tokens.next() {
        None => {
            return Err(syntax(format!(
                "it is empty; write `<count>/<period> [burst <n>]`, e.g. {RATE_EXAMPLES}"
            )));
        }
        Some(t) if t.kind == Kind::Number => number(t.text).map_err(syntax)?,
        Some(t) => {
            return Err(syntax(format!(
                "it starts with `{}` instead of a count; write `<count>/<period>`, e.g. \
                 {RATE_EXAMPLES}",
                t.text
            )));
        }
    };
    match tokens.next() {
        Some(t) if t.kind == Kind::Slash || t.is_word("per") => {}
        None => {
            return Err(syntax(format!(
                "no period; write `<count>/<period>` or `<count> per <period>`, e.g. \
                 {RATE_EXAMPLES}"
            )));
        }
        Some(t) => {
            return Err(syntax(format!(
                "expected `/` or `per` after the count, found `{}`",
                t.text
            )));
        }
    }
    let multiple = match tokens.next_if(|t| t.kind == Kind::Number) {
        Some(t) => number(t.text).map_err(syntax)?,
        None => 1,
    };
    let unit = match tokens.next() {
        Some(t) if t.kind == Kind::Word => unit(t.text).map_err(syntax)?,
        None => {
            return Err(syntax(
                "the period has no unit; use ms, s, min, h or d (`10 per 2s`)".to_owned(),
            ));
        }
        Some(t) => {
            return Err(syntax(format!(
                "unknown unit `{}`; use ms, s, min, h or d",
                t.text
            )));
        }
    };
    // At most u32::MAX days: far from overflowing a Duration.
    let period = unit * multiple;
    check_rate(count, period, count).map_err(Problem::Invalid)?;
    let mut burst = count;
    if tokens.next_if(|t| t.is_word("burst")).is_some() {
        burst = match tokens.next() {
            Some(t) if t.kind == Kind::Number => number(t.text).map_err(syntax)?,
            None => {
                return Err(syntax(
                    "`burst` needs a number after it (`burst 20`)".to_owned(),
                ));
            }
            Some(t) => {
                return Err(syntax(format!(
                    "expected a number after `burst`, found `{}`",
                    t.text
                )));
            }
        };
        if burst == 0 {
            return Err(Problem::Invalid(
                "invalid rate: the burst must be at least 1".to_owned(),
            ));
        }
        check_rate(count, period, burst).map_err(Problem::Invalid)?;
    }
    match tokens.next() {
        None => Ok((count, period, burst)),
        Some(t) => Err(syntax(format!(
            "unexpected `{}` after the rate; a rate is `<count>/<period> [burst <n>]`",
            text[t.at..].trim_end()
        ))),
    }
}

/// The checks of `Rate::per` and `Rate::burst`.
fn check_rate(count: u32, period: Duration, burst: u32) -> Result<(), String> {
    if count == 0 {
        return Err("invalid rate: the count must be at least 1".to_owned());
    }
    if !(MIN_PERIOD..=MAX_PERIOD).contains(&period) {
        return Err(format!(
            "invalid rate: the period {period:?} is outside {MIN_PERIOD:?}..={MAX_PERIOD:?}"
        ));
    }
    let period_us = period.as_micros();
    if u128::from(count) > period_us {
        return Err(format!(
            "invalid rate: {count} per {period:?} is more than one per microsecond"
        ));
    }
    let interval_us = period_us.div_ceil(u128::from(count));
    if u128::from(burst) * interval_us > MAX_REFILL.as_micros() {
        return Err(format!(
            "invalid rate: a burst of {burst} takes longer than {MAX_REFILL:?} to refill at \
             this rate"
        ));
    }
    Ok(())
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
}

fn tokenize(text: &str) -> Result<Vec<Token<'_>>, String> {
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
            return Err(format!(
                "unexpected {c:?}; a rate is `<count>/<period> [burst <n>]`, e.g. \
                 {RATE_EXAMPLES}"
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

/// A count: digits with optional single `_` between them, up to `u32::MAX`.
fn number(digits: &str) -> Result<u32, String> {
    let invalid = || format!("`{digits}` is not a whole number from 0 to {}", u32::MAX);
    if digits.ends_with('_') || digits.contains("__") {
        return Err(invalid());
    }
    digits.replace('_', "").parse().map_err(|_| invalid())
}

/// Units and their spellings (lowercase), as the runtime's rate text accepts them.
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

fn unit(word: &str) -> Result<Duration, String> {
    let lower = word.to_lowercase();
    UNITS
        .iter()
        .find(|(spellings, _)| spellings.contains(&lower.as_str()))
        .map(|&(_, unit)| unit)
        .ok_or_else(|| format!("unknown unit `{word}`; use ms, s, min, h or d"))
}

#[cfg(test)]
mod tests {
    //! The grammar against the runtime's: both accept or both refuse, and give one policy.
    //! (`distlock` is a dev-dependency, so the runtime's parser is at hand here.)

    use distlock::ratelimit::{self as runtime, Rate};

    use super::*;

    /// The policy the macro makes of `text`, built with the runtime's constructors as the
    /// expansion builds it.
    fn ours(text: &str) -> Result<runtime::Policy, String> {
        let p = parse(text)?;
        let algorithm = match p.algorithm {
            Algorithm::Gcra => runtime::Algorithm::Gcra,
            Algorithm::TokenBucket => runtime::Algorithm::TokenBucket,
            Algorithm::FixedWindow => runtime::Algorithm::FixedWindow,
            Algorithm::SlidingWindow => runtime::Algorithm::SlidingWindow,
            Algorithm::SlidingLog => runtime::Algorithm::SlidingLog,
        };
        let rate = Rate::per(p.count, p.period)
            .and_then(|r| r.burst(p.burst))
            .map_err(|e| format!("the macro accepted a rate the runtime refuses: {e}"))?;
        let policy = runtime::Policy::new(p.name.clone(), algorithm, rate)
            .map_err(|e| format!("the macro accepted a policy the runtime refuses: {e}"))?;
        assert_eq!(p.limit(), policy.limit(), "{text:?}: limit");
        Ok(policy)
    }

    /// Asserts that the macro and the runtime agree on `text`; returns whether it is valid.
    fn agree(text: &str) -> bool {
        let theirs = text.parse::<runtime::Policy>();
        match (ours(text), theirs) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a, b, "{text:?}: different policies");
                true
            }
            (Err(_), Err(_)) => false,
            (Ok(a), Err(e)) => panic!("{text:?}: the macro accepts it ({a}), the runtime not: {e}"),
            (Err(e), Ok(b)) => panic!("{text:?}: the runtime accepts it ({b}), the macro not: {e}"),
        }
    }

    #[test]
    fn the_runtime_parses_what_the_macro_accepts_and_no_more() {
        let valid = [
            "api: 100/s burst 20",
            "api:100/s",
            " api : 100 / s ",
            "uploads: sliding-log 5/min",
            "hourly: fixed-window 1000/h",
            "hourly:fixed_window 1000/h",
            "hourly : Fixed Window 1000 per 1 hour",
            " hourly:FIXED-WINDOW 1000/h ",
            "b: token bucket 10/s burst 3",
            "b: token--bucket 10/s",
            "w: sliding-window 10/s",
            "w: sliding-window 10/s burst 10",
            "g: gcra 1/s",
            "p.1_x-y: 10 per 2s",
            "day: 10_000/d",
            "slow: 1 per 366d",
            "fast: 1000/ms",
            "fast: 1/1ms",
            "micro: 1 per 1000us",
            "micro: 1 per 1000µs",
            "nano: 1 per 1000000ns",
            "m: 5/m",
            "m: 5 per 3 Minutes",
            "s: 5/Seconds BURST 7",
            "l: sliding-log 10000/s",
            "big: 4294967295/d burst 4294967295",
            "x: 1/s burst 1",
        ];
        for text in valid {
            assert!(agree(text), "{text:?} should be valid");
        }
        let invalid = [
            "",
            "100/s",
            "api:",
            "api: gcra",
            "api: leaky 10/s",
            "api: v2 10/s",
            "api: gcra10/s",
            "api: 100/x",
            "api: 100/",
            "api: 100",
            "api: 100 s",
            "api: /s",
            "api: 0/s",
            "api: 100/0s",
            "api: 2/1us",
            "api: 1/500us",
            "api: 1 per 367d",
            "api: 1/s burst",
            "api: 1/s burst 0",
            "api: 1/s burst x",
            "api: 1/s burst 2 extra",
            "api: 1/s!",
            "api: 1__0/s",
            "api: 10_/s",
            "api: _10/s",
            "api: 4294967296/d",
            "api: 1/d burst 800",
            "a b: 10/s",
            ": 10/s",
            "é: 10/s",
            "api:v2: 10/s",
            "w: fixed-window 10/s burst 3",
            "w: sliding-window 10/s burst 11",
            "l: sliding-log 10001/s",
        ];
        for text in invalid {
            assert!(!agree(text), "{text:?} should be invalid");
        }
        let long = format!("{}: 1/s", "x".repeat(64));
        assert!(agree(&long));
        let too_long = format!("{}: 1/s", "x".repeat(65));
        assert!(!agree(&too_long));
    }

    /// Twenty thousand texts put together from pieces, each slot usually filled with a valid
    /// piece and sometimes with one that is just wrong.
    #[test]
    fn generated_texts_agree() {
        // (valid pieces, invalid pieces) per slot.
        let slots: [(&[&str], &[&str]); 8] = [
            (&["api", "v1.read_x-y", " p "], &["", "a b", "é", "a:b"]),
            (
                &[
                    "",
                    "gcra ",
                    "token bucket ",
                    "Fixed_Window ",
                    "sliding-window ",
                    "sliding-log ",
                ],
                &["leaky ", "gcra", "token-"],
            ),
            (
                &["1", "7", "100", "10_000", "4294967295"],
                &["0", "10001", "4294967296", "1__0", "1_", "x"],
            ),
            (&["/", " / ", " per ", "per"], &[" x ", "", "//"]),
            (&["", "2", "1000000", " 3 "], &["0", "-1"]),
            (
                &["s", "ms", "min", "m", "h", "d", "us", "ns", "µs", "Seconds"],
                &["x", "", "1", "sec s"],
            ),
            (
                &["", " burst 20", " burst 1", " BURST 7", " burst 10_000"],
                &[" burst 0", " burst", " burst x", " burst 4294967295"],
            ),
            (&["", " "], &[" extra", "!"]),
        ];
        // A fixed linear congruential sequence: the same texts on every run.
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: usize| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            usize::try_from(state >> 33).expect("fits") % n
        };
        let (mut valid, mut invalid) = (0, 0);
        for _ in 0..20_000 {
            let mut pieces = Vec::new();
            for (good, bad) in slots {
                let piece = if next(10) == 0 {
                    bad[next(bad.len())]
                } else {
                    good[next(good.len())]
                };
                pieces.push(piece);
            }
            let text = format!("{}: {}", pieces[0], pieces[1..].concat());
            if agree(&text) {
                valid += 1;
            } else {
                invalid += 1;
            }
        }
        // Both kinds are well represented, so agreement means something.
        assert!(
            valid > 2000 && invalid > 2000,
            "{valid} valid, {invalid} invalid"
        );
    }

    #[test]
    fn constants_match_the_runtime() {
        assert_eq!(MIN_PERIOD, runtime::MIN_PERIOD);
        assert_eq!(MAX_PERIOD, runtime::MAX_PERIOD);
        assert_eq!(MAX_LOG_LIMIT, runtime::MAX_LOG_LIMIT);
        assert_eq!(MAX_NAME_LEN, runtime::MAX_POLICY_NAME_LEN);
    }

    #[test]
    fn messages_say_what_is_wrong() {
        let err = |text: &str| parse(text).unwrap_err();
        assert!(err("100/s").contains("no name; write `<name>: [<algorithm>] <rate>`"));
        assert!(err("api: leaky 10/s").starts_with("unknown algorithm \"leaky\""));
        assert!(
            err("api: 100/x")
                .starts_with("invalid rate \"100/x\" in policy \"api: 100/x\": unknown unit `x`")
        );
        assert!(err("api: 0/s").starts_with("invalid rate: the count must be at least 1"));
        assert!(err("a b: 1/s").starts_with("invalid policy name \"a b\""));
        assert!(err("w: fixed-window 10/s burst 3").contains("takes no separate burst"));
        assert!(err("l: sliding-log 10001/s").contains("capped at 10000"));
        assert!(err("api: 1/s burst 2 extra").contains("unexpected `extra` after the rate"));
    }
}
