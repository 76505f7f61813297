//! Idempotency keys: run a request once, answer its duplicates with the stored response.
//!
//! The runtime side of `distlock-tower`'s `IdempotencyLayer` (the IETF draft "The
//! Idempotency-Key HTTP Header Field"), usable on its own by code that is not HTTP. A key
//! belongs to a **scope** (the caller: a user, a tenant, an API key's id), so two callers
//! that pick the same key never meet. A key's first request takes a **claim** (a lock, with
//! its watchdog) and leaves a *started* marker; its outcome, a [`Record`], replaces the
//! marker, **only while the claim still holds**; later requests with the key get the record
//! back. A request with the key that comes while the first runs is told [`Begin::InFlight`]
//! (after the handle's [`wait`](Idempotency::wait), if it has one); one whose first request
//! started and never finished is told [`Begin::Interrupted`], never run again; one whose
//! fingerprint (what identifies its content: for HTTP, method, path and a digest of the body)
//! differs from the first one's is told [`Begin::Mismatch`].
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use distlock::idempotency::{Begin, Record, Scope};
//!
//! let client = distlock::Client::in_memory(); // or Client::connect("redis://...").await?
//! let payments = client.idempotency("payments")?;
//! let caller = Scope::caller("acct_42"); // who sends the request, from your authentication
//!
//! let Begin::Run(claim) = payments.begin(caller, "key-1", b"charge 10 EUR").await? else {
//!     unreachable!("the first request with a key runs");
//! };
//! // ...charge the card, then keep what was answered:
//! let stored = payments.complete(claim, &Record::new(201, vec![], b"charged".to_vec())).await?;
//! assert!(stored);
//!
//! // A retry of the same request gets the record; another request with the key does not.
//! assert!(matches!(payments.begin(caller, "key-1", b"charge 10 EUR").await?,
//!     Begin::Replay(record) if record.status == 201 && record.body == b"charged"));
//! assert!(matches!(payments.begin(caller, "key-1", b"charge 99 EUR").await?, Begin::Mismatch));
//! // Another caller's key-1 is another key.
//! assert!(matches!(payments.begin(Scope::caller("acct_7"), "key-1", b"charge 10 EUR").await?,
//!     Begin::Run(_)));
//! # Ok(()) }
//! ```
//!
//! # What is decided
//!
//! * **Keys are the caller's.** A record is found by (namespace, scope, key). A
//!   [`Scope::caller`] is hashed (SHA-256) into the names, so the store shows no user ids;
//!   [`Scope::Global`] shares every key among every caller, and is a choice to make by name:
//!   anyone who can guess a key could read the response stored under it.
//! * **A request that started is never run again by a retry.** [`begin`](Idempotency::begin)
//!   leaves a *started* marker (with the record's ttl) as it hands out the claim. If the
//!   request never completes (its process dies, its claim is lost, the claim is dropped),
//!   the marker stays once the claim is gone, and the key's later requests get
//!   [`Begin::Interrupted`] until it expires: the outcome is unknown, and running the request
//!   again could do twice what it did once. [`discard`](Idempotency::discard) is the way to
//!   say the request did nothing (it failed before any effect), so the next one runs.
//!   [`rerun_interrupted`](Idempotency::rerun_interrupted) turns the marker off: a request
//!   cut short then leaves nothing, and its key's next request runs (the behaviour before
//!   0.2, for handlers that are safe to run twice).
//! * **Only a claim that still holds stores.** A claim whose lease was lost (it expired;
//!   another request may have claimed the key since) stores nothing:
//!   [`complete`](Idempotency::complete) answers `false`, and the marker stays.
//! * **Key layout.** The claim is the lock `idempotency/<namespace>/<scope>/<key>`, where
//!   `<scope>` is `global` or 32 hex digits of the scope's hash; the record is
//!   `<prefix>:idem:{<that name>}` beside the claim's `<prefix>:lock:{<that name>}`, under
//!   the same hash tag, so that every step is one single-slot script on a single primary,
//!   Sentinel or a Cluster. The record is one string (an encoding of the fingerprint, the
//!   status, the headers and the body). [`Client::held_locks`](crate::Client::held_locks)
//!   leaves claims out.
//! * **Not on a Redlock quorum**: [`Client::idempotency`](crate::Client::idempotency) refuses it
//!   with [`IdempotencyError::UnsupportedStore`]. In memory, records are shared by the clones
//!   of the client, like its locks.

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest as _, Sha256};

use crate::client::Client;
use crate::error::{InvalidName, LockError, StoreError};
use crate::lock::{Lease, MAX_TTL, MIN_TTL};
use crate::store::{Capability, RecordCall, RecordReply};

/// The longest namespace [`Client::idempotency`](crate::Client::idempotency) accepts, in bytes.
pub const MAX_NAMESPACE_LEN: usize = 64;
/// The longest scope [`Scope::caller`] takes, in bytes (it is hashed, so any text fits).
pub const MAX_SCOPE_LEN: usize = 1024;
/// The longest fingerprint, in bytes (a SHA-512 digest fits).
pub const MAX_FINGERPRINT_LEN: usize = 64;
/// The largest encoded record [`Idempotency::complete`] stores (64 MiB).
pub const MAX_RECORD_LEN: usize = 64 << 20;
/// The longest record ttl (366 days).
pub const MAX_RECORD_TTL: Duration = Duration::from_secs(366 * 24 * 3600);
/// How long a record (and a started marker) is kept unless [`Idempotency::record_ttl`] says
/// otherwise: 24 hours.
pub const DEFAULT_RECORD_TTL: Duration = Duration::from_secs(24 * 3600);
/// The claim's ttl unless [`Idempotency::lease_ttl`] sets another (renewed by the watchdog
/// while the request runs).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);
/// How every claim's lock name starts: `idempotency/`.
pub const CLAIM_NAME_PREFIX: &str = "idempotency/";

/// What an idempotency handle could not do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdempotencyError {
    /// The key (or the namespace with it) cannot be a lock name: empty, or too long.
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    /// A setting or argument out of range (a ttl, a namespace, a scope, a fingerprint, a
    /// record too large).
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

/// Whose key it is: a key is looked up within its scope, so two callers that choose the same
/// key never see each other's records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scope<'a> {
    /// The keys of one caller (a user id, a tenant, an API key's id: whatever your
    /// authentication says the request comes from; not something the request can choose).
    Caller(&'a str),
    /// Keys shared by every caller: whoever sends a key gets what is stored under it. Only
    /// for callers that trust each other (one internal client), or keys nobody can guess.
    Global,
}

impl<'a> Scope<'a> {
    /// The keys of the caller `id` (1 to [`MAX_SCOPE_LEN`] bytes).
    #[must_use]
    pub fn caller(id: &'a str) -> Self {
        Self::Caller(id)
    }

    /// The part of the claim's name that says whose key it is: `global`, or 32 hex digits of
    /// SHA-256 of the caller's id (so the store never shows it).
    fn tag(self) -> Result<String, IdempotencyError> {
        match self {
            Self::Global => Ok("global".to_owned()),
            Self::Caller(id) => {
                if id.is_empty() || id.len() > MAX_SCOPE_LEN {
                    return Err(IdempotencyError::InvalidInput {
                        reason: format!(
                            "a scope must be 1 to {MAX_SCOPE_LEN} bytes, not {}",
                            id.len()
                        ),
                    });
                }
                let digest = Sha256::new()
                    .chain_update(b"distlock idempotency scope\0")
                    .chain_update(id.as_bytes())
                    .finalize();
                Ok(digest[..16]
                    .iter()
                    .fold(String::with_capacity(32), |mut hex, b| {
                        use std::fmt::Write as _;
                        let _ = write!(hex, "{b:02x}");
                        hex
                    }))
            }
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
    /// The key is new: run the request under this claim, then
    /// [`complete`](Idempotency::complete) it (or [`discard`](Idempotency::discard) it if the
    /// request did nothing).
    Run(Claim),
    /// Another request with the key is running (after the handle's wait, if any).
    InFlight,
    /// The key's request finished: this is what it answered.
    Replay(Record),
    /// The key was used for a request with another fingerprint.
    Mismatch,
    /// The key's request started and never finished (its process died, its claim was lost,
    /// its handler failed midway): what it did is unknown, so it is not run again. Ask the
    /// resource itself, or retry with a new key once you know. Kept for the record ttl.
    Interrupted,
    /// The key's request finished, but its response was not kept (it was larger than the
    /// layer stores): it is not run again, and there is nothing to replay.
    NotKept,
}

/// The right to run a key's first request; from [`Begin::Run`].
///
/// Dropping it (or [`release`](Self::release)) ends the claim without a record: the key's
/// started marker stays, so its later requests get [`Begin::Interrupted`] (or, with
/// [`rerun_interrupted`](Idempotency::rerun_interrupted), run again).
#[derive(Debug)]
#[must_use = "dropping a claim ends it without a record: the key's outcome becomes unknown"]
pub struct Claim {
    lease: Lease,
    record: String,
    fingerprint: Vec<u8>,
}

impl Claim {
    /// The claim's lease: its fence (pass it to the resource the request writes, so a claim
    /// that was lost cannot write after its successor), its lost signal.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Ends the claim now, without a record (see the type's docs for what later requests
    /// with the key get).
    ///
    /// # Errors
    /// [`IdempotencyError::Store`] when the release could not be sent (the claim then
    /// expires after its ttl).
    pub async fn release(self) -> Result<(), IdempotencyError> {
        self.lease.release().await?;
        Ok(())
    }
}

// The constructor lives here, beside what it builds, so that the client does not import
// this module (which holds a client): no circle.
impl Client {
    /// The idempotency keys of `namespace` (1 to 64 characters of `[A-Za-z0-9._-]`): run a
    /// key's first request once and give its stored outcome to the duplicates. See
    /// [`idempotency`](crate::idempotency).
    ///
    /// # Errors
    /// [`IdempotencyError::UnsupportedStore`] when locks go to a Redlock quorum;
    /// [`IdempotencyError::InvalidInput`] for a bad namespace.
    pub fn idempotency(
        &self,
        namespace: impl Into<String>,
    ) -> Result<Idempotency, IdempotencyError> {
        Idempotency::new(self.clone(), namespace.into())
    }
}

/// Idempotency keys of one namespace; from [`Client::idempotency`](crate::Client::idempotency).
/// Cheap to clone.
#[derive(Clone, Debug)]
pub struct Idempotency {
    client: Client,
    namespace: Arc<str>,
    lease_ttl: Duration,
    record_ttl: Duration,
    wait: Duration,
    max_run: Option<Duration>,
    rerun_interrupted: bool,
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
            record_ttl: DEFAULT_RECORD_TTL,
            wait: Duration::ZERO,
            max_run: None,
            rerun_interrupted: false,
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
        if distlock_grammar::check_ttl(ttl).is_err() {
            return Err(IdempotencyError::InvalidInput {
                reason: format!("a lease ttl of {ttl:?} is outside {MIN_TTL:?}..={MAX_TTL:?}"),
            });
        }
        self.lease_ttl = ttl;
        Ok(self)
    }

    /// How long records, and the started markers of requests that never finished, are kept
    /// (default [`DEFAULT_RECORD_TTL`], 24 hours).
    ///
    /// # Errors
    /// [`IdempotencyError::InvalidInput`] outside 1 ms..=[`MAX_RECORD_TTL`].
    pub fn record_ttl(mut self, ttl: Duration) -> Result<Self, IdempotencyError> {
        if ttl < Duration::from_millis(1) || ttl > MAX_RECORD_TTL {
            return Err(IdempotencyError::InvalidInput {
                reason: format!("a record ttl of {ttl:?} is outside 1ms..={MAX_RECORD_TTL:?}"),
            });
        }
        self.record_ttl = ttl;
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

    /// The longest a claim is held (its lease's
    /// [`max_hold`](crate::LockBuilder::max_hold)): a request still running then loses its
    /// claim, and its outcome is unknown. Default: no bound (the watchdog renews the claim
    /// for as long as the request runs).
    ///
    /// # Errors
    /// [`IdempotencyError::InvalidInput`] for zero.
    pub fn max_run(mut self, max_run: Duration) -> Result<Self, IdempotencyError> {
        if max_run.is_zero() {
            return Err(IdempotencyError::InvalidInput {
                reason: "max_run must be greater than zero".to_owned(),
            });
        }
        self.max_run = Some(max_run);
        Ok(self)
    }

    /// Whether a request that was cut short (its claim dropped, lost or expired with no
    /// record) may run again (default `false`: its key's later requests get
    /// [`Begin::Interrupted`]). Only for requests that are safe to run twice: with `true`, no
    /// started marker is written, and a retry after a crash runs the request again.
    #[must_use]
    pub fn rerun_interrupted(mut self, rerun: bool) -> Self {
        self.rerun_interrupted = rerun;
        self
    }

    /// The lock name that claims `key` in `scope`, and the record's key.
    fn names(&self, scope: Scope<'_>, key: &str) -> Result<(String, String), IdempotencyError> {
        if key.is_empty() {
            return Err(InvalidName::Empty.into());
        }
        let name = format!(
            "{CLAIM_NAME_PREFIX}{}/{}/{key}",
            self.namespace,
            scope.tag()?
        );
        let record = crate::keys::idempotency_record(self.client.core().prefix(), &name)?;
        Ok((name, record))
    }

    /// What to do with a request of `scope` carrying `key`, whose content is identified by
    /// `fingerprint` (at most [`MAX_FINGERPRINT_LEN`] bytes; a digest): run it
    /// ([`Begin::Run`]), or answer it with what the key's first request left.
    ///
    /// # Errors
    /// [`IdempotencyError::InvalidName`] for an empty key or one too long for a lock name;
    /// [`IdempotencyError::InvalidInput`] for an over-long fingerprint or a bad scope;
    /// [`IdempotencyError::Store`].
    pub async fn begin(
        &self,
        scope: Scope<'_>,
        key: &str,
        fingerprint: &[u8],
    ) -> Result<Begin, IdempotencyError> {
        if fingerprint.len() > MAX_FINGERPRINT_LEN {
            return Err(IdempotencyError::InvalidInput {
                reason: format!(
                    "a fingerprint of {} bytes is over the limit of {MAX_FINGERPRINT_LEN}",
                    fingerprint.len()
                ),
            });
        }
        let (name, record) = self.names(scope, key)?;
        // A finished request is answered from one read. A started marker is not: whether its
        // request still runs is the claim's to say, so it goes on to take the claim.
        let call = RecordCall::Get { record: &record };
        let RecordReply::Record(stored) = self.client.core().store().idempotency(&call).await?
        else {
            return Err(mismatched_reply());
        };
        if let Some(stored) = stored {
            let found = decode(&stored)?;
            if !matches!(found.outcome, Outcome::Started) || found.fingerprint != fingerprint {
                return Ok(found.answer(fingerprint));
            }
        }
        let mut claiming = self.client.lock(&name).ttl(self.lease_ttl).wait(self.wait);
        if let Some(max_run) = self.max_run {
            claiming = claiming.max_hold(max_run);
        }
        let acquired = claiming.acquire().await;
        let lease = match acquired {
            Ok(lease) => lease,
            Err(LockError::Busy { .. } | LockError::Timeout { .. }) => {
                return Ok(Begin::InFlight);
            }
            Err(err) => return Err(err.into()),
        };
        // Under the claim: what the key's first request left (it may have finished, or been
        // cut short, since the read), or the started marker of this one.
        let marker =
            (!self.rerun_interrupted).then(|| encode_marker(Outcome::Started, fingerprint));
        let started = self
            .record_call(&lease, &record, RecordOp::Start(marker.as_deref()))
            .await;
        match started {
            Ok(RecordReply::Record(Some(stored))) => {
                let _ = lease.release().await;
                let found = decode(&stored)?;
                Ok(found.answer(fingerprint))
            }
            Ok(RecordReply::Stored(true) | RecordReply::Record(None)) => Ok(Begin::Run(Claim {
                lease,
                record,
                fingerprint: fingerprint.to_vec(),
            })),
            // The claim was lost between its grant and the mark (a pause longer than its ttl).
            Ok(RecordReply::Stored(false)) => Ok(Begin::InFlight),
            Err(err) => Err(err),
        }
    }

    /// Sends `op` on the record `record` under `lease`'s claim.
    async fn record_call(
        &self,
        lease: &Lease,
        record: &str,
        op: RecordOp<'_>,
    ) -> Result<RecordReply, IdempotencyError> {
        let state = &lease.shared;
        let Some(lock) = state.lock_keys() else {
            return Err(mismatched_reply());
        };
        let ttl = self.record_ttl;
        let call = match op {
            RecordOp::Start(marker) => RecordCall::Start {
                record,
                lock: &lock.lock,
                token: &state.token,
                ttl,
                marker,
            },
            RecordOp::Store(value) => RecordCall::Store {
                record,
                lock: &lock.lock,
                token: &state.token,
                ttl,
                value,
            },
            RecordOp::Discard => RecordCall::Discard {
                record,
                lock: &lock.lock,
                token: &state.token,
            },
        };
        Ok(self.client.core().store().idempotency(&call).await?)
    }

    /// Stores `record` for the claim's key (for the handle's
    /// [`record_ttl`](Self::record_ttl)) if the claim still holds; then ends the claim.
    /// `false`: the claim was lost (it expired, and the key may have been claimed again),
    /// nothing was stored.
    ///
    /// # Errors
    /// [`IdempotencyError::InvalidInput`] for a record over [`MAX_RECORD_LEN`] (nothing is
    /// stored, the claim is ended as if dropped); [`IdempotencyError::Store`].
    pub async fn complete(&self, claim: Claim, record: &Record) -> Result<bool, IdempotencyError> {
        let value = encode(&claim.fingerprint, record)?;
        self.finish(claim, RecordOp::Store(&value)).await
    }

    /// Ends the claim of a request that finished but whose response is not kept (too large to
    /// store): its key's later requests get [`Begin::NotKept`], and do not run again. `false`:
    /// the claim was lost, nothing was written.
    ///
    /// # Errors
    /// [`IdempotencyError::Store`].
    pub async fn complete_not_kept(&self, claim: Claim) -> Result<bool, IdempotencyError> {
        let value = encode_marker(Outcome::NotKept, &claim.fingerprint);
        self.finish(claim, RecordOp::Store(&value)).await
    }

    /// Ends the claim of a request that did nothing (it failed before any effect, or its
    /// answer tells the client to retry): the key's started marker is removed, and its next
    /// request runs. `false`: the claim was lost, nothing was changed.
    ///
    /// # Errors
    /// [`IdempotencyError::Store`].
    pub async fn discard(&self, claim: Claim) -> Result<bool, IdempotencyError> {
        self.finish(claim, RecordOp::Discard).await
    }

    async fn finish(&self, claim: Claim, op: RecordOp<'_>) -> Result<bool, IdempotencyError> {
        let done = self.record_call(&claim.lease, &claim.record, op).await;
        // Written or not, the claim ends: duplicates waiting for it read the record.
        let _ = claim.lease.release().await;
        match done? {
            RecordReply::Stored(stored) => Ok(stored),
            RecordReply::Record(_) => Err(mismatched_reply()),
        }
    }
}

/// What [`Idempotency::record_call`] does.
#[derive(Clone, Copy)]
enum RecordOp<'a> {
    /// Answer the record if there is one, else leave the marker (if any).
    Start(Option<&'a [u8]>),
    /// Store a record (or a not-kept marker).
    Store(&'a [u8]),
    /// Remove the started marker.
    Discard,
}

/// A backend answered a call with the reply of another kind (a bug).
fn mismatched_reply() -> IdempotencyError {
    IdempotencyError::Store(StoreError::Protocol {
        message: "an idempotency call was answered with the reply of another kind".to_owned(),
    })
}

/// What a stored value says of its key's request.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// It finished; this is its response.
    Finished(Record),
    /// It started (and runs, while its claim is held; was cut short, once the claim is gone).
    Started,
    /// It finished; its response was not kept.
    NotKept,
}

/// A stored value, decoded.
#[derive(Debug)]
struct Found<'a> {
    fingerprint: &'a [u8],
    outcome: Outcome,
}

impl Found<'_> {
    /// The answer to a request with `fingerprint`, once no request with the key runs.
    fn answer(self, fingerprint: &[u8]) -> Begin {
        if self.fingerprint != fingerprint {
            return Begin::Mismatch;
        }
        match self.outcome {
            Outcome::Finished(record) => Begin::Replay(record),
            Outcome::Started => Begin::Interrupted,
            Outcome::NotKept => Begin::NotKept,
        }
    }
}

/// The stored forms. A record: `DLI1`, the fingerprint (1-byte length), the status (2
/// bytes), the header count (2 bytes), each header as a 2-byte name length, the name, a
/// 4-byte value length, the value; then the body, to the end. Integers are big-endian. A
/// marker: `DLS1` (started) or `DLK1` (finished, not kept), then the fingerprint (1-byte
/// length), and nothing else.
const MAGIC: &[u8; 4] = b"DLI1";
const STARTED: &[u8; 4] = b"DLS1";
const NOT_KEPT: &[u8; 4] = b"DLK1";

/// A marker's stored form (`outcome` is `Started` or `NotKept`). A fingerprint is at most
/// [`MAX_FINGERPRINT_LEN`] bytes, which `begin` checked.
fn encode_marker(outcome: Outcome, fingerprint: &[u8]) -> Vec<u8> {
    let magic = if outcome == Outcome::NotKept {
        NOT_KEPT
    } else {
        STARTED
    };
    let mut out = Vec::with_capacity(5 + fingerprint.len());
    out.extend_from_slice(magic);
    out.push(u8::try_from(fingerprint.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(&fingerprint[..fingerprint.len().min(usize::from(u8::MAX))]);
    out
}

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

/// An idempotency key's stored value is not in a form this library writes.
fn not_ours() -> IdempotencyError {
    IdempotencyError::Store(StoreError::Protocol {
        message: "an idempotency record is not in the form this library writes (a key of ours \
                  overwritten by something else?)"
            .to_owned(),
    })
}

/// The first `n` bytes of `rest`, which moves past them.
fn take<'a>(rest: &mut &'a [u8], n: usize) -> Result<&'a [u8], IdempotencyError> {
    let (head, tail) = rest.split_at_checked(n).ok_or_else(not_ours)?;
    *rest = tail;
    Ok(head)
}

/// The next big-endian integer of `N` bytes.
fn take_be<const N: usize>(rest: &mut &[u8]) -> Result<[u8; N], IdempotencyError> {
    take(rest, N)?.try_into().map_err(|_| not_ours())
}

fn decode(stored: &[u8]) -> Result<Found<'_>, IdempotencyError> {
    let mut rest = stored;
    let magic = take(&mut rest, 4)?;
    let fp_len = usize::from(take(&mut rest, 1)?[0]);
    let fingerprint = take(&mut rest, fp_len)?;
    let marker = if magic == STARTED {
        Some(Outcome::Started)
    } else if magic == NOT_KEPT {
        Some(Outcome::NotKept)
    } else if magic == MAGIC {
        None
    } else {
        return Err(not_ours());
    };
    if let Some(outcome) = marker {
        if !rest.is_empty() {
            return Err(not_ours());
        }
        return Ok(Found {
            fingerprint,
            outcome,
        });
    }
    let status = u16::from_be_bytes(take_be(&mut rest)?);
    let count = u16::from_be_bytes(take_be(&mut rest)?);
    let mut headers = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let n = u16::from_be_bytes(take_be(&mut rest)?);
        let name = std::str::from_utf8(take(&mut rest, usize::from(n))?).map_err(|_| not_ours())?;
        let v = u32::from_be_bytes(take_be(&mut rest)?);
        let value = take(&mut rest, usize::try_from(v).map_err(|_| not_ours())?)?;
        headers.push((name.to_owned(), value.to_vec()));
    }
    Ok(Found {
        fingerprint,
        outcome: Outcome::Finished(Record {
            status,
            headers,
            body: rest.to_vec(),
        }),
    })
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
        let found = decode(&stored).expect("decodes");
        assert_eq!(found.fingerprint, b"fp");
        assert_eq!(found.outcome, Outcome::Finished(record.clone()));
        for cut in 0..stored.len() - record.body.len() {
            assert!(decode(&stored[..cut]).is_err(), "cut at {cut}");
        }
        assert!(decode(b"garbage").is_err());
    }

    #[test]
    fn markers_round_trip_and_answer_by_fingerprint() {
        for (outcome, magic) in [(Outcome::Started, STARTED), (Outcome::NotKept, NOT_KEPT)] {
            let stored = encode_marker(outcome, b"fp");
            assert!(stored.starts_with(magic));
            let found = decode(&stored).expect("decodes");
            assert_eq!(found.fingerprint, b"fp");
            let mut longer = stored.clone();
            longer.push(0);
            assert!(
                decode(&longer).is_err(),
                "a marker has nothing after its fingerprint"
            );
            assert!(decode(&stored[..stored.len() - 1]).is_err());
        }
        let started = encode_marker(Outcome::Started, b"fp");
        let started = decode(&started).expect("decodes");
        assert!(matches!(started.answer(b"fp"), Begin::Interrupted));
        let not_kept = encode_marker(Outcome::NotKept, b"fp");
        let not_kept = decode(&not_kept).expect("decodes");
        assert!(matches!(not_kept.answer(b"other"), Begin::Mismatch));
    }

    #[test]
    fn scopes_are_hashed_and_apart() {
        let a = Scope::caller("acct-1").tag().expect("tag");
        let b = Scope::caller("acct-2").tag().expect("tag");
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert_eq!(a, Scope::caller("acct-1").tag().expect("tag"));
        assert_eq!(Scope::Global.tag().expect("tag"), "global");
        assert!(Scope::caller("").tag().is_err());
        assert!(Scope::caller(&"x".repeat(MAX_SCOPE_LEN + 1)).tag().is_err());
    }
}
