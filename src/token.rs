//! Lease tokens: 128 bits from a CSPRNG, unique per lease, followed by who asked and when
//! (see `holder.rs`).

use std::fmt;
use std::sync::Arc;

/// The secret that proves ownership of a lease. Never printed: `Debug` shows only that it is
/// redacted, and it has no `Display`. A clone is a reference count.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Token(Arc<str>);

impl Token {
    /// Draws a fresh token from `rand`'s thread-local CSPRNG (ChaCha, seeded and periodically
    /// reseeded from the operating system), which costs no system call per lease.
    ///
    /// # Panics
    /// If the operating system has no random source to seed it from, which no supported
    /// platform lacks; a predictable token would break the lock's safety, so there is no
    /// fallback.
    pub(crate) fn generate() -> Self {
        Self(secret(0).into())
    }

    /// A fresh token for a lease of `identity` (checked by `holder::check_identity`):
    /// `<secret>.<identity>.<unix ms now>`. The scripts compare it whole; the operators'
    /// reads show the part after the secret.
    pub(crate) fn mint(identity: &str) -> Self {
        // Built on the stack and copied once into its shared allocation: this runs per lease.
        let mut buf = [0u8; 512];
        let mut len = 0;
        let mut put = |bytes: &[u8]| {
            let end = len + bytes.len();
            if let Some(room) = buf.get_mut(len..end) {
                room.copy_from_slice(bytes);
            }
            len = end;
        };
        put(&secret_hex());
        put(b".");
        put(identity.as_bytes());
        put(b".");
        let millis = u64::try_from(crate::holder::now_millis()).unwrap_or(u64::MAX);
        let mut digits = [0u8; 20];
        put(crate::digits::decimal(millis, &mut digits));
        match buf.get(..len).map(std::str::from_utf8) {
            Some(Ok(token)) => Self(token.into()),
            // An identity too long for the buffer (it is checked far shorter than that).
            _ => Self(format!("{}.{identity}.{millis}", secret(0)).into()),
        }
    }

    /// The token a lock key holds, read back from the store (operators' force unlock).
    pub(crate) fn from_stored(token: &str) -> Self {
        Self(token.into())
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// 32 hex digits from the CSPRNG.
fn secret_hex() -> [u8; 32] {
    let bytes: [u8; 16] = rand::random();
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = [0u8; 32];
    for (i, b) in bytes.into_iter().enumerate() {
        hex[2 * i] = DIGITS[usize::from(b >> 4)];
        hex[2 * i + 1] = DIGITS[usize::from(b & 0xf)];
    }
    hex
}

/// 32 hex digits from the CSPRNG, with room for `extra` more bytes.
fn secret(extra: usize) -> String {
    let bytes: [u8; 16] = rand::random();
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(32 + extra);
    for b in bytes {
        hex.push(char::from(DIGITS[usize::from(b >> 4)]));
        hex.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    hex
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn a_million_tokens_are_128_bit_hex_and_unique() {
        let mut seen = HashSet::with_capacity(1_000_000);
        for _ in 0..1_000_000 {
            let t = Token::generate();
            assert_eq!(t.as_str().len(), 32);
            assert!(t.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
            assert!(seen.insert(t.0));
        }
    }

    #[test]
    fn a_minted_token_names_its_holder_after_a_fresh_secret() {
        let a = Token::mint("worker/7");
        let b = Token::mint("worker/7");
        assert_ne!(a, b);
        assert!(a.as_str()[..32].bytes().all(|b| b.is_ascii_hexdigit()));
        let holder = crate::holder::parse_token(a.as_str()).unwrap();
        assert_eq!(holder.identity, "worker/7");
        let age = std::time::SystemTime::now()
            .duration_since(holder.since)
            .unwrap();
        assert!(age < std::time::Duration::from_secs(60));
    }

    #[test]
    fn debug_hides_the_secret() {
        let t = Token::generate();
        let shown = format!("{t:?}");
        assert!(!shown.contains(t.as_str()));
    }
}
