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
//!
//! Layers compose: a layer adds its members after those already in the response (an inner
//! rate-limit layer's, or the inner service's own), on one field line, so every policy that
//! judged the request is listed. The single-valued `X-RateLimit-*` fields are the binding
//! layer's: the one with the fewest requests left.

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
/// whose figures mean nothing), after whatever rate-limit fields the response already has.
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
        append_members(headers, RATELIMIT_POLICY, policy);
        append_members(headers, RATELIMIT, &ratelimit_field(decision));
    }
    if style.legacy {
        // One value each, so they can name one policy only: the binding one. A layer with
        // as many left as the one already there (say, the inner layer that refused) keeps it.
        let theirs = headers
            .get(X_RATELIMIT_REMAINING)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if theirs.is_none_or(|theirs| decision.remaining < theirs) {
            headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(decision.limit));
            headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(decision.remaining));
            headers.insert(
                X_RATELIMIT_RESET,
                HeaderValue::from(ceil_secs(decision.reset_after)),
            );
        }
    }
}

/// Adds `members` to the Structured Field List `name`, after the members already there.
///
/// HTTP combines the lines of a list field by joining them with `,` (RFC 9110, section 5.3),
/// and so do sf-list parsers (RFC 9651, section 4.2); this writes the combined value as one
/// line, so that a client reading only the first line still sees every member.
fn append_members(headers: &mut HeaderMap, name: HeaderName, members: &HeaderValue) {
    if members.as_bytes().trim_ascii().is_empty() {
        return;
    }
    let mut line: Vec<u8> = Vec::new();
    for existing in headers.get_all(&name) {
        let existing = existing.as_bytes().trim_ascii();
        if !existing.is_empty() {
            line.extend_from_slice(existing);
            line.extend_from_slice(b", ");
        }
    }
    if line.is_empty() {
        headers.insert(name, members.clone());
        return;
    }
    line.extend_from_slice(members.as_bytes());
    // Header values joined by ", " are a header value; keep both lines if that ever fails.
    match HeaderValue::from_bytes(&line) {
        Ok(combined) => {
            headers.insert(name, combined);
        }
        Err(_) => {
            headers.append(name, members.clone());
        }
    }
}

/// Which rate-limit fields responses carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeaderStyle {
    pub(crate) ietf: bool,
    pub(crate) legacy: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_appended_on_one_line() {
        let mut headers = HeaderMap::new();
        append_members(
            &mut headers,
            RATELIMIT,
            &HeaderValue::from_static(r#""inner";r=1;t=1"#),
        );
        append_members(
            &mut headers,
            RATELIMIT,
            &HeaderValue::from_static(r#""outer";r=4;t=1, "daily";r=9;t=60"#),
        );
        let lines: Vec<_> = headers.get_all(RATELIMIT).iter().collect();
        assert_eq!(
            lines,
            [r#""inner";r=1;t=1, "outer";r=4;t=1, "daily";r=9;t=60"#]
        );
    }

    #[test]
    fn lines_already_there_are_combined_and_empty_ones_dropped() {
        let mut headers = HeaderMap::new();
        headers.append(RATELIMIT, HeaderValue::from_static(r#""a";r=1;t=1"#));
        headers.append(RATELIMIT, HeaderValue::from_static(" "));
        headers.append(RATELIMIT, HeaderValue::from_static(r#""b";r=2;t=2 "#));
        append_members(
            &mut headers,
            RATELIMIT,
            &HeaderValue::from_static(r#""c";r=3;t=3"#),
        );
        let lines: Vec<_> = headers.get_all(RATELIMIT).iter().collect();
        assert_eq!(lines, [r#""a";r=1;t=1, "b";r=2;t=2, "c";r=3;t=3"#]);
        // Nothing to add leaves the field alone.
        append_members(&mut headers, RATELIMIT, &HeaderValue::from_static(""));
        assert_eq!(headers.get_all(RATELIMIT).iter().count(), 1);
    }
}
