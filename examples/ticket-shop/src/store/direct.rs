//! What the shop asks of Redis directly, besides its fenced records (`mod.rs`): the store's
//! clock, and an index of the sold seats so that listing them is one command.
//!
//! * The clock is Redis `TIME`, so that the records of replicas on different machines are on
//!   one clock (this process's clock in memory).
//! * The index (`ticket-shop:sold`, a set of seat numbers) is not the truth: each seat's
//!   fenced resource is. A seat is added after its sale is confirmed, and again whenever a
//!   checkout finds it sold, so an index that missed one (the replica died between the two
//!   writes) heals itself at the next checkout of that seat; meanwhile the seat is listed as
//!   available and its checkout answers `409` sold.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::AsyncCommands as _;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::StoreError;

/// How long a command may take before the shop answers 503, and how long one connection
/// attempt may take.
const TIMEOUT: Duration = Duration::from_secs(2);

/// The set of sold seat numbers. On a cluster, `TIME` goes to the master of its slot, so that
/// every replica reads the same server's clock, as on one primary.
pub const SOLD_KEY: &str = "ticket-shop:sold";

#[derive(Clone)]
pub(super) enum Direct {
    /// This process's clock and memory (one replica).
    Local(Arc<Mutex<BTreeSet<u32>>>),
    /// One Redis primary; reconnects by itself.
    Primary(ConnectionManager),
    /// A Redis Cluster; follows `MOVED`, refreshes its slot map and reconnects by itself.
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Direct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Local(_) => "Local",
            Self::Primary(_) => "Primary",
            Self::Cluster(_) => "Cluster",
        })
    }
}

/// `redis`'s commands run on either connection.
#[derive(Clone)]
enum Conn {
    Primary(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Primary(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Primary(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Primary(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

impl Direct {
    pub(super) fn local() -> Self {
        Self::Local(Arc::default())
    }

    /// Connects to `url`, failing at once if Redis cannot be reached.
    pub(super) async fn connect(url: &str) -> Result<Self, StoreError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(TIMEOUT))
            .set_response_timeout(Some(TIMEOUT))
            .set_number_of_retries(3);
        let conn = ConnectionManager::new_with_config(client, config).await?;
        let direct = Self::Primary(conn);
        direct.now_ms().await?;
        Ok(direct)
    }

    /// A connection to `url` made on first use, so that a process can start while Redis is
    /// down; each command fails until it answers.
    pub(super) fn connect_lazy(url: &str) -> Result<Self, StoreError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(TIMEOUT))
            .set_response_timeout(Some(TIMEOUT))
            .set_number_of_retries(3);
        Ok(Self::Primary(ConnectionManager::new_lazy_with_config(
            client, config,
        )?))
    }

    /// Connects to the Redis Cluster that the nodes `urls` belong to (one is enough).
    pub(super) async fn connect_cluster(urls: &[String]) -> Result<Self, StoreError> {
        let client = ClusterClientBuilder::new(urls.to_vec())
            .connection_timeout(TIMEOUT)
            .response_timeout(TIMEOUT)
            .retries(3)
            .build()?;
        // Bounded: the first connection tries each seed node in turn.
        let limit = TIMEOUT * 3;
        let conn = tokio::time::timeout(limit, client.get_async_connection())
            .await
            .map_err(|_| {
                StoreError::Redis(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no cluster connection within {limit:?}"),
                )))
            })??;
        let direct = Self::Cluster(conn);
        direct.now_ms().await?;
        Ok(direct)
    }

    /// Where the index lives.
    fn index(&self) -> Index<'_> {
        match self {
            Self::Local(sold) => Index::Local(sold),
            Self::Primary(c) => Index::Redis(Conn::Primary(c.clone())),
            Self::Cluster(c) => Index::Redis(Conn::Cluster(c.clone())),
        }
    }

    /// Milliseconds since the Unix epoch, on the store's clock.
    pub(super) async fn now_ms(&self) -> Result<u64, StoreError> {
        let time = redis::cmd("TIME");
        let (secs, micros): (u64, u64) = match self {
            Self::Local(_) => return Ok(local_now_ms()),
            Self::Primary(conn) => time.query_async(&mut conn.clone()).await?,
            Self::Cluster(conn) => {
                let route = Route::with_key(SOLD_KEY, SlotAddr::Master);
                let reply = conn
                    .clone()
                    .route_command(
                        time,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                    )
                    .await?;
                redis::from_redis_value(reply).map_err(redis::RedisError::from)?
            }
        };
        Ok(secs * 1000 + micros / 1000)
    }

    /// Adds `seat` to the index of sold seats.
    pub(super) async fn add_sold(&self, seat: u32) -> Result<(), StoreError> {
        match self.index() {
            Index::Local(sold) => {
                locked(sold).insert(seat);
                Ok(())
            }
            Index::Redis(mut conn) => Ok(conn.sadd(SOLD_KEY, seat).await?),
        }
    }

    /// The seats in the index, ascending.
    pub(super) async fn sold(&self) -> Result<Vec<u32>, StoreError> {
        match self.index() {
            Index::Local(sold) => Ok(locked(sold).iter().copied().collect()),
            Index::Redis(mut conn) => {
                let mut seats: Vec<u32> = conn.smembers(SOLD_KEY).await?;
                seats.sort_unstable();
                Ok(seats)
            }
        }
    }

    /// How many seats the index holds.
    pub(super) async fn sold_count(&self) -> Result<u64, StoreError> {
        match self.index() {
            Index::Local(sold) => Ok(locked(sold).len() as u64),
            Index::Redis(mut conn) => Ok(conn.scard(SOLD_KEY).await?),
        }
    }
}

enum Index<'a> {
    Local(&'a Mutex<BTreeSet<u32>>),
    Redis(Conn),
}

fn locked(sold: &Mutex<BTreeSet<u32>>) -> std::sync::MutexGuard<'_, BTreeSet<u32>> {
    // No await while it is held; a set of numbers is whole after any panic.
    sold.lock().unwrap_or_else(PoisonError::into_inner)
}

fn local_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
