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
use sfv::{Integer, KeyRef, ListSerializer, StringRef};

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

use crate::retry_after::ceil_secs;

/// `RateLimit-Policy` for a limiter's policies.
pub(crate) fn policy_field(policies: &[Policy]) -> HeaderValue {
    let mut list = ListSerializer::new();
    for p in policies {
        member(
            &mut list,
            p.name(),
            [
                ("q", u64::from(p.limit())),
                ("w", ceil_secs(p.window()).max(1)),
            ],
        );
    }
    field_value(list)
}

/// `RateLimit` for a decision.
pub(crate) fn ratelimit_field(decision: &Decision) -> HeaderValue {
    let mut list = ListSerializer::new();
    for p in &decision.policies {
        member(
            &mut list,
            &p.policy,
            [("r", p.remaining), ("t", ceil_secs(p.reset_after))],
        );
    }
    field_value(list)
}

/// One member of a rate-limit List: the policy's name as an sf-string, with integer
/// parameters. Names are `[A-Za-z0-9._-]` (the runtime refuses others), always valid
/// sf-strings; a figure above the largest sf-integer (10^15 - 1) is sent as that.
fn member<const N: usize>(
    list: &mut ListSerializer<String>,
    name: &str,
    params: [(&'static str, u64); N],
) {
    let Ok(name) = StringRef::from_str(name) else {
        return;
    };
    let mut item = list.bare_item(name);
    for (key, value) in params {
        let value = Integer::try_from(value).unwrap_or(Integer::MAX);
        item = item.parameter(KeyRef::constant(key), value);
    }
}

/// The serialised List as a field value; an empty one when there are no members.
fn field_value(list: ListSerializer<String>) -> HeaderValue {
    list.finish()
        .and_then(|text| HeaderValue::from_str(&text).ok())
        .unwrap_or_else(|| HeaderValue::from_static(""))
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
///
/// Joined as bytes, not parsed and serialised again with `sfv`: the members already there may
/// come from an inner service we do not control, and a member we could not parse must still
/// reach the client as that service wrote it, next to ours.
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
    use distlock::ratelimit::Rate;

    use super::*;

    #[test]
    fn fields_are_sf_lists_of_named_items() {
        let policies = [
            Policy::gcra("api", Rate::per_minute(60).expect("rate")).expect("policy"),
            Policy::fixed_window("daily.v2", Rate::per_day(1000).expect("rate")).expect("policy"),
        ];
        assert_eq!(
            policy_field(&policies),
            r#""api";q=60;w=60, "daily.v2";q=1000;w=86400"#
        );
        assert_eq!(policy_field(&[]), "");
    }

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
