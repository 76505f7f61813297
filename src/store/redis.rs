//! The single-primary Redis store: scripts over a multiplexed `ConnectionManager` (which
//! reconnects by itself), plus a second, lazily connected RESP3 connection for release
//! wake-ups that resubscribes after a reconnect.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ProtocolVersion, PushInfo, PushKind, Script, Value};

use super::wakeups::Subscriber;
use super::{
    AcquireReply, Held, RateReply, RateRequest, RenewItem, Verdict, Wakeups, fence_ttl, millis,
};
use crate::error::StoreError;
use crate::keys::LockKeys;
use crate::token::Token;

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/acquire.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/release.lua")));
static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/renew.lua")));
/// One script for every rate-limit check: the shared helpers, one file per algorithm, then
/// the two-phase driver (see `ratelimit.lua` for the contract).
static RATE_LIMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
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

#[derive(Clone)]
pub(crate) struct RedisStore {
    conn: ConnectionManager,
    settings: RedisSettings,
    wakeups: Arc<Wakeups>,
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
        client
            .get_multiplexed_async_connection_with_config(&probe)
            .await
            .map_err(|e| StoreError::from(e).with_deadline(settings.connect_timeout))?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(settings.response_timeout))
            .set_connection_timeout(Some(settings.connect_timeout))
            .set_number_of_retries(settings.reconnect_retries)
            .set_max_delay(Duration::from_secs(1));
        let conn = tokio::time::timeout(
            settings.connect_timeout * 2,
            ConnectionManager::new_with_config(client, config),
        )
        .await
        .map_err(|_| StoreError::Timeout {
            after: settings.connect_timeout * 2,
        })??;

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
    ) -> Result<AcquireReply, StoreError> {
        let mut conn = self.conn.clone();
        let reply: Vec<i64> = ACQUIRE
            .key(&keys.lock)
            .key(&keys.fence)
            .arg(token.as_str())
            .arg(millis(ttl))
            .arg(millis(fence_ttl(ttl)))
            .invoke_async(&mut conn)
            .await
            .map_err(|e| StoreError::from(e).with_deadline(self.op_timeout()))?;
        match reply.as_slice() {
            [1, fence, _] => Ok(AcquireReply::Granted {
                fence: u64::try_from(*fence).map_err(|_| StoreError::Protocol {
                    message: format!("negative fence {fence} from acquire"),
                })?,
            }),
            [0, _, pttl] => Ok(AcquireReply::Busy {
                pttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
            }),
            other => Err(StoreError::Protocol {
                message: format!("expected {{granted, fence, pttl}} from acquire, got {other:?}"),
            }),
        }
    }

    pub(crate) async fn release(&self, keys: &LockKeys, token: &Token) -> Result<Held, StoreError> {
        let mut conn = self.conn.clone();
        let code: i64 = RELEASE
            .key(&keys.lock)
            .arg(token.as_str())
            .arg(&keys.channel)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| StoreError::from(e).with_deadline(self.op_timeout()))?;
        Held::from_reply(code)
    }

    pub(crate) async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<Held>, StoreError> {
        let mut invocation = RENEW.prepare_invoke();
        for item in items {
            invocation.key(item.key);
        }
        for item in items {
            invocation.arg(item.token.as_str());
        }
        for item in items {
            invocation.arg(millis(item.ttl));
        }
        let mut conn = self.conn.clone();
        let codes: Vec<i64> = invocation
            .invoke_async(&mut conn)
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

impl RedisStore {
    pub(crate) async fn rate_limit(&self, req: &RateRequest<'_>) -> Result<RateReply, StoreError> {
        let mut invocation = RATE_LIMIT.prepare_invoke();
        for key in req.keys {
            invocation.key(key);
        }
        match req.now_us {
            Some(now) => invocation.arg(now),
            None => invocation.arg(""),
        };
        invocation.arg(req.cost);
        for spec in req.specs {
            invocation.arg(spec.code()).arg(spec.a).arg(spec.b);
        }
        let mut conn = self.conn.clone();
        let reply: Vec<i64> = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| StoreError::from(e).with_deadline(self.op_timeout()))?;
        parse_rate_reply(&reply, req.keys.len())
    }
}

/// `{applied, then allowed, remaining, retry_us, reset_us per policy}`.
fn parse_rate_reply(reply: &[i64], policies: usize) -> Result<RateReply, StoreError> {
    let bad = || StoreError::Protocol {
        message: format!("expected 1 + 4 × {policies} integers from ratelimit, got {reply:?}"),
    };
    let (&applied, rest) = reply.split_first().ok_or_else(bad)?;
    if rest.len() != 4 * policies || !matches!(applied, 0 | 1) {
        return Err(bad());
    }
    let verdicts = rest
        .chunks_exact(4)
        .map(|v| Verdict::new(v[0] == 1, v[1], v[2], v[3]))
        .collect();
    Ok(RateReply {
        applied: applied == 1,
        verdicts,
    })
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
                            wakeups.wake_one(&String::from_utf8_lossy(channel));
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
        channel: String,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + '_>> {
        let mut conn = self.conn.clone();
        Box::pin(async move { Ok(conn.subscribe(channel).await?) })
    }

    fn unsubscribe(&self, channel: String) {
        let mut conn = self.conn.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(err) = conn.unsubscribe(&channel).await {
                    tracing::debug!(error = %err, "distlock: unsubscribe failed");
                }
            });
        }
    }
}
