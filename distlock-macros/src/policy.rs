//! The one-line policy text of `#[rate_limit(policy = "api: 100/s burst 20")]`, checked at
//! compile time.
//!
//! The grammar and its checks are `distlock-grammar`'s, the ones the runtime's
//! `impl FromStr for distlock::ratelimit::Policy` and its constructors call, so a policy that
//! compiles is one the runtime builds. This module only turns the grammar's result into what
//! the expansion needs, and its problem into a compile error's message.

use std::time::Duration;

pub(crate) use distlock_grammar::Algorithm;
use distlock_grammar::{ParseError, Problem, Refusal, parse_policy};

/// A checked policy, as the expansion writes it into a `PolicySpec`.
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

/// The runtime's variant name of `algorithm` (`distlock::__private::Algorithm::<this>`).
pub(crate) fn variant(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::Gcra => "Gcra",
        Algorithm::TokenBucket => "TokenBucket",
        Algorithm::FixedWindow => "FixedWindow",
        Algorithm::SlidingWindow => "SlidingWindow",
        Algorithm::SlidingLog => "SlidingLog",
    }
}

/// Parses and checks a policy; the error is a complete message.
pub(crate) fn parse(text: &str) -> Result<PolicyText, String> {
    let policy = parse_policy(text).map_err(|err| message(text, &err))?;
    Ok(PolicyText {
        name: policy.name,
        algorithm: policy.algorithm,
        count: policy.rate.count,
        period: policy.rate.period,
        burst: policy.rate.burst,
    })
}

/// The message of a compile error: the problem, with the part of the text it is in.
fn message(text: &str, err: &ParseError) -> String {
    match &err.problem {
        Problem::Algorithm(found) => format!(
            "unknown algorithm {found:?} in policy {text:?}; use gcra, token-bucket, \
             fixed-window, sliding-window or sliding-log"
        ),
        // These name the policy already.
        Problem::Refused(
            refusal @ (Refusal::BurstNotSupported { .. } | Refusal::LogTooLarge { .. }),
        ) => refusal.to_string(),
        Problem::Refused(refusal) => format!("{refusal} (from {text:?})"),
        problem => match &err.rate {
            Some(rate) => format!(
                "invalid rate {:?} in policy {text:?}: {problem}",
                &text[rate.clone()]
            ),
            None => format!("invalid policy {text:?}: {problem}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(err("api: 1/s burst 2 extra").contains("unexpected `extra` after the period"));
    }

    #[test]
    fn the_expansion_gets_the_checked_policy() {
        let p = parse("hourly: fixed-window 1000/h").unwrap();
        assert_eq!(
            (p.name.as_str(), variant(p.algorithm)),
            ("hourly", "FixedWindow")
        );
        assert_eq!((p.count, p.burst, p.limit()), (1000, 1000, 1000));
        assert_eq!(p.period, Duration::from_secs(3600));
    }
}
