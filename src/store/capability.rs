//! What a store can serve beyond plain locks, asked once, when a primitive is built.
//!
//! Every backend answers for itself ([`Backend`](super::Backend)'s capability methods, which
//! refuse by default, each refusal with its reason), and the client asks through one entry
//! point ([`Store::supports`](super::Store::supports), public as
//! [`Client::supports`](crate::Client::supports)). So no code outside the store names a
//! backend: a semaphore asks for holder sets, not whether this is a quorum.

use std::fmt;

/// Declares [`Capability`] with its description and its list of every variant from one list,
/// so that [`Capability::ALL`] cannot miss one (the README's table is checked against it).
macro_rules! capabilities {
    (
        $(#[$meta:meta])*
        pub enum Capability { $($(#[$doc:meta])* $name:ident => $describe:literal,)* }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Capability {
            $($(#[$doc])* $name,)*
        }

        impl Capability {
            /// Every capability, in the order declared: for a start-up report of what a
            /// client's store can serve, or a test that each one is documented.
            pub const ALL: &'static [Capability] = &[$(Capability::$name,)*];

            fn describe(self) -> &'static str {
                match self {
                    $(Self::$name => $describe,)*
                }
            }
        }
    };
}

capabilities! {
    /// Something beyond plain locks that not every store can serve.
    ///
    /// Building a primitive that needs one on a client whose store cannot serve it is a typed
    /// error where it is built (a rate limiter, a Bloom filter, a semaphore, a read-write lock,
    /// the concurrency layer), never an error on every request. Ask a client beforehand with
    /// [`Client::supports`](crate::Client::supports).
    ///
    /// | | single primary (and Sentinel) | Redis Cluster | Redlock quorum | in memory |
    /// |---|:-:|:-:|:-:|:-:|
    /// | [`HolderSets`](Self::HolderSets) | yes | yes | no | yes |
    /// | [`RateLimits`](Self::RateLimits) | yes | yes | no | yes |
    /// | [`BloomFilters`](Self::BloomFilters) | yes | yes | no | yes |
    /// | [`ReplicaAcknowledgement`](Self::ReplicaAcknowledgement) | yes | no | no | no |
    /// | [`HandOff`](Self::HandOff) | yes | yes | no | no |
    /// | [`FencedWrites`](Self::FencedWrites) | yes | yes | no | yes |
    /// | [`IdempotencyRecords`](Self::IdempotencyRecords) | yes | yes | no | yes |
    /// | [`FairQueues`](Self::FairQueues) | yes | yes | no | yes |
    ///
    /// A client made with [`ClientBuilder::counting_on`](crate::ClientBuilder::counting_on)
    /// answers for holder sets, rate limits, Bloom filters and fenced writes with the store they
    /// go to.
    ///
    /// ```
    /// use distlock::Capability;
    ///
    /// let client = distlock::Client::in_memory();
    /// assert!(client.supports(Capability::RateLimits).is_ok());
    /// let refused = client.supports(Capability::ReplicaAcknowledgement).unwrap_err();
    /// assert_eq!(refused.store, "memory");
    /// println!("{refused}"); // what is missing, and what to use instead
    /// ```
    pub enum Capability {
        /// Sets of holders counted on one store: semaphores, read-write locks, hierarchical
        /// locks, and `distlock-tower`'s concurrency layer.
        HolderSets => "holder sets (semaphores, read-write locks, hierarchical locks)",
        /// Rate limiters.
        RateLimits => "rate limits",
        /// Bloom filters.
        BloomFilters => "Bloom filters",
        /// Replica acknowledgement of lock writes (`replicas(n, timeout)`, Redis `WAIT`).
        ReplicaAcknowledgement => "replica acknowledgement",
        /// A released lock passed straight to a waiting task of the same client, with a new fence,
        /// in the release's own script. Without it the waiter is woken and takes the lock itself:
        /// the same guarantees, one more round trip.
        HandOff => "hand-off to a waiter",
        /// Fenced resources ([`Client::fenced`](crate::Client::fenced)): one store that keeps a
        /// resource's last accepted fence.
        FencedWrites => "fenced writes",
        /// Idempotency records ([`Client::idempotency`](crate::Client::idempotency)): a stored
        /// response kept beside the lock that claims its key, on the store locks go to.
        IdempotencyRecords => "idempotency records",
        /// Fair locks ([`LockBuilder::fair`](crate::LockBuilder::fair)): a queue of waiters kept
        /// beside the lock, on the store locks go to.
        FairQueues => "fair lock queues",
    }
}

impl Capability {
    /// Whether the capability is about counting primitives (served by the store a client's
    /// counting goes to), rather than about locks.
    pub(crate) fn counts(self) -> bool {
        matches!(
            self,
            Self::HolderSets | Self::RateLimits | Self::BloomFilters | Self::FencedWrites
        )
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// A [`Capability`] the client's store cannot serve: which store, and why (with what to use
/// instead). Returned where a primitive is built; see [`Client::supports`](crate::Client::supports).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
#[non_exhaustive]
pub struct Unsupported {
    /// The store that refused, as [`Client::store_kind`](crate::Client::store_kind) names it:
    /// `"redis"`, `"cluster"`, `"quorum"` or `"memory"`.
    pub store: &'static str,
    /// What it cannot serve.
    pub capability: Capability,
    /// Why, and what to use instead.
    pub reason: &'static str,
}

impl Unsupported {
    pub(crate) fn new(store: StoreKind, capability: Capability, reason: &'static str) -> Self {
        Self {
            store: store.as_str(),
            capability,
            reason,
        }
    }
}

impl From<Unsupported> for crate::error::StoreError {
    fn from(refused: Unsupported) -> Self {
        Self::Config {
            message: refused.reason.to_owned(),
        }
    }
}

/// Which kind of store a client's locks go to, as [`Client::store_kind`](crate::Client::store_kind)
/// names it. It compares equal to its name (`client.store_kind() == "quorum"`) and prints as
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreKind {
    /// A single primary, plain or behind Sentinel (`"redis"`).
    Redis,
    /// A Redis Cluster (`"cluster"`).
    Cluster,
    /// A Redlock quorum of independent primaries (`"quorum"`).
    Quorum,
    /// The in-process store (`"memory"`).
    Memory,
}

impl StoreKind {
    /// Its name: `"redis"`, `"cluster"`, `"quorum"` or `"memory"`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Redis => "redis",
            Self::Cluster => "cluster",
            Self::Quorum => "quorum",
            Self::Memory => "memory",
        }
    }
}

impl std::fmt::Display for StoreKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for StoreKind {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for StoreKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}
