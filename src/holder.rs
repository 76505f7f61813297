//! Who holds a lock, and since when: the identity a lease's token carries beside its secret.
//!
//! A lease's token is `<secret>.<identity>.<unix ms>`: 32 hex digits drawn from a CSPRNG,
//! the holder's identity, and the holder's wall clock in milliseconds when it asked for the
//! grant. The scripts compare tokens whole, exactly as before, so nothing they decide
//! changes; the operators' reads ([`Client::lock_state`](crate::Client::lock_state) and its
//! semaphore and read-write twins) show the identity and the time, never the secret. A
//! token written by a client that predates identities (the secret alone) shows no holder.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest holder identity, in bytes.
pub const MAX_HOLDER_IDENTITY_LEN: usize = 128;

/// Who holds a lease, as its token says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The identity the holder's client or builder gave (by default `<host>/<pid>`).
    pub identity: String,
    /// When the holder asked for the grant, by its own wall clock (to the millisecond). For
    /// a lock or a read-write lock that waited, the attempt that was granted; for a
    /// semaphore, or any lock on a Redlock quorum, when the acquire began (a waiter keeps
    /// its token there).
    pub since: SystemTime,
}

/// Checks an identity given by the caller: 1 to [`MAX_HOLDER_IDENTITY_LEN`] bytes of visible
/// ASCII (no spaces or control characters), so that it reads the same in every log.
pub(crate) fn check_identity(identity: &str) -> Result<(), String> {
    if identity.is_empty() || identity.len() > MAX_HOLDER_IDENTITY_LEN {
        return Err(format!(
            "a holder identity must be 1 to {MAX_HOLDER_IDENTITY_LEN} bytes, not {}",
            identity.len()
        ));
    }
    if let Some(c) = identity.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(format!(
            "a holder identity may hold only visible ASCII characters (no spaces or control \
             characters); {c:?} is not one"
        ));
    }
    Ok(())
}

/// The identity of this process when none is given: `<host>/<pid>`, with any character an
/// identity may not hold replaced by `_` and the host cut to fit.
pub(crate) fn default_identity() -> Arc<str> {
    let host = host_name().unwrap_or_else(|| "unknown-host".to_owned());
    let pid = std::process::id().to_string();
    let room = MAX_HOLDER_IDENTITY_LEN - pid.len() - 1;
    let host: String = host
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '_' })
        .take(room)
        .collect();
    let host = if host.is_empty() {
        "unknown-host".to_owned()
    } else {
        host
    };
    format!("{host}/{pid}").into()
}

/// The machine's name: `HOSTNAME` if the environment has it, else the kernel's (Linux).
fn host_name() -> Option<String> {
    let from_env = std::env::var("HOSTNAME").ok();
    let from_kernel = || std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    from_env
        .or_else(from_kernel)
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
}

/// The identity part and the time of a token, `None` for a bare secret or anything else.
pub(crate) fn parse_token(token: &str) -> Option<Holder> {
    let rest = token.get(32..)?.strip_prefix('.')?;
    let (identity, millis) = rest.rsplit_once('.')?;
    if identity.is_empty() || !millis.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let since = UNIX_EPOCH.checked_add(Duration::from_millis(millis.parse().ok()?))?;
    Some(Holder {
        identity: identity.to_owned(),
        since,
    })
}

/// The wall clock in milliseconds since the Unix epoch (0 for a clock before it).
pub(crate) fn now_millis() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_checked() {
        assert!(check_identity("worker-3").is_ok());
        assert!(check_identity("host.example/1234:a@b").is_ok());
        assert!(check_identity(&"x".repeat(MAX_HOLDER_IDENTITY_LEN)).is_ok());
        assert!(check_identity("").is_err());
        assert!(check_identity(&"x".repeat(MAX_HOLDER_IDENTITY_LEN + 1)).is_err());
        assert!(check_identity("two words").is_err());
        assert!(check_identity("line\nbreak").is_err());
        assert!(check_identity("héllo").is_err());
    }

    #[test]
    fn the_default_identity_is_host_and_pid_and_valid() {
        let id = default_identity();
        check_identity(&id).unwrap();
        assert!(id.ends_with(&format!("/{}", std::process::id())));
    }

    #[test]
    fn a_token_parses_back_to_its_holder() {
        let secret = "0123456789abcdef0123456789abcdef";
        let holder = parse_token(&format!("{secret}.web.1/42.1700000000123")).unwrap();
        assert_eq!(holder.identity, "web.1/42");
        assert_eq!(
            holder.since,
            UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)
        );
        assert_eq!(parse_token(secret), None);
        assert_eq!(parse_token(&format!("{secret}.x")), None);
        assert_eq!(parse_token(&format!("{secret}..5")), None);
        assert_eq!(parse_token(&format!("{secret}.x.5a")), None);
        assert_eq!(parse_token("short"), None);
        assert_eq!(
            parse_token(&format!("{secret}.x.99999999999999999999999")),
            None
        );
    }
}
