//! The single-primary Redis backend: scripts over a multiplexed `ConnectionManager` (which
//! reconnects by itself), batched per kind (`batch.rs`), plus a second, lazily connected
//! RESP3 connection for release wake-ups (`pubsub.rs`). Behind Sentinel, both follow the
//! primary through failovers (`sentinel.rs`).

use std::sync::Arc;
use std::time::Duration;

use super::backend::Backend;
use super::batch::{Batcher, batcher};
use super::capability::{StoreKind, Unsupported};
use super::connect::{self, FollowingConn, PrimaryConn, RedisSettings, check_cluster_mode};
use super::peek;
use super::pubsub::{FollowingLink, PubSubLink};
use super::ratelimit::script::{RateItem, Rates};
use super::ratelimit::{RateReply, RateRequest};
use super::scripts::acquire::{AcquireItem, AcquireReply, Acquires, Waits};
use super::scripts::acquire_all::{self, AllReply};
use super::scripts::acquire_permits::{self, PermitsItem};
use super::scripts::acquire_rw::{self, Side};
use super::scripts::bloom::{self, BloomOp, BloomShape, ShardCall, ShardReply};
use super::scripts::bloom_native;
use super::scripts::handoff::{self, HandoffReply};
use super::scripts::release::{ReleaseItem, Releases};
use super::scripts::renew::{self, RenewItem};
use super::scripts::{Held, Publish, Replicas, millis, unmark};
use super::scripts::{release_entries, release_writer};
use super::wakeups::Wakeups;
use crate::error::StoreError;
use crate::keys::{LockKeys, RwKeys, SetKeys};
use crate::token::Token;

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
        let client = settings.client(info)?;
        Self::connect_client(client, settings).await
    }

    /// As [`connect`](Self::connect), through a `redis::Client` the application made (its
    /// address, credentials and TLS parameters are used for the pub/sub connection too).
    pub(crate) async fn connect_client(
        client: redis::Client,
        settings: RedisSettings,
    ) -> Result<Self, StoreError> {
        let info = client.get_connection_info().clone();
        let conn = PrimaryConn::Fixed(connect::manager(client, &settings).await?);
        let wakeups = Wakeups::new();
        match PubSubLink::new(&info, &settings, &wakeups) {
            Ok(link) => wakeups.set_link(Box::new(link)),
            // Waiters then poll with backoff; say so once.
            Err(err) => {
                wakeups.set_deaf();
                tracing::warn!(
                    error = %err,
                    "no pub/sub connection for release wake-ups; waiters will poll"
                );
            }
        }
        Ok(Self::with(conn, settings, wakeups))
    }

    /// Runs on a connection manager the application made (checked like a new connection).
    /// There is no address to open a pub/sub connection to: waiters poll, each retry bounded
    /// by the holder's remaining ttl.
    pub(crate) async fn from_manager(
        mut conn: redis::aio::ConnectionManager,
        settings: RedisSettings,
    ) -> Result<Self, StoreError> {
        let limit = settings.response_timeout;
        tokio::time::timeout(limit, async {
            connect::check_version(&mut conn).await?;
            check_cluster_mode(&mut conn, false).await
        })
        .await
        .map_err(|_| StoreError::Timeout { after: limit })??;
        tracing::debug!("on an existing connection manager: waiters poll for releases");
        let wakeups = Wakeups::new();
        wakeups.set_deaf();
        Ok(Self::with(PrimaryConn::Fixed(conn), settings, wakeups))
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
            Err(err) => {
                wakeups.set_deaf();
                tracing::warn!(
                    error = %err,
                    "no pub/sub connection for release wake-ups; waiters will poll"
                );
            }
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

    fn deadline(&self, err: StoreError) -> StoreError {
        err.with_deadline(self.settings.response_timeout)
    }
}

impl Backend for RedisStore {
    fn kind(&self) -> StoreKind {
        StoreKind::Redis
    }

    fn holder_sets(&self) -> Result<(), Unsupported> {
        Ok(())
    }

    fn rate_limits(&self) -> Result<(), Unsupported> {
        Ok(())
    }

    fn bloom_filters(&self) -> Result<(), Unsupported> {
        Ok(())
    }

    fn replica_acknowledgement(&self) -> Result<(), Unsupported> {
        Ok(())
    }

    fn hand_off(&self) -> Result<(), Unsupported> {
        Ok(())
    }

    /// Every lock in one group: one primary takes them in one call.
    fn lock_groups(&self, keys: &[LockKeys]) -> Vec<Vec<usize>> {
        vec![(0..keys.len()).collect()]
    }

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

    async fn acquire_all(
        &self,
        keys: &[&LockKeys],
        tokens: &[Token],
        ttl: Duration,
        waits: Waits,
    ) -> Result<AllReply, StoreError> {
        acquire_all::run(&self.conn, keys, tokens, ttl, waits)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn acquire_permits(&self, item: &PermitsItem<'_>) -> Result<AcquireReply, StoreError> {
        acquire_permits::run(&self.conn, item)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn acquire_rw(
        &self,
        side: Side,
        keys: &RwKeys,
        token: &Token,
        ttl: Duration,
        waits: Waits,
    ) -> Result<AcquireReply, StoreError> {
        acquire_rw::run(&self.conn, side, keys, token, ttl, waits)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn release_writer(&self, keys: &RwKeys, token: &Token) -> Result<Held, StoreError> {
        release_writer::run(&self.conn, Publish::Plain, keys, token)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn release_entries(
        &self,
        keys: &SetKeys,
        token: &Token,
        count: u32,
    ) -> Result<Held, StoreError> {
        release_entries::run(&self.conn, Publish::Plain, keys, token, count)
            .await
            .map_err(|e| self.deadline(e))
    }

    async fn rate_limit(&self, req: &RateRequest<'_>) -> Result<RateReply, StoreError> {
        self.rates
            .run(RateItem::of(req))
            .await
            .map_err(|e| self.deadline(e))
    }

    #[cfg(feature = "test-util")]
    async fn rate_limit_at(
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

    async fn lock_value(&self, key: &str) -> Result<Option<(String, Duration)>, StoreError> {
        peek::value_and_ttl(&mut self.conn.clone(), key).await
    }

    #[cfg(feature = "test-util")]
    async fn peek_get(&self, key: &str) -> Result<Option<String>, StoreError> {
        peek::get(&mut self.conn.clone(), key).await
    }

    #[cfg(feature = "test-util")]
    async fn peek_pttl(&self, key: &str) -> Result<Option<Duration>, StoreError> {
        peek::pttl(&mut self.conn.clone(), key).await
    }

    #[cfg(feature = "test-util")]
    async fn peek_delete(&self, key: &str) -> Result<bool, StoreError> {
        peek::delete(&mut self.conn.clone(), key).await
    }

    #[cfg(feature = "test-util")]
    async fn peek_keys(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        peek::keys(&mut self.conn.clone(), prefix).await
    }

    #[cfg(feature = "test-util")]
    async fn peek_live_entries(&self, key: &str) -> Result<u64, StoreError> {
        peek::live_entries(&mut self.conn.clone(), key).await
    }
}
