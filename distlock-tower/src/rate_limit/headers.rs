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

use distlock::ratelimit::{Algorithm, Decision, Policy};
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

/// The parameter that says how many units may go back to back, when that is not `q`: the
/// draft asks for a vendor prefix on parameters of one implementation's own.
pub const BURST_PARAMETER: &str = "distlock-burst";

use crate::retry_after::ceil_secs;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The longest window, in seconds, in which a rate is stated exactly when its period is not
/// a whole number of seconds (unless the period itself is longer).
const MAX_EXACT_WINDOW_SECS: u128 = 60;

/// How far below the written rate the limiter's real one may be (its spacing is rounded up
/// to a whole microsecond) before the field states the real one instead: a part in a
/// hundred, reached only above a few hundred thousand requests per second.
const SPACING_TOLERANCE: f64 = 0.01;

/// One policy as `RateLimit-Policy` states it: `quota` units per `window` seconds, and at
/// most `burst` of them back to back. See [`advertise`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Advertised {
    /// `q`: units per window, the policy's sustained rate.
    pub quota: u64,
    /// `w`: the window, in whole seconds (at least 1).
    pub window: u64,
    /// How many units may go back to back after a quiet spell: the burst of a GCRA or token
    /// bucket policy, the count of a window policy. Sent as `distlock-burst` when it is not
    /// `quota`.
    pub burst: u64,
}

/// What `RateLimit-Policy` says of `policy`: its real rate as a quota per whole-second
/// window, and its burst.
///
/// * `q`/`w` is the sustained rate, `count` per `period`, over the shortest whole number of
///   seconds that holds a whole number of periods: `100/s` is `q=100;w=1`, `10 per 1500ms`
///   is `q=20;w=3`, `5 per 100ms` is `q=50;w=1`, `1000/day` is `q=1000;w=86400`. When that
///   window would be longer than a minute (and than the period), as for a period of 333 ms,
///   `w` is the period rounded up to whole seconds and `q` what fits in it, rounded down:
///   never more than the policy allows, less by under one unit per window.
/// * GCRA and the token bucket space requests by the period over the count rounded up to a
///   whole microsecond; when that makes the real rate more than 1% below the written one
///   (hundreds of thousands per second), `q` is the real count per window.
/// * `burst`, how many may go at once after a quiet spell (a GCRA or token-bucket burst, a
///   window policy's count), is sent as `distlock-burst` when it differs from `q`: a burst
///   below the count, or a period under a second. `100/s burst 1` is
///   `q=100;w=1;distlock-burst=1`, not `q=1;w=1`.
///
/// ```
/// use distlock::ratelimit::{Policy, Rate};
/// use distlock_tower::rate_limit::headers::advertise;
///
/// # fn main() -> Result<(), distlock::InvalidPolicy> {
/// let fast = advertise(&Policy::gcra("fast", Rate::per_second(100)?.burst(1)?)?);
/// assert_eq!((fast.quota, fast.window, fast.burst), (100, 1, 1));
/// let window = advertise(&Policy::fixed_window("w", Rate::per(10, std::time::Duration::from_millis(1500))?)?);
/// assert_eq!((window.quota, window.window, window.burst), (20, 3, 10));
/// # Ok(()) }
/// ```
#[must_use]
pub fn advertise(policy: &Policy) -> Advertised {
    let rate = policy.rate();
    let count = u128::from(rate.count());
    let period_ns = rate.period().as_nanos().max(1);
    let periods_in_second = gcd(period_ns, NANOS_PER_SEC);
    let exact_window = period_ns / periods_in_second;
    let period_secs = period_ns.div_ceil(NANOS_PER_SEC).max(1);
    let (mut quota, window) = if exact_window <= MAX_EXACT_WINDOW_SECS.max(period_secs) {
        (
            count * (exact_window * NANOS_PER_SEC / period_ns),
            exact_window,
        )
    } else {
        (count * period_secs * NANOS_PER_SEC / period_ns, period_secs)
    };
    if matches!(policy.algorithm(), Algorithm::Gcra | Algorithm::TokenBucket) {
        let spacing_ns = rate.emission_interval().as_nanos().max(1);
        let real = window * NANOS_PER_SEC / spacing_ns;
        #[allow(clippy::cast_precision_loss)] // a ratio of two rates, compared to 1%
        let (real_exact, written) = (
            (window * NANOS_PER_SEC) as f64 / spacing_ns as f64,
            quota as f64,
        );
        if real_exact < written * (1.0 - SPACING_TOLERANCE) {
            quota = real.max(1);
        }
    }
    Advertised {
        quota: saturate(quota),
        window: saturate(window),
        burst: u64::from(policy.limit()),
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn saturate(n: u128) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// `RateLimit-Policy` for a limiter's policies, but the `hidden` ones.
pub(crate) fn policy_field(policies: &[Policy], hidden: &[String]) -> HeaderValue {
    let mut list = ListSerializer::new();
    for p in policies.iter().filter(|p| !is_hidden(hidden, p.name())) {
        let advertised = advertise(p);
        let burst = (advertised.burst != advertised.quota).then_some(advertised.burst);
        member(
            &mut list,
            p.name(),
            [("q", advertised.quota), ("w", advertised.window)]
                .into_iter()
                .chain(burst.map(|burst| (BURST_PARAMETER, burst))),
        );
    }
    field_value(list)
}

/// Whether `name` is among `hidden`.
pub(crate) fn is_hidden(hidden: &[String], name: &str) -> bool {
    hidden.iter().any(|h| h == name)
}

/// `RateLimit` for a decision, without the `hidden` policies.
pub(crate) fn ratelimit_field(decision: &Decision, hidden: &[String]) -> HeaderValue {
    let mut list = ListSerializer::new();
    for p in decision
        .policies
        .iter()
        .filter(|p| !is_hidden(hidden, &p.policy))
    {
        member(
            &mut list,
            &p.policy,
            [("r", p.remaining), ("t", ceil_secs(p.reset_after))].into_iter(),
        );
    }
    field_value(list)
}

/// One member of a rate-limit List: the policy's name as an sf-string, with integer
/// parameters. Names are `[A-Za-z0-9._-]` (the runtime refuses others), always valid
/// sf-strings; a figure above the largest sf-integer (10^15 - 1) is sent as that.
fn member(
    list: &mut ListSerializer<String>,
    name: &str,
    params: impl Iterator<Item = (&'static str, u64)>,
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
    hidden: &[String],
) {
    if decision.origin == distlock::ratelimit::Origin::FailOpen {
        return;
    }
    if style.ietf {
        append_members(headers, RATELIMIT_POLICY, policy);
        append_members(headers, RATELIMIT, &ratelimit_field(decision, hidden));
    }
    if style.legacy {
        // One value each, so they can name one policy only: the binding one, or, when it is
        // hidden, the visible one with the fewest left.
        let binding = if is_hidden(hidden, &decision.policy) {
            decision
                .policies
                .iter()
                .filter(|p| !is_hidden(hidden, &p.policy))
                .min_by_key(|p| p.remaining)
                .map(|p| (p.limit, p.remaining, p.reset_after))
        } else {
            Some((decision.limit, decision.remaining, decision.reset_after))
        };
        // A layer with as many left as the one already there (say, the inner layer that
        // refused) keeps it.
        let theirs = headers
            .get(X_RATELIMIT_REMAINING)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if let Some((limit, remaining, reset_after)) = binding
            && theirs.is_none_or(|theirs| remaining < theirs)
        {
            headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(limit));
            headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(remaining));
            headers.insert(X_RATELIMIT_RESET, HeaderValue::from(ceil_secs(reset_after)));
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
    use std::time::Duration;

    use distlock::ratelimit::Rate;

    use super::*;

    const ALGORITHMS: [Algorithm; 5] = [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ];

    fn has_burst(algorithm: Algorithm) -> bool {
        matches!(algorithm, Algorithm::Gcra | Algorithm::TokenBucket)
    }

    fn rate(count: u32, period: Duration, burst: Option<u32>) -> Rate {
        let rate = Rate::per(count, period).expect("valid rate");
        match burst {
            Some(burst) => rate.burst(burst).expect("valid burst"),
            None => rate,
        }
    }

    const fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    /// Boundary rates for every algorithm: `(count, period, burst)`, the burst for the two
    /// algorithms that take one.
    const BOUNDARY_RATES: [(u32, Duration, Option<u32>); 12] = [
        // The issue's example: 100/s, one at a time.
        (100, ms(1000), Some(1)),
        // The shortest period, and one per millisecond.
        (1, ms(1), None),
        (5, ms(100), None),
        (5, ms(100), Some(1)),
        // A period that is not a whole number of seconds, above and below one.
        (10, ms(1500), None),
        (1, ms(1500), None),
        (3, ms(700), None),
        // No whole-second window of at most a minute holds whole periods.
        (1, ms(333), None),
        (7, ms(999), None),
        // Whole seconds, a burst below and above the count.
        (60, ms(60_000), Some(2)),
        (10, ms(1000), Some(50)),
        // Spacing rounded up to a microsecond: 333 334 µs.
        (3, ms(1000), None),
    ];

    /// The fields a layer sends, parameter by parameter.
    #[test]
    fn the_policy_field_states_the_real_rate_and_the_burst() {
        let table: [(Algorithm, u32, Duration, Option<u32>, &str); 16] = [
            (
                Algorithm::Gcra,
                100,
                ms(1000),
                Some(1),
                "q=100;w=1;distlock-burst=1",
            ),
            (Algorithm::Gcra, 100, ms(1000), None, "q=100;w=1"),
            (
                Algorithm::TokenBucket,
                60,
                ms(60_000),
                Some(2),
                "q=60;w=60;distlock-burst=2",
            ),
            (
                Algorithm::Gcra,
                10,
                ms(1000),
                Some(50),
                "q=10;w=1;distlock-burst=50",
            ),
            (
                Algorithm::FixedWindow,
                5,
                ms(100),
                None,
                "q=50;w=1;distlock-burst=5",
            ),
            (
                Algorithm::SlidingWindow,
                10,
                ms(1500),
                None,
                "q=20;w=3;distlock-burst=10",
            ),
            (
                Algorithm::SlidingLog,
                1,
                ms(1),
                None,
                "q=1000;w=1;distlock-burst=1",
            ),
            (
                Algorithm::SlidingLog,
                1,
                ms(7),
                None,
                "q=1000;w=7;distlock-burst=1",
            ),
            (
                Algorithm::FixedWindow,
                1,
                ms(333),
                None,
                "q=3;w=1;distlock-burst=1",
            ),
            (Algorithm::FixedWindow, 5, ms(61_500), None, "q=5;w=62"),
            (
                Algorithm::TokenBucket,
                1,
                ms(1500),
                None,
                "q=2;w=3;distlock-burst=1",
            ),
            (Algorithm::Gcra, 3, ms(1000), None, "q=3;w=1"),
            (
                Algorithm::FixedWindow,
                1000,
                ms(86_400_000),
                None,
                "q=1000;w=86400",
            ),
            (
                Algorithm::FixedWindow,
                u32::MAX,
                ms(31_622_400_000),
                None,
                "q=4294967295;w=31622400",
            ),
            // 1000 per 1.5 ms: spaced 2 µs, not 1.5, so 500 000 a second are real.
            (
                Algorithm::Gcra,
                1000,
                Duration::from_micros(1500),
                None,
                "q=1500000;w=3;distlock-burst=1000",
            ),
            (
                Algorithm::Gcra,
                1000,
                ms(1),
                None,
                "q=1000000;w=1;distlock-burst=1000",
            ),
        ];
        for (algorithm, count, period, burst, want) in table {
            let policy = Policy::new("p", algorithm, rate(count, period, burst)).expect("policy");
            let field = policy_field(std::slice::from_ref(&policy), &[]);
            assert_eq!(field, format!("\"p\";{want}").as_str(), "{policy}");
        }
    }

    /// One subject of `policy`, alone on an in-memory store, checked at the times we choose.
    struct Subject {
        limiter: distlock::ratelimit::RateLimiter,
        name: String,
    }

    impl Subject {
        fn new(policy: &Policy, name: &str) -> Self {
            let limiter = distlock::Client::in_memory()
                .rate_limiter(policy.clone())
                .build()
                .expect("valid limiter");
            Self {
                limiter,
                name: name.to_owned(),
            }
        }

        async fn check(&self, at_us: u64) -> distlock::ratelimit::Decision {
            self.limiter
                .__check_at(&self.name, 1, at_us)
                .await
                .expect("in memory")
        }
    }

    /// A start time on every window boundary of the rates above (whole milliseconds).
    fn start_us(period: Duration) -> u64 {
        let period_us = u64::try_from(period.as_micros()).expect("period");
        let t = 1_700_000_000_000_000_u64;
        t - t % period_us + period_us
    }

    /// What the fields promise holds for every algorithm and boundary rate, in the store's own
    /// decisions at simulated times: `distlock-burst` (or `q`) requests pass back to back on a
    /// fresh subject and one more does not, and a client that sends as fast as it is let
    /// through gets `q` per `w` over many windows, give or take the burst. With the fields as
    /// they were (`q` the burst, `w` the time to refill it), `100/s burst 1` would have
    /// promised 1 a second to a client that gets 100.
    #[tokio::test]
    async fn the_fields_match_what_the_limiter_lets_through() {
        for algorithm in ALGORITHMS {
            for (count, period, burst) in BOUNDARY_RATES {
                let burst = burst.filter(|_| has_burst(algorithm));
                let policy =
                    Policy::new("p", algorithm, rate(count, period, burst)).expect("policy");
                let advertised = advertise(&policy);
                let (q, w, b) = (advertised.quota, advertised.window, advertised.burst);
                let what = format!("{algorithm} {policy}: q={q} w={w} burst={b}");
                let t0 = start_us(period);

                // Back to back on a fresh subject: exactly the burst.
                let subject = Subject::new(&policy, "burst");
                for i in 0..b {
                    assert!(subject.check(t0).await.allowed, "{what}: request {i}");
                }
                assert!(!subject.check(t0).await.allowed, "{what}: one more");

                // As fast as let through, over whole windows (or, at very high rates, a part
                // of one): q per w.
                let span_us = (20 * w * 1_000_000).min(w * 1_000_000 * 20_000 / q);
                let subject = Subject::new(&policy, "greedy");
                let (mut t, mut passed, mut calls) = (t0, 0_u64, 0_u64);
                while t < t0 + span_us {
                    calls += 1;
                    assert!(calls < 1_000_000, "{what}: the client never got through");
                    let decision = subject.check(t).await;
                    if decision.allowed {
                        passed += 1;
                    } else {
                        let wait = u64::try_from(decision.retry_after.as_micros()).expect("wait");
                        t += wait.max(1);
                    }
                }
                #[allow(clippy::cast_precision_loss)]
                let promised = q as f64 * span_us as f64 / (w as f64 * 1e6);
                #[allow(clippy::cast_precision_loss)]
                let (passed_f, b_f) = (passed as f64, b as f64);
                // Never more than promised plus the burst (and, where `q` was rounded down,
                // under one more per window): a larger count means `q` understates the rate.
                let windows = span_us.div_ceil(w * 1_000_000);
                #[allow(clippy::cast_precision_loss)]
                let upper = promised + b_f + windows as f64 + 1.0;
                assert!(
                    passed_f <= upper,
                    "{what}: {passed} passed, {promised} promised"
                );
                // Never fewer than promised, but for the sliding window counter's rounding
                // (under one per period) and the spacing rounded up to a microsecond.
                let periods = span_us.div_ceil(u64::try_from(period.as_micros()).expect("period"));
                #[allow(clippy::cast_precision_loss)]
                let slack = match algorithm {
                    Algorithm::SlidingWindow => periods as f64 + 1.0,
                    _ => promised * SPACING_TOLERANCE + 1.0,
                };
                assert!(
                    passed_f >= promised - slack,
                    "{what}: {passed} passed, {promised} promised"
                );
            }
        }
    }

    /// `RateLimit` for every algorithm and boundary rate: `r` more requests pass back to back
    /// (and not one more), and after `t` seconds the policy is full again, its whole burst
    /// passing back to back.
    #[tokio::test]
    async fn the_state_field_says_what_is_left_and_when_it_is_full() {
        for algorithm in ALGORITHMS {
            for (count, period, burst) in BOUNDARY_RATES {
                let burst = burst.filter(|_| has_burst(algorithm));
                let policy =
                    Policy::new("p", algorithm, rate(count, period, burst)).expect("policy");
                let b = u64::from(policy.limit());
                let used = b.div_ceil(2);
                let t0 = start_us(period);
                let what = format!("{algorithm} {policy}, {used} used");
                for (name, then) in [("left", None), ("full", Some(()))] {
                    let subject = Subject::new(&policy, name);
                    let mut last = None;
                    for _ in 0..used {
                        last = Some(subject.check(t0).await);
                    }
                    let decision = last.expect("at least one request");
                    let member = ratelimit_field(&decision, &[]);
                    let member = member.to_str().expect("ASCII");
                    let (r, t) = (decision.remaining, ceil_secs(decision.reset_after));
                    assert_eq!(member, format!("\"p\";r={r};t={t}"), "{what}");
                    assert_eq!(r, b - used, "{what}");
                    let at = match then {
                        None => t0,
                        Some(()) => t0 + t * 1_000_000,
                    };
                    let expected = if then.is_none() { r } else { b };
                    for i in 0..expected {
                        assert!(subject.check(at).await.allowed, "{what}: {name} {i}");
                    }
                    assert!(!subject.check(at).await.allowed, "{what}: {name}, one more");
                }
            }
        }
    }

    #[test]
    fn fields_are_sf_lists_of_named_items() {
        let policies = [
            Policy::gcra("api", Rate::per_minute(60).expect("rate")).expect("policy"),
            Policy::fixed_window("daily.v2", Rate::per_day(1000).expect("rate")).expect("policy"),
        ];
        assert_eq!(
            policy_field(&policies, &[]),
            r#""api";q=60;w=60, "daily.v2";q=1000;w=86400"#
        );
        assert_eq!(policy_field(&[], &[]), "");
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
