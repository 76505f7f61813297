//! [`LeaseKind`]: what a lease is (a lock, permits, a read or write hold, one lock of a
//! multi-lock, an election's term, a job's run, a hierarchical lock's path), as the lease keeps it and the client's drain
//! lists it. Here, with the leases, so that the lock module does not import the drain (which
//! imports the client).

/// What a lease of [`Client::own_leases`](crate::Client::own_leases) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum LeaseKind {
    /// A lock ([`Client::lock`](crate::Client::lock)).
    Lock,
    /// Permits of a semaphore ([`Client::semaphore`](crate::Client::semaphore)).
    Permits,
    /// A read hold of a read-write lock ([`Client::rw_lock`](crate::Client::rw_lock)).
    Read,
    /// The write hold of a read-write lock.
    Write,
    /// One lock of a multi-lock ([`Client::multi_lock`](crate::Client::multi_lock)): one entry per lock.
    MultiLock,
    /// A leader's term in an election ([`Client::election`](crate::Client::election)).
    ElectionTerm,
    /// A scheduled job's run ([`Client::job`](crate::Client::job)).
    JobRun,
    /// A hierarchical lock's path, in any mode
    /// ([`Client::hierarchy_lock`](crate::Client::hierarchy_lock)).
    Hierarchy,
}

impl LeaseKind {
    /// A short lowercase name, for logs: `lock`, `permits`, `read`, `write`, `multi_lock`,
    /// `election_term`, `job_run`, `hierarchy`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Permits => "permits",
            Self::Read => "read",
            Self::Write => "write",
            Self::MultiLock => "multi_lock",
            Self::ElectionTerm => "election_term",
            Self::JobRun => "job_run",
            Self::Hierarchy => "hierarchy",
        }
    }

    /// The kind as a number, for a lease's atomic field ([`from_index`](Self::from_index)
    /// reads it back).
    pub(crate) fn index(self) -> u8 {
        match self {
            Self::Lock => 0,
            Self::Permits => 1,
            Self::Read => 2,
            Self::Write => 3,
            Self::MultiLock => 4,
            Self::ElectionTerm => 5,
            Self::JobRun => 6,
            Self::Hierarchy => 7,
        }
    }

    pub(crate) fn from_index(index: u8) -> Self {
        match index {
            1 => Self::Permits,
            2 => Self::Read,
            3 => Self::Write,
            4 => Self::MultiLock,
            5 => Self::ElectionTerm,
            6 => Self::JobRun,
            7 => Self::Hierarchy,
            _ => Self::Lock,
        }
    }
}

impl std::fmt::Display for LeaseKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
