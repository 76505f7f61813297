//! Where the shop keeps its data: sold seats, job runs and reports.
//!
//! The lock decides who may *try* to sell a seat; this store decides what is *written*. Every
//! record is a **fenced resource** of distlock's ([`distlock::Client::fenced`]): each write
//! carries the fencing token of the lease it was made under, and the resource refuses a write
//! whose fence is lower than one it has already accepted. A replica that was paused past its
//! lease's ttl (a GC pause, a stopped VM) and wakes up still believing it holds the lock
//! therefore cannot overwrite what the next holder wrote. The check and the write are one
//! script on Redis (one step in memory), so nothing comes between them.
//!
//! | resource | guarded by the lock | values |
//! |---|---|---|
//! | `seat:<n>` | `seat:<n>` (the checkout) | once sold: `buyer`, `replica`, `sold_at_ms`, `fence` |
//! | `log:job-runs` | `job:settle-payments` | one JSON job run per key, the key being its fence (20 digits) |
//! | `log:reports` | `admin/reindex` (the `LockLayer` of `POST /admin/reindex`) | one JSON report per key, likewise |
//!
//! On Redis they live under the prefix `ticket-shop`
//! (`ticket-shop:fenced:{seat:7}` holds the values, `ticket-shop:fenced-guard:{seat:7}` the
//! last fence); on a cluster each resource is in its own name's slot, so the seats spread over
//! the masters. Beside them, the shop keeps an index of the sold seats, so that listing them
//! is one command, and reads the store's clock (`direct.rs`).

mod direct;

use distlock::fenced::{FencedResource, MAX_CHANGES};
use distlock::{Client, FencedError, StoreKind};
use serde::{Deserialize, Serialize};

use self::direct::Direct;
pub use self::direct::SOLD_KEY;

/// The key prefix of the shop's records (the locks keep distlock's default, `distlock`).
pub const PREFIX: &str = "ticket-shop";

/// How many job runs and reports the store keeps (the oldest go first).
pub const LOG_LEN: usize = 100;

/// How many records one listing reads at once.
const READS_AT_ONCE: usize = 128;

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
    #[error("the records could not be used: {0}")]
    Records(#[from] FencedError),
    #[error("a stored record is unreadable: {0}")]
    Corrupt(String),
}

/// Which log a record goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Log {
    JobRuns,
    Reports,
}

impl Log {
    /// The log's fenced resource.
    pub fn resource(self) -> &'static str {
        match self {
            Self::JobRuns => "log:job-runs",
            Self::Reports => "log:reports",
        }
    }
}

/// The fenced resource of seat `seat`: the name of the lock that guards it.
pub fn seat_resource(seat: u32) -> String {
    format!("seat:{seat}")
}

/// The key of a log entry written under `fence`: 20 digits, so that keys sort as fences do.
pub fn entry_key(fence: u64) -> String {
    format!("{fence:020}")
}

/// The shop's store: fenced resources on Redis when `REDIS_URL` or `REDIS_CLUSTER_URLS` is
/// set, else in memory. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    records: Client,
    direct: Direct,
}

impl Store {
    /// In this process's memory (one replica).
    pub fn in_memory() -> Self {
        Self {
            records: Client::builder().prefix(PREFIX).in_memory(),
            direct: Direct::local(),
        }
    }

    /// On the Redis at `url`, failing at once if it cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(Self {
            records: Client::builder()
                .prefix(PREFIX)
                .connect(url)
                .await
                .map_err(FencedError::from)?,
            direct: Direct::connect(url).await?,
        })
    }

    /// On the Redis at `url`, connecting on first use: a process can start while Redis is
    /// down, and its requests fail with a store error until Redis answers.
    pub async fn connect_lazy(url: &str) -> Result<Self, StoreError> {
        Ok(Self {
            records: Client::builder()
                .prefix(PREFIX)
                .lazy(true)
                .connect(url)
                .await
                .map_err(FencedError::from)?,
            direct: Direct::connect_lazy(url)?,
        })
    }

    /// On the Redis Cluster that the nodes `urls` belong to (one is enough).
    pub async fn connect_cluster(urls: &[String]) -> Result<Self, StoreError> {
        Ok(Self {
            records: Client::builder()
                .prefix(PREFIX)
                .connect_cluster(urls)
                .await
                .map_err(FencedError::from)?,
            direct: Direct::connect_cluster(urls).await?,
        })
    }

    /// `"memory"`, `"redis"` (one primary) or `"redis-cluster"`.
    pub fn kind(&self) -> &'static str {
        match self.records.store_kind() {
            StoreKind::Memory => "memory",
            StoreKind::Cluster => "redis-cluster",
            _ => "redis",
        }
    }

    /// The store's clock, in milliseconds since the Unix epoch: Redis `TIME`, so that the
    /// records of replicas on different machines are on one clock.
    pub async fn now_ms(&self) -> Result<u64, StoreError> {
        self.direct.now_ms().await
    }

    fn resource(&self, name: &str) -> Result<FencedResource, StoreError> {
        Ok(self.records.fenced(name)?)
    }

    /// Records that the holder of `fence` is now checking out `seat`: from now on, a holder
    /// with an older fence cannot write to the seat.
    pub async fn hold(&self, seat: u32, fence: u64) -> Result<Fenced, StoreError> {
        let outcome = self
            .resource(&seat_resource(seat))?
            .update(fence)
            .require_absent("buyer")
            .apply()
            .await;
        self.indexed(seat, fenced(outcome)?).await
    }

    /// Sells `sale.seat` to `sale.buyer`, under `sale.fence`, if it has no buyer yet.
    pub async fn confirm(&self, sale: &Sale) -> Result<Fenced, StoreError> {
        let outcome = self
            .resource(&seat_resource(sale.seat))?
            .update(sale.fence)
            .require_absent("buyer")
            .set("buyer", &sale.buyer)
            .set("replica", &sale.replica)
            .set("sold_at_ms", sale.sold_at_ms.to_string())
            .set("fence", sale.fence.to_string())
            .apply()
            .await;
        match fenced(outcome)? {
            Fenced::Ok => self
                .indexed(sale.seat, Fenced::Sold)
                .await
                .map(|_| Fenced::Ok),
            other => self.indexed(sale.seat, other).await,
        }
    }

    /// Puts a seat found sold in the index (again: it heals an index that missed it), and
    /// passes `outcome` on. The sale stands whatever the index says, so a failure here is only
    /// logged.
    async fn indexed(&self, seat: u32, outcome: Fenced) -> Result<Fenced, StoreError> {
        if outcome == Fenced::Sold
            && let Err(err) = self.direct.add_sold(seat).await
        {
            tracing::warn!(seat, error = %err, "the index of sold seats missed a seat");
        }
        Ok(outcome)
    }

    /// The sale of `seat`, if it is sold.
    pub async fn sale(&self, seat: u32) -> Result<Option<Sale>, StoreError> {
        let snapshot = self.resource(&seat_resource(seat))?.read().await?;
        let Some(buyer) = snapshot.text("buyer") else {
            return Ok(None);
        };
        let number = |name: &str| {
            snapshot
                .text(name)
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| {
                    StoreError::Corrupt(format!("seat {seat}: field {name} is not a number"))
                })
        };
        Ok(Some(Sale {
            seat,
            buyer: buyer.to_owned(),
            fence: number("fence")?,
            replica: snapshot.text("replica").unwrap_or_default().to_owned(),
            sold_at_ms: number("sold_at_ms")?,
        }))
    }

    /// The sold seats among `1..=seats`, ascending, from the index (one command).
    pub async fn sold_seats(&self, seats: u32) -> Result<Vec<u32>, StoreError> {
        let mut sold = self.direct.sold().await?;
        sold.retain(|seat| (1..=seats).contains(seat));
        Ok(sold)
    }

    /// Every sale among seats `1..=seats`, by seat: the seats of the index, each read from
    /// its record, in bursts of concurrent reads (on Redis, pipelined per node).
    pub async fn sales(&self, seats: u32) -> Result<Vec<Sale>, StoreError> {
        let sold = self.sold_seats(seats).await?;
        let mut sales = Vec::with_capacity(sold.len());
        for chunk in sold.chunks(READS_AT_ONCE) {
            let reads = chunk.iter().map(|&seat| self.sale(seat));
            for sale in futures_util::future::join_all(reads).await {
                sales.extend(sale?);
            }
        }
        Ok(sales)
    }

    /// How many seats are sold (the index's count).
    pub async fn sold_count(&self) -> Result<u64, StoreError> {
        self.direct.sold_count().await
    }

    /// Appends `record` to `log` under `fence`: refused ([`Fenced::Stale`]) if the log has
    /// accepted a higher fence. A record is keyed by its fence, so a second append under the
    /// same lease replaces the first; the oldest records beyond [`LOG_LEN`] are deleted in the
    /// same write.
    pub async fn append<T: Serialize>(
        &self,
        log: Log,
        fence: u64,
        record: &T,
    ) -> Result<Fenced, StoreError> {
        let entry =
            serde_json::to_string(record).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let resource = self.resource(log.resource())?;
        let key = entry_key(fence);
        // What to trim: read first. A write that lands in between (an older holder's, before
        // this one raised the fence) only makes the log one longer until the next append.
        let existing = resource.read().await?.values;
        let after = existing.len() + usize::from(!existing.contains_key(&key));
        let excess = after.saturating_sub(LOG_LEN).min(MAX_CHANGES - 1);
        let mut update = resource.update(fence).set(&key, entry);
        for old in existing.keys().filter(|k| **k != key).take(excess) {
            update = update.delete(old);
        }
        fenced(update.apply().await)
    }

    /// The last [`LOG_LEN`] records of `log`, oldest (lowest fence) first.
    pub async fn records<T: for<'de> Deserialize<'de>>(
        &self,
        log: Log,
    ) -> Result<Vec<T>, StoreError> {
        let snapshot = self.resource(log.resource())?.read().await?;
        snapshot
            .values
            .values()
            .map(|e| serde_json::from_slice(e).map_err(|err| StoreError::Corrupt(err.to_string())))
            .collect()
    }
}

/// A fenced write's outcome: a stale fence and a seat with a buyer are answers, not failures.
fn fenced(outcome: Result<(), FencedError>) -> Result<Fenced, StoreError> {
    match outcome {
        Ok(()) => Ok(Fenced::Ok),
        Err(FencedError::Stale { last, .. }) => Ok(Fenced::Stale { newer: last }),
        Err(FencedError::Conflict { .. }) => Ok(Fenced::Sold),
        Err(other) => Err(other.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sale(seat: u32, fence: u64) -> Sale {
        Sale {
            seat,
            buyer: "ada".into(),
            fence,
            replica: "r1".into(),
            sold_at_ms: 1,
        }
    }

    #[tokio::test]
    async fn a_lower_fence_cannot_sell_after_a_newer_hold() {
        let store = Store::in_memory();
        assert_eq!(store.hold(7, 10).await.expect("store"), Fenced::Ok);
        // A newer lock holder took over while the first was paused...
        assert_eq!(store.hold(7, 11).await.expect("store"), Fenced::Ok);
        // ...so the first one's confirmation is refused.
        assert_eq!(
            store.confirm(&sale(7, 10)).await.expect("store"),
            Fenced::Stale { newer: 11 }
        );
        assert_eq!(
            store.confirm(&sale(7, 11)).await.expect("store"),
            Fenced::Ok
        );
        assert_eq!(
            store.confirm(&sale(7, 12)).await.expect("store"),
            Fenced::Sold
        );
        assert_eq!(store.hold(7, 13).await.expect("store"), Fenced::Sold);
        assert_eq!(
            store.sale(7).await.expect("store").map(|s| s.fence),
            Some(11)
        );
        assert_eq!(store.sold_count().await.expect("store"), 1);
        assert_eq!(store.sold_seats(50).await.expect("store"), [7]);
        assert_eq!(store.sales(50).await.expect("store").len(), 1);
    }

    #[tokio::test]
    async fn logs_refuse_lower_fences_and_stay_bounded() {
        let store = Store::in_memory();
        assert_eq!(
            store.append(Log::JobRuns, 5, &"a").await.expect("store"),
            Fenced::Ok
        );
        assert_eq!(
            store.append(Log::JobRuns, 4, &"b").await.expect("store"),
            Fenced::Stale { newer: 5 }
        );
        for fence in 6..6 + LOG_LEN as u64 {
            store
                .append(Log::JobRuns, fence, &fence.to_string())
                .await
                .expect("store");
        }
        let entries: Vec<String> = store.records(Log::JobRuns).await.expect("store");
        assert_eq!(entries.len(), LOG_LEN);
        assert_eq!(entries.first().map(String::as_str), Some("6"));
        assert!(
            store
                .records::<String>(Log::Reports)
                .await
                .expect("store")
                .is_empty()
        );
    }

    #[test]
    fn entry_keys_sort_as_fences() {
        assert!(entry_key(9) < entry_key(10));
        assert!(entry_key(u64::MAX - 1) < entry_key(u64::MAX));
        assert_eq!(entry_key(u64::MAX).len(), 20);
    }
}
