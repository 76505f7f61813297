//! Fenced writes: the check on the resource side.
//!
//! A lease does not stop a holder that is paused past its ttl (a GC pause, a stopped VM, a
//! partition): it wakes up believing it still holds the lock and writes after the next
//! holder did. The answer is to write under the lease's [fence](crate::LeaseHandle::fence),
//! which strictly increases from one holder to the next, and to have the resource refuse a write
//! whose fence is lower than one it has already accepted. This module is that check, on the
//! store the client is connected to ([`FencedResource`], from [`Client::fenced`](crate::Client::fenced)) and, with
//! the `postgres` feature, in a PostgreSQL transaction (`postgres::FenceTable`).
#![cfg_attr(
    feature = "postgres",
    doc = "([`postgres::FenceTable`] is that table's handle.)"
)]
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use distlock::FencedError;
//!
//! let client = distlock::Client::in_memory(); // or Client::connect("redis://...").await?
//! // The resource a lock protects: give it the lock's name.
//! let invoice = client.fenced("invoice:42")?;
//!
//! let first = client.lock("invoice:42").acquire().await?;
//! let stale_fence = first.fence().await?; // minted while the lock is held
//! invoice.set("status", "paid", stale_fence).await?;
//! // Say this holder stalls past its ttl, and the lock passes to the next one...
//! first.release().await?;
//! let next = client.lock("invoice:42").acquire().await?;
//! let next_fence = next.fence().await?;
//! invoice.set("status", "refunded", next_fence).await?;
//!
//! // ...then the first one wakes up and writes: refused, and the data keeps the newer write.
//! let err = invoice.set("status", "paid", stale_fence).await.unwrap_err();
//! assert!(matches!(err, FencedError::Stale { last, offered, .. }
//!     if last == next_fence && offered == stale_fence));
//! assert_eq!(invoice.get("status").await?.as_deref(), Some(&b"refunded"[..]));
//! # Ok(()) }
//! ```
//!
//! # What is decided
//!
//! * **An equal fence is accepted.** One holder writes several times under one lease, and
//!   may send a write again when its reply was lost; distinct leases of one lock never share
//!   a fence. So guard each resource with **one lock name** (give the resource the lock's
//!   name): two locks can hand out the same number, and their holders would not exclude each
//!   other.
//! * **Atomic, on the server.** A write is one script (one step in memory): the fence check,
//!   the [`Update`]'s conditions and every change happen together or not at all. The fence
//!   is checked first, so a stale writer is told [`FencedError::Stale`] whatever the values
//!   say; a failed condition is [`FencedError::Conflict`] and raises nothing.
//! * **Raise the fence before you read.** The resource only knows the fences it was written
//!   with. A holder that reads, decides and then writes should first
//!   [`advance`](FencedResource::advance) the resource to its fence: from then on, an older
//!   holder that is still running cannot slip a write in between.
//! * **Key layout.** On Redis a resource is two keys in one hash slot, its name (encoded as
//!   lock names are: `{`, `}`, `%` and control characters percent-encoded) being the hash tag:
//!   `<prefix>:fenced-guard:{<resource>}`, a string holding the highest fence accepted, and
//!   `<prefix>:fenced:{<resource>}`, a hash of the values (plain `HGETALL` shows them). The
//!   guard is a key of its own so that deleting every value never forgets the fence. On a
//!   Cluster, every write is one single-slot script on the node that owns the resource.
//! * **No expiry by default.** The guard lives as long as the data it guards: both keys are
//!   kept until deleted. [`expire_after`](FencedResource::expire_after) gives resources that
//!   are themselves temporary a ttl, which every accepted write sets again on both keys
//!   together; once they have expired the resource starts afresh and accepts any fence, so
//!   choose a ttl far longer than any holder can stall. (The last accepted write decides: a
//!   handle without a ttl makes the resource permanent again.)
//! * **Not on a Redlock quorum.** Its independent primaries would each keep a different last
//!   fence, so [`Client::fenced`](crate::Client::fenced) refuses such a client with
//!   [`FencedError::UnsupportedStore`]; write to a client on a single primary, Sentinel or a
//!   Cluster (or to PostgreSQL). In memory, the resource is shared by the clones of the
//!   client, like its locks.
//! * **Reads are not fenced.** [`get`](FencedResource::get) and [`read`](FencedResource::read)
//!   answer whoever asks; what they return was written under the fence they report.
//!
//! On Redis, an ACL user needs `+hset +hget +hdel +hexists +hmget +hgetall +persist` (run by
//! the script) besides the commands locks use, on keys under its prefix. On Redis 7.0 and
//! newer a user that lacks one is refused ([`RefusedKind::NoPermission`]) before the write
//! changes anything; on 6.2 such a write can be left applied in part.
//!
//! [`RefusedKind::NoPermission`]: crate::RefusedKind::NoPermission

mod error;
#[cfg(feature = "postgres")]
pub mod postgres;
mod update;

use std::collections::BTreeMap;
use std::time::Duration;

pub use self::error::FencedError;
pub use self::update::Update;
use crate::core::Core;
use crate::keys::FencedKeys;
use crate::store::{Capability, FencedCall, FencedRead, FencedReply, ReadReply};

/// The most conditions and changes one write may carry (and keys one read may ask for), so
/// that no script runs long on the server.
pub const MAX_CHANGES: usize = 256;
/// The longest ttl [`FencedResource::expire_after`] accepts (366 days).
pub const MAX_TTL: Duration = Duration::from_secs(366 * 24 * 3600);

/// A resource whose writes are fenced; from [`Client::fenced`](crate::Client::fenced). Cheap to clone.
///
/// Every write carries a fence (a [`Lease`](crate::Lease)'s
/// [`fence`](crate::LeaseHandle::fence)) and is refused with [`FencedError::Stale`] when the
/// resource has accepted a higher one. Values are bytes under text keys.
#[derive(Clone, Debug)]
pub struct FencedResource {
    client: Core,
    resource: String,
    keys: FencedKeys,
    ttl: Option<Duration>,
}

/// A resource's values, with the highest fence it has accepted; from
/// [`FencedResource::read`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The highest fence the resource has accepted (`None`: never written, or expired).
    pub fence: Option<u64>,
    /// Every value, by key.
    pub values: BTreeMap<String, Vec<u8>>,
}

impl Snapshot {
    /// The value of `key`, if it has one.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        self.values.get(key).map(Vec::as_slice)
    }

    /// The value of `key` as text, if it has one and it is UTF-8.
    #[must_use]
    pub fn text(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(|v| std::str::from_utf8(v).ok())
    }
}

impl FencedResource {
    /// The resource `resource` on `client`'s store (see [`Client::fenced`](crate::Client::fenced)).
    pub(crate) fn new(client: Core, resource: String) -> Result<Self, FencedError> {
        if let Err(refused) = client.supports(Capability::FencedWrites) {
            return Err(FencedError::UnsupportedStore {
                reason: refused.reason,
            });
        }
        let keys = FencedKeys::new(client.prefix(), &resource)?;
        Ok(Self {
            client,
            resource,
            keys,
            ttl: None,
        })
    }
    /// The resource's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.resource
    }

    /// Makes every write through this handle give the resource (its values and its fence) a
    /// ttl of `ttl` from then; by default a resource never expires. Once expired, the resource
    /// starts afresh and accepts any fence: use this for resources that are temporary
    /// themselves, with a ttl far longer than any holder can stall.
    ///
    /// # Errors
    /// [`FencedError::InvalidInput`] for a ttl under 1 ms or over [`MAX_TTL`].
    pub fn expire_after(mut self, ttl: Duration) -> Result<Self, FencedError> {
        if ttl < Duration::from_millis(1) || ttl > MAX_TTL {
            return Err(FencedError::InvalidInput {
                reason: format!("a ttl of {ttl:?} is outside 1ms..={MAX_TTL:?}"),
            });
        }
        self.ttl = Some(ttl);
        Ok(self)
    }

    /// The ttl writes through this handle give the resource (`None`: no expiry).
    #[must_use]
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }

    /// Sets `key` to `value` under `fence`.
    ///
    /// # Errors
    /// [`FencedError::Stale`] when the resource has accepted a higher fence (nothing is
    /// written); [`FencedError::InvalidName`] for an empty or over-long key;
    /// [`FencedError::Store`].
    pub async fn set(
        &self,
        key: impl Into<String>,
        value: impl AsRef<[u8]>,
        fence: u64,
    ) -> Result<(), FencedError> {
        self.update(fence).set(key, value).apply().await
    }

    /// Deletes `key` under `fence` (a key without a value is fine).
    ///
    /// # Errors
    /// As [`set`](Self::set).
    pub async fn delete(&self, key: impl Into<String>, fence: u64) -> Result<(), FencedError> {
        self.update(fence).delete(key).apply().await
    }

    /// Records `fence` without changing any value: from now on the resource refuses writes
    /// under lower fences. Call it right after taking the lock, before reading what you will
    /// base your writes on, so that an older holder still running cannot write in between.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = distlock::Client::in_memory();
    /// let account = client.fenced("account:9")?;
    /// let lease = client.lock("account:9").acquire().await?;
    ///
    /// let fence = lease.fence().await?;
    /// account.advance(fence).await?; // older holders are shut out from here on
    /// let balance: i64 = account
    ///     .get("balance")
    ///     .await?
    ///     .and_then(|v| String::from_utf8(v).ok()?.parse().ok())
    ///     .unwrap_or(0);
    /// account.set("balance", (balance + 10).to_string(), fence).await?;
    /// # assert_eq!(account.get("balance").await?.as_deref(), Some(&b"10"[..]));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`FencedError::Stale`] when the resource has accepted a higher fence;
    /// [`FencedError::Store`].
    pub async fn advance(&self, fence: u64) -> Result<(), FencedError> {
        self.update(fence).apply().await
    }

    /// Starts a write of several changes under `fence`, with conditions on the values, applied
    /// all or nothing by [`Update::apply`].
    pub fn update(&self, fence: u64) -> Update<'_> {
        Update::new(self, fence)
    }

    /// The value of `key`, if it has one.
    ///
    /// # Errors
    /// [`FencedError::InvalidName`] for an empty or over-long key; [`FencedError::Store`].
    pub async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, FencedError> {
        crate::keys::check_name(key)?;
        let reply = self.read_fields(Some(vec![key.to_owned()])).await?;
        Ok(reply.values.into_iter().next().map(|(_, value)| value))
    }

    /// Every value, with the highest fence the resource has accepted, read in one step.
    ///
    /// # Errors
    /// [`FencedError::Store`].
    pub async fn read(&self) -> Result<Snapshot, FencedError> {
        let reply = self.read_fields(None).await?;
        Ok(Snapshot {
            fence: reply.last,
            values: reply.values.into_iter().collect(),
        })
    }

    /// The highest fence the resource has accepted (`None`: never written, or expired).
    ///
    /// # Errors
    /// [`FencedError::Store`].
    pub async fn last_fence(&self) -> Result<Option<u64>, FencedError> {
        Ok(self.read_fields(Some(Vec::new())).await?.last)
    }

    async fn read_fields(&self, fields: Option<Vec<String>>) -> Result<ReadReply, FencedError> {
        let read = FencedRead {
            keys: self.keys.clone(),
            fields,
        };
        match self.client.store().fenced(&FencedCall::Read(&read)).await? {
            FencedReply::Read(reply) => Ok(reply),
            FencedReply::Write(_) => Err(mismatched_reply()),
        }
    }
}

/// A backend answered a read with a write's reply, or the other way round (a bug).
fn mismatched_reply() -> FencedError {
    FencedError::Store(crate::error::StoreError::Protocol {
        message: "a fenced call was answered with the reply of another kind".to_owned(),
    })
}
