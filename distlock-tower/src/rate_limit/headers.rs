//! The HTTP fields a rate-limited response carries.
//!
//! * `RateLimit-Policy` and `RateLimit` as in draft-ietf-httpapi-ratelimit-headers-11:
//!   Structured Field Lists of items, one per policy, each item the policy's name as a
//!   String with parameters: `"api";q=100;w=60` (quota `q` per window `w` seconds) and
//!   `"api";r=42;t=17` (`r` left, back to full in `t` seconds). No partition key (`pk`) is
//!   sent: it would echo the subject (an IP address, an API key) back to whoever asks.
//! * `Retry-After` on refusals: whole seconds, rounded up, at least 1.
//! * Optionally the older `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
//!   `X-RateLimit-Reset` (seconds), for the binding policy.

use distlock::ratelimit::{Decision, Policy};
use http::{HeaderMap, HeaderName, HeaderValue};

/// `RateLimit-Policy`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit`.
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`.
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`.
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

pub(crate) use crate::retry_after::{ceil_secs, header as retry_after};

/// `RateLimit-Policy` for a limiter's policies. Names are restricted to `[A-Za-z0-9._-]`,
/// so they are valid sf-strings as they are.
pub(crate) fn policy_field(policies: &[Policy]) -> HeaderValue {
    let items: Vec<String> = policies
        .iter()
        .map(|p| {
            format!(
                "\"{}\";q={};w={}",
                p.name(),
                p.limit(),
                ceil_secs(p.window()).max(1)
            )
        })
        .collect();
    // Only ASCII digits, names of [A-Za-z0-9._-], quotes, `;`, `=` and `,`.
    HeaderValue::from_str(&items.join(", ")).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// `RateLimit` for a decision.
pub(crate) fn ratelimit_field(decision: &Decision) -> HeaderValue {
    let items: Vec<String> = decision
        .policies
        .iter()
        .map(|p| {
            format!(
                "\"{}\";r={};t={}",
                p.policy,
                p.remaining,
                ceil_secs(p.reset_after)
            )
        })
        .collect();
    HeaderValue::from_str(&items.join(", ")).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Adds the fields that describe `decision` (nothing of the kind for a fail-open pass,
/// whose figures mean nothing).
pub(crate) fn describe(
    headers: &mut HeaderMap,
    decision: &Decision,
    policy: &HeaderValue,
    style: HeaderStyle,
) {
    if decision.origin == distlock::ratelimit::Origin::FailOpen {
        return;
    }
    if style.ietf {
        headers.insert(RATELIMIT_POLICY, policy.clone());
        headers.insert(RATELIMIT, ratelimit_field(decision));
    }
    if style.legacy {
        headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(decision.limit));
        headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(decision.remaining));
        headers.insert(
            X_RATELIMIT_RESET,
            HeaderValue::from(ceil_secs(decision.reset_after)),
        );
    }
}

/// Which rate-limit fields responses carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeaderStyle {
    pub(crate) ietf: bool,
    pub(crate) legacy: bool,
}
