//! The single-primary Redis store: scripts over a multiplexed `ConnectionManager` (which
//! reconnects by itself), plus a second, lazily connected RESP3 connection for release
//! wake-ups that resubscribes after a reconnect.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ProtocolVersion, PushInfo, PushKind, Value};

use super::batch::{Batch, Batcher};
use super::lua::Lua;
use super::wakeups::Subscriber;
use super::{
    AcquireReply, HandoffReply, Held, RateReply, RateRequest, RenewItem, Verdict, Waits, Wakeups,
    millis,
};
use crate::error::StoreError;
use crate::keys::LockKeys;
use crate::ratelimit::Spec;
use crate::token::Token;

static ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../scripts/fence.lua"),
        include_str!("../scripts/acquire.lua"),
    ))
});
static HANDOFF: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../scripts/fence.lua"),
        include_str!("../scripts/handoff.lua"),
    ))
});
static RELEASE: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../scripts/release.lua")));
static RENEW: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../scripts/renew.lua")));
static UNMARK: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../scripts/unmark.lua")));
/// One script for every rate-limit check: the shared helpers, one file per algorithm, then
/// the two-phase driver (see `ratelimit.lua` for the contract).
static RATE_LIMIT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../scripts/ratelimit/common.lua"),
        include_str!("../scripts/ratelimit/gcra.lua"),
        include_str!("../scripts/ratelimit/token_bucket.lua"),
        include_str!("../scripts/ratelimit/fixed_window.lua"),
        include_str!("../scripts/ratelimit/sliding_window.lua"),
        include_str!("../scripts/ratelimit/sliding_log.lua"),
        include_str!("../scripts/ratelimit.lua"),
    ))
});

/// Connection settings, validated by the client builder.
#[derive(Clone, Debug)]
pub(crate) struct RedisSettings {
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) reconnect_retries: usize,
}

/// Most calls of one kind on the wire at once (see `batch.rs`).
const MAX_IN_FLIGHT: usize = 8;
/// Most items in one batched script call (keeps each call short on the server).
const MAX_BATCH: usize = 64;
/// A queue this long is sent at once rather than at the next flush: big enough to share the
/// cost of a call, small enough that several calls keep the server busy while the client
/// works (measured with the benchmark's lock_uncontended_parallel, see BENCHMARKS.md).
const FLUSH_AT: usize = 6;

#[derive(Clone)]
pub(crate) struct RedisStore {
    conn: ConnectionManager,
    settings: RedisSettings,
    wakeups: Arc<Wakeups>,
    acquires: Batcher<Acquires>,
    releases: Batcher<Releases>,
    rates: Batcher<Rates>,
}

impl RedisStore {
    /// Connects (eagerly, so a wrong URL or password fails here, once) and prepares the lazy
    /// pub/sub connection.
    pub(crate) async fn connect(
        info: redis::ConnectionInfo,
        settings: RedisSettings,
    ) -> Result<Self, StoreError> {
        let client = redis::Client::open(info.clone())?;
        // One plain attempt first: the connection manager retries its first connection on
        // every error, wrong credentials included, which would turn a clear `Auth` error into
        // a slow timeout. Reconnects later are the manager's job.
        let probe = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(settings.connect_timeout))
            .set_response_timeout(Some(settings.response_timeout));
        let mut probe = client
            .get_multiplexed_async_connection_with_config(&probe)
            .await
            .map_err(|e| StoreError::from(e).with_deadline(settings.connect_timeout))?;
        check_version(&mut probe).await?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(settings.response_timeout))
            .set_connection_timeout(Some(settings.connect_timeout))
            .set_number_of_retries(settings.reconnect_retries)
            .set_max_delay(Duration::from_secs(1));
        let limit = settings.connect_timeout.saturating_mul(2);
        let conn = tokio::time::timeout(limit, ConnectionManager::new_with_config(client, config))
            .await
            .map_err(|_| StoreError::Timeout { after: limit })??;

        let wakeups = Wakeups::new();
        match PubSubLink::new(&info, &settings, &wakeups) {
            Ok(link) => wakeups.set_link(Box::new(link)),
            // Waiters then poll with backoff; say so once.
            Err(err) => tracing::warn!(
                error = %err,
                "distlock: no pub/sub connection for release wake-ups; waiters will poll"
            ),
        }
        Ok(Self {
            acquires: batcher(Acquires { conn: conn.clone() }, &settings),
            releases: batcher(Releases { conn: conn.clone() }, &settings),
            rates: batcher(Rates { conn: conn.clone() }, &settings),
            conn,
            settings,
            wakeups,
        })
    }

    pub(crate) fn wakeups(&self) -> &Arc<Wakeups> {
        &self.wakeups
    }

    pub(crate) fn op_timeout(&self) -> Duration {
        self.settings.response_timeout
    }

    pub(crate) fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    pub(crate) async fn acquire(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl: Duration,
        waits: Waits,
    ) -> Result<AcquireReply, StoreError> {
        let item = AcquireItem {
            keys: keys.clone(),
            token: token.clone(),
            ttl_ms: millis(ttl),
            waits,
        };
        self.acquires
            .run(item)
            .await
            .map_err(|e| e.with_deadline(self.op_timeout()))
    }

    pub(crate) async fn release(&self, keys: &LockKeys, token: &Token) -> Result<Held, StoreError> {
        let item = ReleaseItem {
            keys: keys.clone(),
            token: token.clone(),
        };
        self.releases
            .run(item)
            .await
            .map_err(|e| e.with_deadline(self.op_timeout()))
    }

    /// Passes a held lock from `from` to `to` with a new ttl (`handoff.lua`). Not batched: it
    /// only runs for a contended lock.
    pub(crate) async fn handoff(
        &self,
        keys: &LockKeys,
        from: &Token,
        to: &Token,
        ttl: Duration,
    ) -> Result<HandoffReply, StoreError> {
        let mut cmd = HANDOFF.call(2, 4, 320);
        cmd.arg(&keys.lock)
            .arg(&*keys.fence)
            .arg(from.as_str())
            .arg(to.as_str())
            .arg(millis(ttl))
            .arg(&keys.channel);
        let code: i64 = HANDOFF
            .invoke(&cmd, &self.conn)
            .await
            .map_err(|e| StoreError::from(e).with_deadline(self.op_timeout()))?;
        HandoffReply::from_code(code)
    }

    /// Takes back a starving waiter's mark (`unmark.lua`). Not batched: it only runs when a
    /// waiter that waited long gives up.
    pub(crate) async fn unmark(&self, keys: &LockKeys) -> Result<(), StoreError> {
        let mut cmd = UNMARK.call(1, 0, 64);
        cmd.arg(&keys.lock);
        let _: i64 = UNMARK
            .invoke(&cmd, &self.conn)
            .await
            .map_err(|e| StoreError::from(e).with_deadline(self.op_timeout()))?;
        Ok(())
    }

    pub(crate) async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<Held>, StoreError> {
        let mut cmd = RENEW.call(items.len(), 2 * items.len(), 96 * items.len());
        for item in items {
            cmd.arg(item.key);
        }
        for item in items {
            cmd.arg(item.token.as_str());
        }
        for item in items {
            cmd.arg(millis(item.ttl));
        }
        let codes: Vec<i64> = RENEW
            .invoke(&cmd, &self.conn)
            .await
            .map_err(|e| StoreError::from(e).with_deadline(self.op_timeout()))?;
        if codes.len() != items.len() {
            return Err(StoreError::Protocol {
                message: format!("renew answered {} items for {}", codes.len(), items.len()),
            });
        }
        codes.into_iter().map(Held::from_reply).collect()
    }
}

/// Refuses a server older than [`MIN_REDIS_VERSION`](crate::MIN_REDIS_VERSION) with a clear
/// error, instead of failing later inside a script (after a lock was already taken). A server
/// that does not answer `INFO server` (an ACL that forbids it) or reports no version is let
/// through; one that wants credentials the URL does not carry (`NOAUTH`) is an
/// [`Auth`](StoreError::Auth) error here, not at the first lock.
async fn check_version(conn: &mut redis::aio::MultiplexedConnection) -> Result<(), StoreError> {
    let info = match redis::cmd("INFO")
        .arg("server")
        .query_async::<String>(conn)
        .await
    {
        Ok(info) => info,
        Err(err) => {
            return match StoreError::from(err) {
                auth @ StoreError::Auth { .. } => Err(auth),
                _ => Ok(()),
            };
        }
    };
    match info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
    {
        Some(version) if !version_supported(version.trim()) => Err(StoreError::Unsupported {
            version: version.trim().to_owned(),
        }),
        _ => Ok(()),
    }
}

/// Whether `major.minor[.patch]` is at least [`MIN_REDIS_VERSION`](crate::MIN_REDIS_VERSION);
/// an unparsable version is given the benefit of the doubt.
fn version_supported(version: &str) -> bool {
    let parse = |v: &str| -> Option<(u32, u32)> {
        let mut parts = v.split('.');
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    };
    match (parse(version), parse(crate::MIN_REDIS_VERSION)) {
        (Some(have), Some(need)) => have >= need,
        _ => true,
    }
}

fn batcher<B: Batch>(op: B, settings: &RedisSettings) -> Batcher<B> {
    Batcher::new(
        op,
        MAX_IN_FLIGHT,
        MAX_BATCH,
        FLUSH_AT,
        settings.response_timeout,
    )
}

/// One lock to acquire, owned so it can wait in a batch.
pub(crate) struct AcquireItem {
    keys: LockKeys,
    token: Token,
    ttl_ms: u64,
    waits: Waits,
}

/// Acquires, many per call (`acquire.lua`).
#[derive(Clone)]
pub(crate) struct Acquires {
    conn: ConnectionManager,
}

impl Batch for Acquires {
    type Item = AcquireItem;
    type Reply = AcquireReply;

    async fn run(&self, items: &[AcquireItem]) -> Result<Vec<AcquireReply>, StoreError> {
        let mut cmd = ACQUIRE.call(2 * items.len(), 3 * items.len(), 128 * items.len());
        for item in items {
            cmd.arg(&item.keys.lock).arg(&*item.keys.fence);
        }
        for item in items {
            cmd.arg(item.token.as_str())
                .arg(item.ttl_ms)
                .arg(item.waits.arg());
        }
        let reply = ACQUIRE.invoke(&cmd, &self.conn).await?;
        let codes = codes(reply, items.len(), "acquire")?;
        Ok(codes.into_iter().map(AcquireReply::from_code).collect())
    }

    /// A grant nobody waits for any more: give it back at once rather than at its ttl.
    fn abandoned(&self, item: AcquireItem, reply: AcquireReply) {
        if !matches!(reply, AcquireReply::Granted { .. }) {
            return;
        }
        let releases = Releases {
            conn: self.conn.clone(),
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let item = ReleaseItem {
                    keys: item.keys,
                    token: item.token,
                };
                if let Err(err) = releases.run(std::slice::from_ref(&item)).await {
                    tracing::debug!(error = %err, "distlock: releasing an abandoned grant failed; it expires with its ttl");
                }
            });
        }
    }
}

/// One lock to release, owned so it can wait in a batch.
pub(crate) struct ReleaseItem {
    keys: LockKeys,
    token: Token,
}

/// Releases, many per call (`release.lua`).
#[derive(Clone)]
pub(crate) struct Releases {
    conn: ConnectionManager,
}

impl Batch for Releases {
    type Item = ReleaseItem;
    type Reply = Held;

    async fn run(&self, items: &[ReleaseItem]) -> Result<Vec<Held>, StoreError> {
        let mut cmd = RELEASE.call(items.len(), 2 * items.len(), 128 * items.len());
        for item in items {
            cmd.arg(&item.keys.lock);
        }
        for item in items {
            cmd.arg(item.token.as_str()).arg(&item.keys.channel);
        }
        let reply = RELEASE.invoke(&cmd, &self.conn).await?;
        codes(reply, items.len(), "release")?
            .into_iter()
            .map(Held::from_reply)
            .collect()
    }
}

impl RedisStore {
    pub(crate) async fn rate_limit(&self, req: &RateRequest<'_>) -> Result<RateReply, StoreError> {
        let item = RateItem {
            keys: req.keys.to_vec(),
            specs: req.specs.to_vec(),
            cost: req.cost,
        };
        let result = match req.now_us {
            // Checks at an injected time (tests only) cannot share a call with others.
            Some(now) => {
                let reply = Rates {
                    conn: self.conn.clone(),
                }
                .invoke(&now.to_string(), std::slice::from_ref(&item))
                .await;
                reply.and_then(|mut replies| {
                    replies.pop().ok_or_else(|| StoreError::Protocol {
                        message: "ratelimit answered no check".to_owned(),
                    })
                })
            }
            None => self.rates.run(item).await,
        };
        result.map_err(|e| e.with_deadline(self.op_timeout()))
    }
}

/// One rate-limit check, owned so it can wait in a batch.
pub(crate) struct RateItem {
    keys: Vec<String>,
    specs: Vec<Spec>,
    cost: u32,
}

/// Rate-limit checks, many per call (`ratelimit.lua`).
#[derive(Clone)]
pub(crate) struct Rates {
    conn: ConnectionManager,
}

impl Rates {
    async fn invoke(&self, now: &str, items: &[RateItem]) -> Result<Vec<RateReply>, StoreError> {
        let keys: usize = items.iter().map(|item| item.keys.len()).sum();
        let mut cmd = RATE_LIMIT.call(keys, 1 + 2 * items.len() + 3 * keys, 128 * keys);
        for item in items {
            for key in &item.keys {
                cmd.arg(key);
            }
        }
        cmd.arg(now);
        for item in items {
            cmd.arg(item.cost).arg(item.specs.len());
            for spec in &item.specs {
                cmd.arg(spec.code()).arg(spec.a).arg(spec.b);
            }
        }
        let reply: Value = RATE_LIMIT.invoke(&cmd, &self.conn).await?;
        let texts = per_item(reply, items.len(), "ratelimit")?;
        texts
            .iter()
            .zip(items)
            .map(|(text, item)| parse_rate_reply(text, item.keys.len()))
            .collect()
    }
}

impl Batch for Rates {
    type Item = RateItem;
    type Reply = RateReply;

    async fn run(&self, items: &[RateItem]) -> Result<Vec<RateReply>, StoreError> {
        self.invoke("", items).await
    }
}

/// The per-item replies of a many-item script: an array, or the bare reply when one item was
/// sent (a bare value is cheaper to parse than an array of one).
fn per_item(reply: Value, items: usize, script: &str) -> Result<Vec<Value>, StoreError> {
    let replies = match reply {
        Value::Array(replies) => replies,
        reply => vec![reply],
    };
    if replies.len() != items {
        return Err(StoreError::Protocol {
            message: format!("{script} answered {} items for {items}", replies.len()),
        });
    }
    Ok(replies)
}

/// The per-item integers of `acquire.lua` or `release.lua`.
fn codes(reply: Value, items: usize, script: &str) -> Result<Vec<i64>, StoreError> {
    per_item(reply, items, script)?
        .into_iter()
        .map(|v| match v {
            Value::Int(code) => Ok(code),
            other => Err(StoreError::Protocol {
                message: format!("{script} answered {other:?} where an integer was expected"),
            }),
        })
        .collect()
}

/// One check's text: `applied`, then `allowed remaining retry_us reset_us` per policy, as
/// integers separated by single spaces.
fn parse_rate_reply(text: &Value, policies: usize) -> Result<RateReply, StoreError> {
    let bad = || StoreError::Protocol {
        message: format!("expected 1 + 4 × {policies} integers from ratelimit, got {text:?}"),
    };
    let bytes = match text {
        Value::BulkString(bytes) => bytes.as_slice(),
        Value::SimpleString(s) => s.as_bytes(),
        _ => return Err(bad()),
    };
    let mut numbers = bytes.split(|&b| b == b' ').map(|n| {
        std::str::from_utf8(n)
            .ok()
            .and_then(|n| n.parse::<i64>().ok())
    });
    let applied = match numbers.next().flatten() {
        Some(applied @ (0 | 1)) => applied == 1,
        _ => return Err(bad()),
    };
    let mut verdicts = Vec::with_capacity(policies);
    for _ in 0..policies {
        let mut next = || numbers.next().flatten().ok_or_else(bad);
        let (allowed, remaining, retry, reset) = (next()?, next()?, next()?, next()?);
        verdicts.push(Verdict::new(allowed == 1, remaining, retry, reset));
    }
    if numbers.next().is_some() {
        return Err(bad());
    }
    Ok(RateReply { applied, verdicts })
}

/// The shared pub/sub connection: RESP3, so subscriptions and their messages travel as push
/// frames on a `ConnectionManager` that reconnects and resubscribes by itself. It connects on
/// the first subscription, not before.
struct PubSubLink {
    conn: ConnectionManager,
}

impl PubSubLink {
    fn new(
        info: &redis::ConnectionInfo,
        settings: &RedisSettings,
        wakeups: &Arc<Wakeups>,
    ) -> Result<Self, StoreError> {
        let resp3 = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let client = redis::Client::open(info.clone().set_redis_settings(resp3))?;
        let weak = Arc::downgrade(wakeups);
        let on_push = move |push: PushInfo| {
            if let Some(wakeups) = weak.upgrade() {
                match push.kind {
                    PushKind::Message => {
                        if let Some(Value::BulkString(channel)) = push.data.first() {
                            let reserved = matches!(push.data.get(1), Some(Value::BulkString(m)) if m.as_slice() == b"!");
                            wakeups.wake_one(&String::from_utf8_lossy(channel), reserved);
                        }
                    }
                    PushKind::Disconnection => wakeups.wake_all(),
                    _ => {}
                }
            }
            Ok::<(), redis::aio::SendError>(())
        };
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(settings.response_timeout))
            .set_connection_timeout(Some(settings.connect_timeout))
            .set_number_of_retries(settings.reconnect_retries)
            .set_max_delay(Duration::from_secs(1))
            .set_push_sender(on_push)
            .set_automatic_resubscription();
        let conn = ConnectionManager::new_lazy_with_config(client, config)?;
        Ok(Self { conn })
    }
}

impl Subscriber for PubSubLink {
    fn subscribe(
        &self,
        channels: Vec<String>,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + '_>> {
        let mut conn = self.conn.clone();
        Box::pin(async move { Ok(conn.subscribe(channels).await?) })
    }

    fn unsubscribe(
        &self,
        channels: Vec<String>,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + '_>> {
        let mut conn = self.conn.clone();
        Box::pin(async move { Ok(conn.unsubscribe(channels).await?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn versions_before_6_2_are_refused() {
        for old in ["5.0.14", "6.0.20", "6.1.0", "2.8"] {
            assert!(!version_supported(old), "{old}");
        }
        for ok in ["6.2.0", "6.2.14", "7.0.15", "7.4.1", "8.0.2", "10.1"] {
            assert!(version_supported(ok), "{ok}");
        }
        assert!(version_supported("unknown"), "no version: let through");
    }

    #[test]
    fn rate_replies_parse_per_policy() {
        let reply = parse_rate_reply(&text("1 1 9 0 100000 0 0 4503599627370495 86400000000"), 2)
            .expect("valid");
        assert!(reply.applied);
        assert_eq!(reply.verdicts[0], Verdict::new(true, 9, 0, 100_000));
        assert_eq!(
            reply.verdicts[1],
            Verdict::new(false, 0, 4_503_599_627_370_495, 86_400_000_000)
        );
        let denied = parse_rate_reply(&text("0 0 0 250 1000"), 1).expect("valid");
        assert!(!denied.applied && !denied.verdicts[0].allowed);
    }

    #[test]
    fn malformed_rate_replies_are_protocol_errors() {
        for bad in [
            text(""),
            text("1 1 9 0"),
            text("1 1 9 0 100 7"),
            text("2 1 9 0 100"),
            text("1 1 x 0 100"),
            text("1  1 9 0 100"),
            Value::Int(1),
        ] {
            assert!(
                matches!(parse_rate_reply(&bad, 1), Err(StoreError::Protocol { .. })),
                "{bad:?}"
            );
        }
    }
}
