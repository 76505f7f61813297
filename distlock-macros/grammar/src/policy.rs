//! Policy text: `"api: 100/s burst 20"`, `"uploads: sliding-log 5/min"`, and the checks every
//! policy passes.
//!
//! ```text
//! policy    = name ":" [algorithm] rate
//! algorithm = "gcra" | "token-bucket" | "fixed-window" | "sliding-window" | "sliding-log"
//! name      = 1 to 64 characters of A-Z a-z 0-9 . _ -
//! ```
//!
//! `_` or spaces may stand for `-` in the algorithm, and its case does not matter. Names,
//! algorithms and rates have no `:`, so a colon too many is in the name (and refused there).

use std::fmt;

pub use crate::algorithm::{Algorithm, kebab};
use crate::bounds::{MAX_LOG_LIMIT, MAX_POLICY_NAME_LEN};
use crate::problem::{ParseError, Problem, Refusal};
use crate::rate::{RateText, parse_rate};

impl fmt::Display for Algorithm {
    /// The [config name](Self::config_name).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.config_name())
    }
}

/// A checked policy. Plain data; distlock's `Policy` is built from it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PolicyText {
    /// The name, trimmed.
    pub name: String,
    /// The algorithm (GCRA when none is written).
    pub algorithm: Algorithm,
    /// The rate.
    pub rate: RateText,
}

impl PolicyText {
    /// How many units may go at once: the burst (the count, for a window algorithm).
    #[must_use]
    pub fn limit(&self) -> u32 {
        self.rate.burst
    }
}

/// A policy name of 1 to [`MAX_POLICY_NAME_LEN`] characters of `A-Z a-z 0-9 . _ -` (it goes
/// into keys and HTTP headers).
///
/// # Errors
/// [`Refusal::Name`].
pub fn check_policy_name(name: &str) -> Result<(), Refusal> {
    let valid_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > MAX_POLICY_NAME_LEN || !name.chars().all(valid_char) {
        return Err(Refusal::Name {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// The checks of a policy beyond its rate's: its name ([`check_policy_name`]), no separate
/// burst for a window algorithm, and at most [`MAX_LOG_LIMIT`] per window for a sliding log.
///
/// # Errors
/// The first [`Refusal`] in that order.
pub fn check_policy(name: &str, algorithm: Algorithm, rate: RateText) -> Result<(), Refusal> {
    check_policy_name(name)?;
    if !algorithm.has_burst() && rate.burst != rate.count {
        return Err(Refusal::BurstNotSupported {
            name: name.to_owned(),
            algorithm,
            burst: rate.burst,
            count: rate.count,
        });
    }
    if algorithm == Algorithm::SlidingLog && rate.count > MAX_LOG_LIMIT {
        return Err(Refusal::LogTooLarge {
            name: name.to_owned(),
            count: rate.count,
        });
    }
    Ok(())
}

/// Parses and checks a policy (see the [module docs](self) for the grammar).
///
/// ```
/// use distlock_grammar::{Algorithm, Problem, parse_policy};
///
/// let policy = parse_policy("uploads: sliding-log 5/min").unwrap();
/// assert_eq!(policy.name, "uploads");
/// assert_eq!(policy.algorithm, Algorithm::SlidingLog);
///
/// let err = parse_policy("api: leaky 10/s").unwrap_err();
/// assert_eq!(err.problem, Problem::Algorithm("leaky".to_owned()));
/// assert_eq!(err.span, 5..10);
/// ```
///
/// # Errors
/// A [`ParseError`]: the [`Problem`], its byte offsets in `text`, and for a problem in the
/// rate, where the rate is.
pub fn parse_policy(text: &str) -> Result<PolicyText, ParseError> {
    let Some((name, spec)) = text.rsplit_once(':') else {
        return Err(ParseError::new(Problem::NoName, 0..text.len()));
    };
    let spec_at = name.len() + 1;
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
    let (algorithm_text, rate_text) = spec.split_at(rate_at);
    let algorithm = if algorithm_text.trim().is_empty() {
        Algorithm::default()
    } else {
        Algorithm::from_name(algorithm_text).ok_or_else(|| {
            ParseError::new(
                Problem::Algorithm(algorithm_text.trim().to_owned()),
                trimmed(text, spec_at, algorithm_text),
            )
        })?
    };
    let rate_span = trimmed(text, spec_at + rate_at, rate_text);
    let rate = parse_rate(rate_text).map_err(|mut err| {
        let shift = spec_at + rate_at;
        err.span = err.span.start + shift..err.span.end + shift;
        err.rate = Some(rate_span.clone());
        err
    })?;
    let name_span = trimmed(text, 0, name);
    let name = name.trim();
    check_policy(name, algorithm, rate).map_err(|refusal| {
        let span = match refusal {
            Refusal::Name { .. } => name_span,
            _ => 0..text.len(),
        };
        ParseError::new(Problem::Refused(refusal), span)
    })?;
    Ok(PolicyText {
        name: name.to_owned(),
        algorithm,
        rate,
    })
}

/// The byte range of `part` (which starts at `at` in `text`) without its white space.
fn trimmed(text: &str, at: usize, part: &str) -> std::ops::Range<usize> {
    let start = at + (part.len() - part.trim_start().len());
    let end = (at + part.trim_end().len()).max(start);
    debug_assert!(end <= text.len());
    start..end
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::bounds::MAX_POLICY_NAME_LEN;

    fn ok(text: &str) -> PolicyText {
        parse_policy(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    fn err(text: &str) -> ParseError {
        parse_policy(text).expect_err(text)
    }

    #[test]
    fn the_valid_forms() {
        let api = ok("api: 100/s burst 20");
        assert_eq!(api.name, "api");
        assert_eq!(api.algorithm, Algorithm::Gcra);
        assert_eq!(api.limit(), 20);
        for text in [
            "hourly: fixed-window 1000/h",
            "hourly:fixed_window 1000/h",
            "hourly : Fixed Window 1000 per 1 hour",
            " hourly:FIXED-WINDOW 1000/h ",
        ] {
            let p = ok(text);
            assert_eq!(
                (p.name.as_str(), p.algorithm),
                ("hourly", Algorithm::FixedWindow)
            );
            assert_eq!(p.rate.period, Duration::from_secs(3600), "{text:?}");
        }
        assert_eq!(
            ok("b: token--bucket 10/s").algorithm,
            Algorithm::TokenBucket
        );
        assert_eq!(ok("w: sliding-window 10/s burst 10").limit(), 10);
        assert_eq!(ok("p.1_x-y: 10 per 2s").name, "p.1_x-y");
        for algorithm in Algorithm::ALL {
            assert_eq!(
                Algorithm::from_name(algorithm.config_name()),
                Some(algorithm)
            );
        }
        assert_eq!(Algorithm::from_name("tokenbucket"), None);
        assert_eq!(Algorithm::from_name(""), None);
    }

    #[test]
    fn each_problem_with_its_offset() {
        let e = err("100/s");
        assert_eq!((e.problem, e.span), (Problem::NoName, 0..5));
        let e = err("api: leaky bucket 10/s");
        assert_eq!(e.problem, Problem::Algorithm("leaky bucket".into()));
        assert_eq!((e.span, e.rate), (5..17, None));
        let e = err("api: gcra10/s");
        assert_eq!(e.problem, Problem::Algorithm("gcra10/s".into()));
        // A problem in the rate points into the whole text, and says where the rate is.
        let e = err("api: 100/x burst 20");
        assert_eq!(e.problem, Problem::Unit("x".into()));
        assert_eq!((e.span, e.rate), (9..10, Some(5..19)));
        let e = err("api: gcra");
        assert_eq!((e.problem, e.rate), (Problem::Empty, Some(9..9)));
        let e = err("api: 0/s");
        assert_eq!(e.refusal(), Some(&Refusal::ZeroCount));
        assert_eq!((e.span, e.rate), (5..8, Some(5..8)));
        let e = err(" a b : 10/s");
        assert_eq!(e.refusal(), Some(&Refusal::Name { name: "a b".into() }));
        assert_eq!(e.span, 1..4);
        assert!(matches!(
            err("api:v2: 10/s").problem,
            Problem::Refused(Refusal::Name { .. })
        ));
        assert!(matches!(
            err(": 10/s").problem,
            Problem::Refused(Refusal::Name { .. })
        ));
        assert!(matches!(
            err("é: 10/s").problem,
            Problem::Refused(Refusal::Name { .. })
        ));
        assert_eq!(
            err("w: fixed-window 10/s burst 3").refusal(),
            Some(&Refusal::BurstNotSupported {
                name: "w".into(),
                algorithm: Algorithm::FixedWindow,
                burst: 3,
                count: 10
            })
        );
    }

    #[test]
    fn the_boundaries() {
        let longest = "x".repeat(MAX_POLICY_NAME_LEN);
        assert_eq!(ok(&format!("{longest}: 1/s")).name, longest);
        assert!(parse_policy(&format!("{longest}x: 1/s")).is_err());
        assert_eq!(ok("l: sliding-log 10000/s").rate.count, MAX_LOG_LIMIT);
        assert_eq!(
            err("l: sliding-log 10001/s").refusal(),
            Some(&Refusal::LogTooLarge {
                name: "l".into(),
                count: 10_001
            })
        );
    }

    #[test]
    fn messages_say_what_is_wrong() {
        assert_eq!(
            err("w: fixed-window 10/s burst 3").to_string(),
            "invalid policy `w`: a fixed-window allows `count` per window; it takes no \
             separate burst (got burst 3 for count 10)"
        );
        assert!(
            err("api: 1/s burst 2 extra")
                .to_string()
                .contains("unexpected `extra` after")
        );
        assert!(
            err("l: sliding-log 10001/s")
                .to_string()
                .contains("capped at 10000")
        );
    }
}
