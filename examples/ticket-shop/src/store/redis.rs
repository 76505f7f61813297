//! The Redis store: what every replica sees. Each fenced write is one Lua script, so the
//! fence check and the write cannot be interleaved with another replica's.
//!
//! Keys (see [`seat_key`] and friends):
//!
//! | key | type | what |
//! |---|---|---|
//! | `ticket-shop:seat:<n>` | hash | `fence` (the highest that touched the seat), and once sold `buyer`, `replica`, `sold_at_ms` |
//! | `ticket-shop:sold` | set | the numbers of the sold seats |
//! | `ticket-shop:log:<name>` | list | job runs / reports as JSON, oldest first |
//! | `ticket-shop:log:<name>:fence` | string | the highest fence appended to that log |

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script};

use super::{Fenced, LOG_LEN, Log, Sale, StoreError, fenced_reply};

static HOLD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("hold.lua")));
static CONFIRM: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("confirm.lua")));
static APPEND: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("append.lua")));

/// The hash of seat `seat`.
pub fn seat_key(seat: u32) -> String {
    format!("ticket-shop:seat:{seat}")
}

/// The set of sold seat numbers.
pub const SOLD_KEY: &str = "ticket-shop:sold";

/// The list holding `log`.
pub fn log_key(log: Log) -> String {
    format!("ticket-shop:log:{}", log.name())
}

fn log_fence_key(log: Log) -> String {
    format!("ticket-shop:log:{}:fence", log.name())
}

#[derive(Clone)]
pub struct RedisStore {
    conn: ConnectionManager,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to `url`, failing at once if Redis cannot be reached. Commands give up after
    /// 2 s (the shop answers 503 then); the connection manager reconnects by itself.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_number_of_retries(3);
        let mut conn = ConnectionManager::new_with_config(client, config).await?;
        let () = redis::cmd("PING").query_async(&mut conn).await?;
        Ok(Self { conn })
    }

    pub(super) async fn now_ms(&self) -> Result<u64, StoreError> {
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(secs * 1000 + micros / 1000)
    }

    pub(super) async fn hold(&self, seat: u32, fence: u64) -> Result<Fenced, StoreError> {
        let (status, stored): (String, u64) = HOLD
            .key(seat_key(seat))
            .arg(fence)
            .invoke_async(&mut self.conn.clone())
            .await?;
        fenced_reply(&status, stored)
    }

    pub(super) async fn confirm(&self, sale: &Sale) -> Result<Fenced, StoreError> {
        let (status, stored): (String, u64) = CONFIRM
            .key(seat_key(sale.seat))
            .key(SOLD_KEY)
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
        let fields: Vec<(String, String)> = self.conn.clone().hgetall(seat_key(seat)).await?;
        sale_from_fields(seat, &fields)
    }

    pub(super) async fn sales(&self, seats: u32) -> Result<Vec<Sale>, StoreError> {
        // One round trip for all seats.
        let mut pipe = redis::pipe();
        for seat in 1..=seats {
            pipe.hgetall(seat_key(seat));
        }
        let all: Vec<Vec<(String, String)>> = pipe.query_async(&mut self.conn.clone()).await?;
        let mut sales = Vec::new();
        for (seat, fields) in (1..=seats).zip(&all) {
            sales.extend(sale_from_fields(seat, fields)?);
        }
        Ok(sales)
    }

    pub(super) async fn sold_count(&self) -> Result<u64, StoreError> {
        Ok(self.conn.clone().scard(SOLD_KEY).await?)
    }

    pub(super) async fn append(
        &self,
        log: Log,
        fence: u64,
        entry: &str,
    ) -> Result<Fenced, StoreError> {
        let (status, stored): (String, u64) = APPEND
            .key(log_fence_key(log))
            .key(log_key(log))
            .arg(fence)
            .arg(entry)
            .arg(LOG_LEN)
            .invoke_async(&mut self.conn.clone())
            .await?;
        fenced_reply(&status, stored)
    }

    pub(super) async fn entries(&self, log: Log) -> Result<Vec<String>, StoreError> {
        Ok(self.conn.clone().lrange(log_key(log), 0, -1).await?)
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
