//! The single-primary Redis backend: scripts over a multiplexed `ConnectionManager` (which
//! reconnects by itself), batched per kind (`batch.rs`), plus a second, lazily connected
//! RESP3 connection for release wake-ups (`pubsub.rs`). Behind Sentinel, both follow the
//! primary through failovers (`sentinel.rs`).

mod connect;
pub(crate) mod pubsub;
mod sentinel;

use std::sync::Arc;
use std::time::Duration;

pub(crate) use self::connect::{RedisSettings, check_cluster_mode, probe};
use self::pubsub::FollowingLink;
pub(crate) use self::pubsub::{PubSubLink, route_push};
use self::sentinel::FollowingConn;
pub(crate) use self::sentinel::PrimaryConn;
use super::backend::Backend;
use super::batch::{Batch, Batcher};
use super::scripts::acquire::{AcquireItem, AcquireReply, Acquires, Waits};
use super::scripts::bloom::{self, BloomOp, BloomShape, ShardCall, ShardReply};
use super::scripts::bloom_native;
use super::scripts::handoff::{self, HandoffReply};
use super::scripts::ratelimit::{RateItem, RateReply, RateRequest, Rates};
use super::scripts::release::{ReleaseItem, Releases};
use super::scripts::renew::{self, RenewItem};
use super::scripts::{Held, Publish, Replicas, millis, unmark};
use super::wakeups::Wakeups;
use crate::error::StoreError;
use crate::keys::LockKeys;
use crate::token::Token;

/// Most calls of one kind on the wire at once (see `batch.rs`).
pub(crate) const MAX_IN_FLIGHT: usize = 8;
/// Most items in one batched script call (keeps each call short on the server).
pub(crate) const MAX_BATCH: usize = 64;
/// A queue this long is sent at once rather than at the next flush: big enough to share the
/// cost of a call, small enough that several calls keep the server busy while the client
/// works (measured with the benchmark's lock_uncontended_parallel, see BENCHMARKS.md).
pub(crate) const FLUSH_AT: usize = 6;

/// A batcher of one kind of script call, with the store's limits.
pub(crate) fn batcher<B: Batch>(op: B, timeout: Duration) -> Batcher<B> {
    Batcher::new(op, MAX_IN_FLIGHT, MAX_BATCH, FLUSH_AT, timeout)
}

#[derive(Clone)]
pub(crate) struct RedisStore {
    conn: PrimaryConn,
    settings: RedisSettings,
    wakeups: Arc<Wakeups>,
    acquires: Batcher<Acquires<PrimaryConn>>,
    releases: Batcher<Releases<PrimaryConn>>,
    rates: Batcher<Rates<PrimaryConn>>,
}

impl RedisStore {
    /// Connects (eagerly, so a wrong URL or password fails here, once) and prepares the lazy
    /// pub/sub connection.
    pub(crate) async fn connect(
        info: redis::ConnectionInfo,
        settings: RedisSettings,
    ) -> Result<Self, StoreError> {
        let client = settings.client(info.clone())?;
        let conn = PrimaryConn::Fixed(connect::manager(client, &settings).await?);
        let wakeups = Wakeups::new();
        match PubSubLink::new(&info, &settings, &wakeups) {
            Ok(link) => wakeups.set_link(Box::new(link)),
            // Waiters then poll with backoff; say so once.
            Err(err) => tracing::warn!(
                error = %err,
                "distlock: no pub/sub connection for release wake-ups; waiters will poll"
            ),
        }
        Ok(Self::with(conn, settings, wakeups))
    }

    /// Connects through `sentinels` to the primary they name for `master`, and follows it
    /// through failovers (the commands' connection and the wake-up link).
    pub(crate) async fn connect_sentinel(
        sentinels: Vec<redis::ConnectionInfo>,
        master: &str,
        node: redis::sentinel::SentinelNodeConnectionInfo,
        settings: RedisSettings,
    ) -> Result<Self, StoreError> {
        let (following, info) = FollowingConn::connect(sentinels, master, node, &settings).await?;
        let wakeups = Wakeups::new();
        match FollowingLink::new(&info, &settings, &wakeups) {
            Ok(link) => {
                let relink = link.clone();
                following.on_switch(move |info| relink.switch(info));
                wakeups.set_link(Box::new(link));
            }
            Err(err) => tracing::warn!(
                error = %err,
                "distlock: no pub/sub connection for release wake-ups; waiters will poll"
            ),
        }
        Ok(Self::with(
            PrimaryConn::Following(following),
            settings,
            wakeups,
        ))
    }

    fn with(conn: PrimaryConn, settings: RedisSettings, wakeups: Arc<Wakeups>) -> Self {
        let timeout = settings.response_timeout;
        Self {
            acquires: batcher(
                Acquires {
                    conn: conn.clone(),
                    publish: Publish::Plain,
                },
                timeout,
            ),
            releases: batcher(
                Releases {
                    conn: conn.clone(),
                    publish: Publish::Plain,
                },
                timeout,
            ),
            rates: batcher(Rates { conn: conn.clone() }, timeout),
            conn,
            settings,
            wakeups,
        }
    }

    /// The connection, for test hooks.
    #[cfg(feature = "test-util")]
    pub(crate) fn connection(&self) -> PrimaryConn {
        self.conn.clone()
    }

    /// Test-only: one rate-limit check decided at `now_us`.
    #[cfg(feature = "test-util")]
    pub(crate) async fn rate_limit_at(
        &self,
        req: &RateRequest<'_>,
        now_us: u64,
    ) -> Result<RateReply, StoreError> {
        Rates {
            conn: self.conn.clone(),
        }
        .at(RateItem::of(req), now_us)
        .await
    }

    fn deadline(&self, err: StoreError) -> StoreError {
        err.with_deadline(self.settings.response_timeout)
    }
}

impl Backend for RedisStore {
    async fn acquire(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl: Duration,
        waits: Waits,
        replicas: Option<Replicas>,
    ) -> Result<AcquireReply, StoreError> {
        let item = AcquireItem {
            keys: keys.clone(),
            token: token.clone(),
            ttl_ms: millis(ttl),
            waits,
            replicas,
        };
        match self
            .acquires
            .run(item)
            .await
            .map_err(|e| self.deadline(e))?
        {
            // Granted but not acknowledged: the caller releases it.
            AcquireReply::Unreplicated { acked, wanted } => {
                Err(StoreError::NotReplicated { acked, wanted })
            }
            reply => Ok(reply),
        }
    }

    async fn release(&self, keys: &LockKeys, token: &Token) -> Result<Held, StoreError> {
        let item = ReleaseItem {
            keys: keys.clone(),
            token: token.clone(),
        };
        self.releases.run(item).await.map_err(|e| self.deadline(e))
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<Held>, StoreError> {
        renew::run(&self.conn, items)
            .await
            .map_err(|e| self.deadline(e))
    }

    fn hands_off(&self) -> bool {
        true
    }

    async fn handoff(
        &self,
        keys: &LockKeys,
        from: &Token,
        to: &Token,
        ttl: Duration,
    ) -> Result<HandoffReply, StoreError> {
        handoff::run(&self.conn, Publish::Plain, keys, from, to, ttl)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn unmark(&self, keys: &LockKeys) -> Result<(), StoreError> {
        unmark::run(&self.conn, keys)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn rate_limit(&self, req: &RateRequest<'_>) -> Result<RateReply, StoreError> {
        self.rates
            .run(RateItem::of(req))
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn bloom(
        &self,
        native: bool,
        op: BloomOp,
        shape: &BloomShape,
        shards: &[ShardCall],
    ) -> Result<Vec<ShardReply>, StoreError> {
        let reply = if native {
            bloom_native::run(&self.conn, op, shape, shards).await
        } else {
            bloom::run(&self.conn, op, shape, shards).await
        };
        reply.map_err(|e| self.deadline(e))
    }

    async fn bloom_module(&self) -> Result<bool, StoreError> {
        bloom_native::available(&self.conn)
            .await
            .map_err(|e| self.deadline(e))
    }

    fn wakeups(&self) -> &Arc<Wakeups> {
        &self.wakeups
    }

    fn op_timeout(&self) -> Duration {
        self.settings.response_timeout
    }
}
