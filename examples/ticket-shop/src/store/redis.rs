//! The Redis store: what every replica sees. Each fenced write is one Lua script, so the
//! fence check and the write cannot be interleaved with another replica's.
//!
//! It runs on one Redis primary ([`RedisStore::connect`]) or on a Redis Cluster
//! ([`RedisStore::connect_cluster`]); the scripts and commands are the same, only the key
//! names differ ([`Keys`]).
//!
//! Keys (see [`Keys`]; on a cluster, `ticket-shop` is spelt `{ticket-shop}`):
//!
//! | key | type | what |
//! |---|---|---|
//! | `ticket-shop:seat:<n>` | hash | `fence` (the highest that touched the seat), and once sold `buyer`, `replica`, `sold_at_ms` |
//! | `ticket-shop:sold` | set | the numbers of the sold seats |
//! | `ticket-shop:log:<name>` | list | job runs / reports as JSON, oldest first |
//! | `ticket-shop:log:<name>:fence` | string | the highest fence appended to that log |

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{AsyncCommands, Cmd, Pipeline, RedisFuture, Script, Value};

use super::{Fenced, LOG_LEN, Log, Sale, StoreError, fenced_reply};

static HOLD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("hold.lua")));
static CONFIRM: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("confirm.lua")));
static APPEND: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("append.lua")));

/// How long a command may take before the shop answers 503, and how long one connection
/// attempt may take.
const TIMEOUT: Duration = Duration::from_secs(2);

/// The shop's key names.
///
/// On one primary they are `ticket-shop:...`, as they have always been. On a cluster a script
/// or a pipeline may only touch keys of one hash slot, and `confirm.lua` writes a seat and the
/// set of sold seats, `append.lua` a log and its fence, and the seat listing is one pipeline
/// over every seat. So there every key starts with the hash tag `{ticket-shop}`: they all hash
/// to one slot, and the whole shop lives on one master. That is fine for this example (one
/// show, at most 10 000 small records): the traffic is distlock's (a rate-limit check on
/// every request, a lock per checkout), and its keys are spread over the cluster by lock name
/// and client. A shop selling many shows would tag per show instead (`{show:42}:seat:7`,
/// `{show:42}:sold`): every script still touches one show only, and the shows spread over
/// the masters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keys {
    prefix: &'static str,
}

impl Keys {
    /// On one Redis primary: `ticket-shop:...`.
    pub const PRIMARY: Self = Self {
        prefix: "ticket-shop",
    };
    /// On a Redis Cluster: `{ticket-shop}:...`, all in one slot.
    pub const CLUSTER: Self = Self {
        prefix: "{ticket-shop}",
    };

    /// The hash of seat `seat`.
    pub fn seat(self, seat: u32) -> String {
        format!("{}:seat:{seat}", self.prefix)
    }

    /// The set of sold seat numbers.
    pub fn sold(self) -> String {
        format!("{}:sold", self.prefix)
    }

    /// The list holding `log`.
    pub fn log(self, log: Log) -> String {
        format!("{}:log:{}", self.prefix, log.name())
    }

    /// The highest fence appended to `log`.
    pub fn log_fence(self, log: Log) -> String {
        format!("{}:log:{}:fence", self.prefix, log.name())
    }
}

/// A connection to one primary or to a cluster; `redis`'s commands and scripts run on either.
#[derive(Clone)]
enum Conn {
    /// Reconnects by itself.
    Primary(ConnectionManager),
    /// Follows `MOVED` and `ASK`, refreshes its slot map and reconnects by itself.
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

#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    keys: Keys,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("kind", &self.kind())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to `url`, failing at once if Redis cannot be reached. Commands give up after
    /// 2 s (the shop answers 503 then); the connection manager reconnects by itself.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(TIMEOUT))
            .set_response_timeout(Some(TIMEOUT))
            .set_number_of_retries(3);
        let mut conn = ConnectionManager::new_with_config(client, config).await?;
        let () = redis::cmd("PING").query_async(&mut conn).await?;
        Ok(Self {
            conn: Conn::Primary(conn),
            keys: Keys::PRIMARY,
        })
    }

    /// Connects to the Redis Cluster that the nodes `urls` belong to (one is enough; the
    /// others are discovered), failing at once if none can be reached or they are not in
    /// cluster mode. Commands give up after 2 s, redirects and retries included; the
    /// connection follows `MOVED` and `ASK` and reconnects by itself.
    pub async fn connect_cluster(urls: &[String]) -> Result<Self, StoreError> {
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
        let store = Self {
            conn: Conn::Cluster(conn),
            keys: Keys::CLUSTER,
        };
        // The master of the shop's slot answers (the slot is served).
        store.now_ms().await?;
        Ok(store)
    }

    /// `"redis"` (one primary) or `"redis-cluster"`.
    pub fn kind(&self) -> &'static str {
        match self.conn {
            Conn::Primary(_) => "redis",
            Conn::Cluster(_) => "redis-cluster",
        }
    }

    /// The names of the shop's keys in this store.
    pub fn keys(&self) -> Keys {
        self.keys
    }

    pub(super) async fn now_ms(&self) -> Result<u64, StoreError> {
        let time = redis::cmd("TIME");
        let (secs, micros): (u64, u64) = match &self.conn {
            Conn::Primary(conn) => time.query_async(&mut conn.clone()).await?,
            // A keyless command would go to any node. Ask the master that holds the shop's
            // records, so that every replica reads the same clock, as on one primary.
            Conn::Cluster(conn) => {
                let route = Route::with_key(self.keys.sold(), SlotAddr::Master);
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

    pub(super) async fn hold(&self, seat: u32, fence: u64) -> Result<Fenced, StoreError> {
        let (status, stored): (String, u64) = HOLD
            .key(self.keys.seat(seat))
            .arg(fence)
            .invoke_async(&mut self.conn.clone())
            .await?;
        fenced_reply(&status, stored)
    }

    pub(super) async fn confirm(&self, sale: &Sale) -> Result<Fenced, StoreError> {
        let (status, stored): (String, u64) = CONFIRM
            .key(self.keys.seat(sale.seat))
            .key(self.keys.sold())
            .arg(sale.fence)
            .arg(&sale.buyer)
            .arg(&sale.replica)
            .arg(sale.sold_at_ms)
            .arg(sale.seat)
            .invoke_async(&mut self.conn.clone())
            .await?;
        fenced_reply(&status, stored)
    }

    pub(super) async fn sale(&self, seat: u32) -> Result<Option<Sale>, StoreError> {
        let fields: Vec<(String, String)> = self.conn.clone().hgetall(self.keys.seat(seat)).await?;
        sale_from_fields(seat, &fields)
    }

    pub(super) async fn sales(&self, seats: u32) -> Result<Vec<Sale>, StoreError> {
        // One round trip for all seats (on a cluster too: they share a slot).
        let mut pipe = redis::pipe();
        for seat in 1..=seats {
            pipe.hgetall(self.keys.seat(seat));
        }
        let all: Vec<Vec<(String, String)>> = pipe.query_async(&mut self.conn.clone()).await?;
        let mut sales = Vec::new();
        for (seat, fields) in (1..=seats).zip(&all) {
            sales.extend(sale_from_fields(seat, fields)?);
        }
        Ok(sales)
    }

    pub(super) async fn sold_count(&self) -> Result<u64, StoreError> {
        Ok(self.conn.clone().scard(self.keys.sold()).await?)
    }

    pub(super) async fn append(
        &self,
        log: Log,
        fence: u64,
        entry: &str,
    ) -> Result<Fenced, StoreError> {
        let (status, stored): (String, u64) = APPEND
            .key(self.keys.log_fence(log))
            .key(self.keys.log(log))
            .arg(fence)
            .arg(entry)
            .arg(LOG_LEN)
            .invoke_async(&mut self.conn.clone())
            .await?;
        fenced_reply(&status, stored)
    }

    pub(super) async fn entries(&self, log: Log) -> Result<Vec<String>, StoreError> {
        Ok(self.conn.clone().lrange(self.keys.log(log), 0, -1).await?)
    }
}

/// A seat hash as a sale, or `None` if the seat has no buyer.
pub fn sale_from_fields(
    seat: u32,
    fields: &[(String, String)],
) -> Result<Option<Sale>, StoreError> {
    let get = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let Some(buyer) = get("buyer") else {
        return Ok(None);
    };
    let number = |name: &str| {
        get(name)
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| {
                StoreError::Corrupt(format!("seat {seat}: field {name} is not a number"))
            })
    };
    Ok(Some(Sale {
        seat,
        buyer: buyer.to_owned(),
        fence: number("fence")?,
        replica: get("replica").unwrap_or_default().to_owned(),
        sold_at_ms: number("sold_at_ms")?,
    }))
}

#[cfg(test)]
mod tests {
    use redis::cluster_routing::Slot;

    use super::*;

    fn all(keys: Keys) -> Vec<String> {
        let mut all = vec![keys.seat(1), keys.seat(10_000), keys.sold()];
        for log in [Log::JobRuns, Log::Reports] {
            all.extend([keys.log(log), keys.log_fence(log)]);
        }
        all
    }

    #[test]
    fn keys_on_one_primary_keep_their_names() {
        assert_eq!(
            all(Keys::PRIMARY),
            [
                "ticket-shop:seat:1",
                "ticket-shop:seat:10000",
                "ticket-shop:sold",
                "ticket-shop:log:job-runs",
                "ticket-shop:log:job-runs:fence",
                "ticket-shop:log:reports",
                "ticket-shop:log:reports:fence",
            ]
        );
    }

    #[test]
    fn keys_on_a_cluster_share_one_slot() {
        let keys = all(Keys::CLUSTER);
        assert_eq!(keys[0], "{ticket-shop}:seat:1");
        let slot = Slot::for_key(&keys[0]);
        for key in &keys {
            assert_eq!(Slot::for_key(key), slot, "{key}");
        }
        // Without the tag they would not.
        assert_ne!(
            Slot::for_key("ticket-shop:seat:1"),
            Slot::for_key("ticket-shop:sold")
        );
    }
}
