//! Idempotency keys: run a request once, answer its duplicates with the stored response.
//!
//! The runtime side of `distlock-tower`'s `IdempotencyLayer` (the IETF draft "The
//! Idempotency-Key HTTP Header Field"), usable on its own by code that is not HTTP. A key's
//! first request takes a **claim** (a lock, with its watchdog) and runs; its outcome, a
//! [`Record`], is stored with a ttl, **only while the claim still holds**; later requests with
//! the key get the record back. A request with the key that comes while the first runs is told
//! [`Begin::InFlight`] (after the handle's [`wait`](Idempotency::wait), if it has one), and a
//! request whose fingerprint (what identifies its content: for HTTP, method, path and a digest
//! of the body) differs from the one the record was stored with is told [`Begin::Mismatch`].
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use distlock::idempotency::{Begin, Record};
//!
//! let client = distlock::Client::in_memory(); // or Client::connect("redis://...").await?
//! let payments = client.idempotency("payments")?;
//! let ttl = Duration::from_secs(24 * 3600);
//!
//! let Begin::Run(claim) = payments.begin("key-1", b"charge 10 EUR").await? else {
//!     unreachable!("the first request with a key runs");
//! };
//! // ...charge the card, then keep what was answered:
//! let stored = payments.complete(claim, &Record::new(201, vec![], b"charged".to_vec()), ttl).await?;
//! assert!(stored);
//!
//! // A retry of the same request gets the record; another request with the key does not.
//! assert!(matches!(payments.begin("key-1", b"charge 10 EUR").await?,
//!     Begin::Replay(record) if record.status == 201 && record.body == b"charged"));
//! assert!(matches!(payments.begin("key-1", b"charge 99 EUR").await?, Begin::Mismatch));
//! # Ok(()) }
//! ```
//!
//! # What is decided
//!
//! * **The claim is a lock** named `idempotency/<namespace>/<key>`: held with a watchdog while
//!   the first request runs, expiring after its ttl if the process dies. Keep your own lock
//!   names out of that pattern.
//! * **Nothing is stored for a request that did not finish**: dropping a [`Claim`] (or
//!   [`Claim::release`]) frees the key without a record, and the next request with the key
//!   runs. A claim whose lease was lost (it expired; another request may have claimed the key
//!   since) stores nothing either: [`complete`](Idempotency::complete) answers `false`.
//! * **Key layout.** The record is `<prefix>:idem:{<name>}` beside the claim's
//!   `<prefix>:lock:{<name>}`, under the same hash tag, so that storing is one single-slot
//!   script on a single primary, Sentinel or a Cluster. The record is one string (an encoding
//!   of the fingerprint, the status, the headers and the body).
//! * **Not on a Redlock quorum**: [`Client::idempotency`](crate::Client::idempotency) refuses it
//!   with [`IdempotencyError::UnsupportedStore`]. In memory, records are shared by the clones
//!   of the client, like its locks.

use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::error::{InvalidName, LockError, StoreError};
use crate::lock::{Lease, MAX_TTL, MIN_TTL};
use crate::store::{Capability, RecordCall, RecordReply};

/// The longest namespace [`Client::idempotency`](crate::Client::idempotency) accepts, in bytes.
pub const MAX_NAMESPACE_LEN: usize = 64;
/// The longest fingerprint, in bytes (a SHA-512 digest fits).
pub const MAX_FINGERPRINT_LEN: usize = 64;
/// The largest encoded record [`Idempotency::complete`] stores (64 MiB).
pub const MAX_RECORD_LEN: usize = 64 << 20;
/// The longest record ttl (366 days).
pub const MAX_RECORD_TTL: Duration = Duration::from_secs(366 * 24 * 3600);
/// The claim's ttl unless [`Idempotency::lease_ttl`] sets another (renewed by the watchdog
/// while the request runs).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// What an idempotency handle could not do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdempotencyError {
    /// The key (or the namespace with it) cannot be a lock name: empty, or too long.
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    /// A setting or argument out of range (a ttl, a namespace, a fingerprint, a record too
    /// large).
    #[error("{reason}")]
    InvalidInput {
        /// What is wrong.
        reason: String,
    },
    /// The client's store keeps no records (a Redlock quorum).
    #[error("{reason}")]
    UnsupportedStore {
        /// Why, and what to use instead.
        reason: &'static str,
    },
    /// The store failed or did not answer in time.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Taking the claim failed for another reason than a busy key.
    #[error(transparent)]
    Lock(LockError),
}

impl From<LockError> for IdempotencyError {
    fn from(err: LockError) -> Self {
        match err {
            LockError::Store(err) => Self::Store(err),
            LockError::InvalidName(err) => Self::InvalidName(err),
            other => Self::Lock(other),
        }
    }
}

/// A response (or any outcome) kept for an idempotency key, and given back to its duplicates.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// The status (an HTTP status code for the layer; any number for other uses).
    pub status: u16,
    /// Header names (lower-case for HTTP) and values, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Record {
    /// A record of `status`, `headers` and `body`.
    #[must_use]
    pub fn new(status: u16, headers: Vec<(String, Vec<u8>)>, body: Vec<u8>) -> Self {
        Self {
            status,
            headers,
            body,
        }
    }
}

/// What [`Idempotency::begin`] found for a key.
#[derive(Debug)]
#[non_exhaustive]
pub enum Begin {
    /// The key is new (or its first request did not finish): run the request under this
    /// claim, then [`complete`](Idempotency::complete) it, or drop it to store nothing.
    Run(Claim),
    /// Another request with the key is running (after the handle's wait, if any).
    InFlight,
    /// The key's request finished: this is what it answered.
    Replay(Record),
    /// The key was used for a request with another fingerprint.
    Mismatch,
}

/// The right to run a key's first request; from [`Begin::Run`]. Dropping it frees the key
/// without a record (in the background); [`release`](Self::release) does it now.
#[derive(Debug)]
#[must_use = "dropping a claim frees its key at once, storing nothing"]
pub struct Claim {
    lease: Lease,
    record: String,
    fingerprint: Vec<u8>,
}

impl Claim {
    /// The claim's lease (its fence, its lost signal).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Frees the key without storing anything: the next request with it runs.
    ///
    /// # Errors
    /// [`IdempotencyError::Store`] when the release could not be sent (the claim then
    /// expires after its ttl).
    pub async fn release(self) -> Result<(), IdempotencyError> {
        self.lease.release().await?;
        Ok(())
    }
}

/// Idempotency keys of one namespace; from [`Client::idempotency`](crate::Client::idempotency).
/// Cheap to clone.
#[derive(Clone, Debug)]
pub struct Idempotency {
    client: Client,
    namespace: Arc<str>,
    lease_ttl: Duration,
    wait: Duration,
}

impl Idempotency {
    pub(crate) fn new(client: Client, namespace: String) -> Result<Self, IdempotencyError> {
        if let Err(refused) = client.core().supports(Capability::IdempotencyRecords) {
            return Err(IdempotencyError::UnsupportedStore {
                reason: refused.reason,
            });
        }
        let valid = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
        if namespace.is_empty()
            || namespace.len() > MAX_NAMESPACE_LEN
            || !namespace.bytes().all(valid)
        {
            return Err(IdempotencyError::InvalidInput {
                reason: format!(
                    "namespace {namespace:?} must be 1 to {MAX_NAMESPACE_LEN} characters of \
                     [A-Za-z0-9._-]"
                ),
            });
        }
        Ok(Self {
            client,
            namespace: namespace.into(),
            lease_ttl: DEFAULT_LEASE_TTL,
            wait: Duration::ZERO,
        })
    }

    /// The namespace.
    #[must_use]
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The claim's ttl (default [`DEFAULT_LEASE_TTL`]); the watchdog renews it while the
    /// request runs, so it bounds how long a key stays claimed after its process died.
    ///
    /// # Errors
    /// [`IdempotencyError::InvalidInput`] outside [`MIN_TTL`]`..=`[`MAX_TTL`].
    pub fn lease_ttl(mut self, ttl: Duration) -> Result<Self, IdempotencyError> {
        if !(MIN_TTL..=MAX_TTL).contains(&ttl) {
            return Err(IdempotencyError::InvalidInput {
                reason: format!("a lease ttl of {ttl:?} is outside {MIN_TTL:?}..={MAX_TTL:?}"),
            });
        }
        self.lease_ttl = ttl;
        Ok(self)
    }

    /// How long [`begin`](Self::begin) waits for a running request with the same key to
    /// finish before it answers [`Begin::InFlight`]; default zero (answer at once).
    /// `Duration::MAX` waits for as long as it takes.
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The lock name that claims `key`, and the record's key.
    fn names(&self, key: &str) -> Result<(String, String), IdempotencyError> {
        if key.is_empty() {
            return Err(InvalidName::Empty.into());
        }
        let name = format!("idempotency/{}/{key}", self.namespace);
        let record = crate::keys::idempotency_record(self.client.core().prefix(), &name)?;
        Ok((name, record))
    }

    /// What to do with a request carrying `key` whose content is identified by
    /// `fingerprint` (at most [`MAX_FINGERPRINT_LEN`] bytes; a digest): run it
    /// ([`Begin::Run`]), or answer it with [`Begin::Replay`], [`Begin::Mismatch`] or
    /// [`Begin::InFlight`].
    ///
    /// # Errors
    /// [`IdempotencyError::InvalidName`] for an empty key or one too long for a lock name;
    /// [`IdempotencyError::InvalidInput`] for an over-long fingerprint;
    /// [`IdempotencyError::Store`].
    pub async fn begin(&self, key: &str, fingerprint: &[u8]) -> Result<Begin, IdempotencyError> {
        if fingerprint.len() > MAX_FINGERPRINT_LEN {
            return Err(IdempotencyError::InvalidInput {
                reason: format!(
                    "a fingerprint of {} bytes is over the limit of {MAX_FINGERPRINT_LEN}",
                    fingerprint.len()
                ),
            });
        }
        let (name, record) = self.names(key)?;
        if let Some(found) = self.read(&record, fingerprint).await? {
            return Ok(found);
        }
        let acquired = self
            .client
            .lock(&name)
            .ttl(self.lease_ttl)
            .wait(self.wait)
            .acquire()
            .await;
        let lease = match acquired {
            Ok(lease) => lease,
            Err(LockError::Busy { .. } | LockError::Timeout { .. }) => {
                return Ok(Begin::InFlight);
            }
            Err(err) => return Err(err.into()),
        };
        // The first request may have finished between the read and the grant.
        match self.read(&record, fingerprint).await {
            Ok(Some(found)) => {
                let _ = lease.release().await;
                Ok(found)
            }
            Ok(None) => Ok(Begin::Run(Claim {
                lease,
                record,
                fingerprint: fingerprint.to_vec(),
            })),
            Err(err) => Err(err),
        }
    }

    /// The record under `record`, as an answer to a request with `fingerprint`.
    async fn read(
        &self,
        record: &str,
        fingerprint: &[u8],
    ) -> Result<Option<Begin>, IdempotencyError> {
        let call = RecordCall::Get { record };
        let RecordReply::Record(stored) = self.client.core().store().idempotency(&call).await?
        else {
            return Err(mismatched_reply());
        };
        let Some(stored) = stored else {
            return Ok(None);
        };
        let (stored_fingerprint, found) = decode(&stored)?;
        Ok(Some(if stored_fingerprint == fingerprint {
            Begin::Replay(found)
        } else {
            Begin::Mismatch
        }))
    }

    /// Stores `record` for the claim's key, with `ttl`, if the claim still holds; then frees
    /// the claim. `false`: the claim was lost (it expired, and the key may have been claimed
    /// again), nothing was stored.
    ///
    /// # Errors
    /// [`IdempotencyError::InvalidInput`] for a ttl outside 1 ms..=[`MAX_RECORD_TTL`] or a
    /// record over [`MAX_RECORD_LEN`] (nothing is stored, the claim is freed);
    /// [`IdempotencyError::Store`].
    pub async fn complete(
        &self,
        claim: Claim,
        record: &Record,
        ttl: Duration,
    ) -> Result<bool, IdempotencyError> {
        if ttl < Duration::from_millis(1) || ttl > MAX_RECORD_TTL {
            return Err(IdempotencyError::InvalidInput {
                reason: format!("a record ttl of {ttl:?} is outside 1ms..={MAX_RECORD_TTL:?}"),
            });
        }
        let value = encode(&claim.fingerprint, record)?;
        let state = &claim.lease.shared;
        let Some(lock) = state.lock_keys() else {
            return Err(mismatched_reply());
        };
        let call = RecordCall::Store {
            record: &claim.record,
            lock: &lock.lock,
            token: &state.token,
            ttl,
            value: &value,
        };
        let stored = self.client.core().store().idempotency(&call).await;
        // Stored or not, the key is free again: duplicates waiting for it read the record.
        let _ = claim.lease.release().await;
        match stored? {
            RecordReply::Stored(stored) => Ok(stored),
            RecordReply::Record(_) => Err(mismatched_reply()),
        }
    }
}

/// A backend answered a call with the reply of another kind (a bug).
fn mismatched_reply() -> IdempotencyError {
    IdempotencyError::Store(StoreError::Protocol {
        message: "an idempotency call was answered with the reply of another kind".to_owned(),
    })
}

/// The stored form: `DLI1`, the fingerprint (1-byte length), the status (2 bytes), the header
/// count (2 bytes), each header as a 2-byte name length, the name, a 4-byte value length, the
/// value; then the body, to the end. Integers are big-endian.
const MAGIC: &[u8; 4] = b"DLI1";

fn encode(fingerprint: &[u8], record: &Record) -> Result<Vec<u8>, IdempotencyError> {
    let too_large = |what: &str| IdempotencyError::InvalidInput {
        reason: format!("the record's {what} is too large to store"),
    };
    let fp_len = u8::try_from(fingerprint.len()).map_err(|_| too_large("fingerprint"))?;
    let count = u16::try_from(record.headers.len()).map_err(|_| too_large("header list"))?;
    let mut out = Vec::with_capacity(
        16 + fingerprint.len()
            + record.body.len()
            + record
                .headers
                .iter()
                .map(|(n, v)| n.len() + v.len() + 6)
                .sum::<usize>(),
    );
    out.extend_from_slice(MAGIC);
    out.push(fp_len);
    out.extend_from_slice(fingerprint);
    out.extend_from_slice(&record.status.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    for (name, value) in &record.headers {
        let n = u16::try_from(name.len()).map_err(|_| too_large("header name"))?;
        let v = u32::try_from(value.len()).map_err(|_| too_large("header value"))?;
        out.extend_from_slice(&n.to_be_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&v.to_be_bytes());
        out.extend_from_slice(value);
    }
    out.extend_from_slice(&record.body);
    if out.len() > MAX_RECORD_LEN {
        return Err(IdempotencyError::InvalidInput {
            reason: format!(
                "a record of {} bytes is over the limit of {MAX_RECORD_LEN}",
                out.len()
            ),
        });
    }
    Ok(out)
}

fn decode(stored: &[u8]) -> Result<(&[u8], Record), IdempotencyError> {
    let bad = || {
        IdempotencyError::Store(StoreError::Protocol {
            message: "an idempotency record is not in the form this library writes (a key of \
                      ours overwritten by something else?)"
                .to_owned(),
        })
    };
    let mut rest = stored.strip_prefix(MAGIC.as_slice()).ok_or_else(bad)?;
    let mut take = |n: usize| -> Result<&[u8], IdempotencyError> {
        let (head, tail) = rest.split_at_checked(n).ok_or_else(bad)?;
        rest = tail;
        Ok(head)
    };
    let fp_len = usize::from(take(1)?[0]);
    let fingerprint = take(fp_len)?;
    let status = u16::from_be_bytes(take(2)?.try_into().map_err(|_| bad())?);
    let count = u16::from_be_bytes(take(2)?.try_into().map_err(|_| bad())?);
    let mut headers = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let n = u16::from_be_bytes(take(2)?.try_into().map_err(|_| bad())?);
        let name = std::str::from_utf8(take(usize::from(n))?).map_err(|_| bad())?;
        let v = u32::from_be_bytes(take(4)?.try_into().map_err(|_| bad())?);
        let value = take(usize::try_from(v).map_err(|_| bad())?)?;
        headers.push((name.to_owned(), value.to_vec()));
    }
    let body = rest.to_vec();
    Ok((
        fingerprint,
        Record {
            status,
            headers,
            body,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_garbage_is_an_error() {
        let record = Record::new(
            201,
            vec![
                ("content-type".to_owned(), b"text/plain".to_vec()),
                ("etag".to_owned(), Vec::new()),
            ],
            b"body \x00\xff".to_vec(),
        );
        let stored = encode(b"fp", &record).expect("encodes");
        let (fp, back) = decode(&stored).expect("decodes");
        assert_eq!(fp, b"fp");
        assert_eq!(back, record);
        for cut in 0..stored.len() - record.body.len() {
            assert!(decode(&stored[..cut]).is_err(), "cut at {cut}");
        }
        assert!(decode(b"garbage").is_err());
    }
}
