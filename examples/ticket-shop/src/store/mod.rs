//! Where the shop keeps its data: sold seats, job runs and reports.
//!
//! The lock decides who may *try* to sell a seat; this store decides what is *written*. Every
//! write carries the fencing token of the lease it was made under, and the store refuses a
//! write whose fence is lower than one it has already seen for that record. A replica that
//! was paused past its lease's ttl (a GC pause, a stopped VM) and wakes up still believing it
//! holds the lock therefore cannot overwrite what the next holder wrote.
//!
//! Two implementations with the same rules: Redis, one primary or a cluster (each rule is one
//! Lua script, so the check and the write are atomic, and every replica sees the same
//! records) and memory (a mutex around a map, for one process).

mod memory;
mod redis;

use serde::{Deserialize, Serialize};

pub use self::memory::MemoryStore;
pub use self::redis::{Keys, RedisStore, sale_from_fields};

/// A sold seat.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sale {
    pub seat: u32,
    pub buyer: String,
    /// The fence of the seat lock the sale was made under.
    pub fence: u64,
    /// The replica that sold it.
    pub replica: String,
    /// When, in milliseconds since the Unix epoch (the store's clock).
    pub sold_at_ms: u64,
}

/// One run of a periodic job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRun {
    pub job: String,
    pub replica: String,
    pub fence: u64,
    /// Start and end of the work, in milliseconds since the Unix epoch (the store's clock).
    pub started_ms: u64,
    pub ended_ms: u64,
    /// Seats sold when the run looked.
    pub seats_sold: u64,
}

/// A report built by `POST /admin/reindex`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub replica: String,
    pub fence: u64,
    pub built_at_ms: u64,
    pub seats_sold: u64,
    /// Sales per replica, sorted by replica.
    pub sold_by_replica: Vec<(String, u64)>,
}

/// What a fenced write found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fenced {
    /// Written.
    Ok,
    /// Not written: the seat already has a buyer.
    Sold,
    /// Not written: a write with the newer fence `newer` got there first, so the caller's
    /// lease must have expired.
    Stale { newer: u64 },
}

/// The store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("Redis failed: {0}")]
    Redis(#[from] ::redis::RedisError),
    #[error("a stored record is unreadable: {0}")]
    Corrupt(String),
}

/// How many job runs and reports the store keeps.
pub const LOG_LEN: usize = 1000;

/// Which log a record goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Log {
    JobRuns,
    Reports,
}

impl Log {
    fn name(self) -> &'static str {
        match self {
            Self::JobRuns => "job-runs",
            Self::Reports => "reports",
        }
    }
}

/// The shop's store: Redis when `REDIS_URL` or `REDIS_CLUSTER_URLS` is set, else memory.
/// Cheap to clone.
#[derive(Clone, Debug)]
pub enum Store {
    Memory(MemoryStore),
    Redis(RedisStore),
}

impl Store {
    /// `"memory"`, `"redis"` (one primary) or `"redis-cluster"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Memory(_) => "memory",
            Self::Redis(r) => r.kind(),
        }
    }

    /// The store's clock, in milliseconds since the Unix epoch: Redis `TIME`, so that the
    /// records of replicas on different machines are on one clock.
    pub async fn now_ms(&self) -> Result<u64, StoreError> {
        match self {
            Self::Memory(_) => Ok(memory::now_ms()),
            Self::Redis(r) => r.now_ms().await,
        }
    }

    /// Records that the holder of `fence` is now checking out `seat`.
    pub async fn hold(&self, seat: u32, fence: u64) -> Result<Fenced, StoreError> {
        match self {
            Self::Memory(m) => Ok(m.hold(seat, fence)),
            Self::Redis(r) => r.hold(seat, fence).await,
        }
    }

    /// Sells `sale.seat` to `sale.buyer`, under `sale.fence`.
    pub async fn confirm(&self, sale: &Sale) -> Result<Fenced, StoreError> {
        match self {
            Self::Memory(m) => Ok(m.confirm(sale)),
            Self::Redis(r) => r.confirm(sale).await,
        }
    }

    /// The sale of `seat`, if it is sold.
    pub async fn sale(&self, seat: u32) -> Result<Option<Sale>, StoreError> {
        match self {
            Self::Memory(m) => Ok(m.sale(seat)),
            Self::Redis(r) => r.sale(seat).await,
        }
    }

    /// Every sale among seats `1..=seats`, by seat.
    pub async fn sales(&self, seats: u32) -> Result<Vec<Sale>, StoreError> {
        match self {
            Self::Memory(m) => Ok(m.sales(seats)),
            Self::Redis(r) => r.sales(seats).await,
        }
    }

    /// How many seats are sold.
    pub async fn sold_count(&self) -> Result<u64, StoreError> {
        match self {
            Self::Memory(m) => Ok(m.sold_count()),
            Self::Redis(r) => r.sold_count().await,
        }
    }

    /// Appends `record` to `log` under `fence`: refused ([`Fenced::Stale`]) if the log has
    /// seen a higher fence.
    pub async fn append<T: Serialize>(
        &self,
        log: Log,
        fence: u64,
        record: &T,
    ) -> Result<Fenced, StoreError> {
        let entry =
            serde_json::to_string(record).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        match self {
            Self::Memory(m) => Ok(m.append(log, fence, entry)),
            Self::Redis(r) => r.append(log, fence, &entry).await,
        }
    }

    /// The last `LOG_LEN` records of `log`, oldest first.
    pub async fn records<T: for<'de> Deserialize<'de>>(
        &self,
        log: Log,
    ) -> Result<Vec<T>, StoreError> {
        let entries = match self {
            Self::Memory(m) => m.entries(log),
            Self::Redis(r) => r.entries(log).await?,
        };
        entries
            .iter()
            .map(|e| serde_json::from_str(e).map_err(|err| StoreError::Corrupt(err.to_string())))
            .collect()
    }
}

/// Reads a script reply `{status, fence}`.
fn fenced_reply(status: &str, fence: u64) -> Result<Fenced, StoreError> {
    match status {
        "ok" => Ok(Fenced::Ok),
        "sold" => Ok(Fenced::Sold),
        "stale" => Ok(Fenced::Stale { newer: fence }),
        other => Err(StoreError::Corrupt(format!(
            "unexpected script reply {other:?}"
        ))),
    }
}
