//! What this library writes to logs about the identifiers it is given.
//!
//! Rate-limit subjects can be API keys or IP addresses, and idempotency keys can be bearer
//! secrets of their own; lock and semaphore keys taken from requests are the caller's text.
//! Logs travel further than the store does, so the layers and the limiters write such an
//! identifier **redacted** by default: `#` and 8 hex digits of a keyed hash (SipHash with a
//! key drawn at random when the process starts). The same identifier gets the same digits
//! within one process, so its lines can be followed, and nothing outside the process can
//! turn them back into it (even for a guessable one such as an IP address).
//!
//! [`show_identifiers(true)`](show_identifiers) writes them whole instead (debug-escaped, so
//! a newline in one cannot forge a line): for development, or a service whose identifiers
//! are not secret.
//!
//! ```
//! distlock::logging::show_identifiers(false); // the default
//! let shown = distlock::logging::redacted("api-key-5f3a").to_string();
//! assert!(shown.starts_with('#') && shown.len() == 9);
//! assert_eq!(shown, distlock::logging::redacted("api-key-5f3a").to_string());
//! ```

use std::fmt;
use std::hash::{BuildHasher as _, Hasher as _, RandomState};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

static CLEAR: AtomicBool = AtomicBool::new(false);

/// The process's hash key: drawn at random once.
static KEY: LazyLock<RandomState> = LazyLock::new(RandomState::new);

/// Whether identifiers are written whole (`true`) or redacted (`false`, the default), for
/// the whole process.
pub fn show_identifiers(clear: bool) {
    CLEAR.store(clear, Ordering::Relaxed);
}

/// Whether identifiers are written whole (see [`show_identifiers`]).
#[must_use]
pub fn identifiers_shown() -> bool {
    CLEAR.load(Ordering::Relaxed)
}

/// `id` as the logs show it: redacted, or whole and escaped (see the [module docs](self)).
#[must_use]
pub fn redacted(id: &str) -> Redacted<'_> {
    Redacted(id)
}

/// An identifier as the logs show it; from [`redacted`].
#[derive(Clone, Copy)]
pub struct Redacted<'a>(&'a str);

impl fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if identifiers_shown() {
            return write!(f, "{:?}", self.0);
        }
        let mut hasher = KEY.build_hasher();
        hasher.write(self.0.as_bytes());
        // 32 bits: enough to tell identifiers apart in one process's logs.
        write!(f, "#{:08x}", hasher.finish() >> 32)
    }
}

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_by_default_whole_and_escaped_on_request() {
        let secret = "sk_live_abc\nforged line";
        let shown = redacted(secret).to_string();
        assert!(!shown.contains("sk_live"), "{shown}");
        assert_eq!(shown.len(), 9);
        assert_ne!(shown, redacted("sk_live_abd").to_string());
        show_identifiers(true);
        let whole = redacted(secret).to_string();
        show_identifiers(false);
        assert_eq!(whole, "\"sk_live_abc\\nforged line\"");
    }
}
