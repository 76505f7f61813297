//! The errors of fenced writes, on the store and on PostgreSQL.

use crate::error::{InvalidName, StoreError};

/// Why a fenced write (or a read of a fenced resource) did not happen.
///
/// [`Stale`](Self::Stale) is the refusal fencing exists for: the writer's lease has expired and
/// a newer holder has written since. Its work must be treated as not done (undo what it did
/// elsewhere, tell its caller), never retried under the same fence.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FencedError {
    /// The write's fence is lower than one the resource has already accepted: a newer holder
    /// of the lock has written, so this writer's lease has expired (it was paused, or lost
    /// its connection, past its ttl). Nothing was written.
    #[error(
        "write to `{resource}` refused: its fence {offered} is lower than {last}, which the \
         resource has already accepted (a newer holder has written; this one's lease has expired)"
    )]
    Stale {
        /// The resource written to.
        resource: String,
        /// The highest fence the resource has accepted.
        last: u64,
        /// The fence the write offered.
        offered: u64,
    },
    /// A condition of an [`Update`](crate::fenced::Update)
    /// ([`require_absent`](crate::fenced::Update::require_absent),
    /// [`require_value`](crate::fenced::Update::require_value)) did not hold. Nothing was
    /// written, and the resource's fence was not raised. (A stale fence is reported as
    /// [`Stale`](Self::Stale) first, whatever the values are.)
    #[error("update of `{resource}` not applied: its condition on `{key}` does not hold")]
    Conflict {
        /// The resource written to.
        resource: String,
        /// The key whose condition failed.
        key: String,
    },
    /// The client's store cannot hold a fenced resource: a Redlock quorum, whose independent
    /// primaries would each keep a different last fence. Refused by
    /// [`Client::fenced`](crate::Client::fenced); use a client on a single primary (plain or
    /// behind Sentinel) or a Cluster for the resource.
    #[error("{reason}")]
    UnsupportedStore {
        /// Why, and what to use instead.
        reason: &'static str,
    },
    /// The resource or a key cannot be used: empty, or longer than
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes.
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    /// An argument is out of range (a ttl, too many changes in one update, a fence PostgreSQL's
    /// `bigint` cannot hold). Refused without a round trip.
    #[error("invalid fenced write: {reason}")]
    InvalidInput {
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// The store failed; see [`StoreError`]. A write that timed out may or may not have been
    /// applied: sending it again under the same fence is safe (an equal fence is accepted)
    /// when the write is idempotent, as setting and deleting values are.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// PostgreSQL failed (feature `postgres`): the statement, the connection, or the commit.
    /// The transaction did not commit (or, for a failed commit, may have: PostgreSQL does not
    /// say).
    #[cfg(feature = "postgres")]
    #[error("PostgreSQL failed: {0}")]
    Postgres(#[from] tokio_postgres::Error),
}

impl FencedError {
    /// Whether this is [`Stale`](Self::Stale): the writer's lease has expired and a newer
    /// holder has written.
    #[must_use]
    pub fn is_stale(&self) -> bool {
        matches!(self, Self::Stale { .. })
    }
}
