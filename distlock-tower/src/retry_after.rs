//! `Retry-After`, shared by both layers: whole seconds, rounded up, never 0 (a client told
//! "0" would retry at once and be refused again). The rounding is the runtime's
//! ([`distlock::http::retry_after_secs`]), so a handler that answers from a `LockError` and
//! a layer that answers for it send the same value.

use std::time::Duration;

use http::HeaderValue;

/// Whole seconds, rounded up; saturates instead of overflowing. Zero stays zero: this is for
/// figures such as `t` of the `RateLimit` field, where 0 means "full now".
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// The `Retry-After` value for a wait of `wait`.
pub(crate) fn header(wait: Duration) -> HeaderValue {
    HeaderValue::from(distlock::http::retry_after_secs(wait))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_and_is_never_zero() {
        let secs = |d: Duration| header(d).to_str().map(str::to_owned).expect("ascii");
        assert_eq!(secs(Duration::ZERO), "1");
        assert_eq!(secs(Duration::from_millis(1)), "1");
        assert_eq!(secs(Duration::from_secs(1)), "1");
        assert_eq!(secs(Duration::from_millis(1001)), "2");
        assert_eq!(secs(Duration::from_secs(30)), "30");
        assert_eq!(secs(Duration::from_nanos(29_000_000_001)), "30");
        assert_eq!(secs(Duration::MAX), u64::MAX.to_string());
        // The rounding itself keeps zero as zero (the header is what refuses 0).
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_millis(2001)), 3);
    }
}
