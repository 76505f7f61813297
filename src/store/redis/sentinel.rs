//! Following a Sentinel-managed primary through failovers.
//!
//! The single-primary backend sends its scripts over a [`PrimaryConn`]: a fixed
//! `ConnectionManager`, or, behind Sentinel, a [`FollowingConn`] that asks the sentinels which
//! node is the primary and moves to the new one when that changes. It re-resolves when the
//! current node stops being usable: a connection error or a timeout (it may be dead or
//! frozen), or `READONLY` (it was demoted to a replica while still up). A command refused
//! with `READONLY` was not applied, so it is sent once more to the new primary; a command
//! whose connection failed has an unknown outcome and fails with its error, as on any
//! primary (the lock machinery handles that: grants are released, renewals retried until
//! the lease's deadline).
//!
//! The wake-up link follows too: on a switch it reconnects to the new primary and every
//! channel is subscribed again (waiters are woken, since releases may have been missed).

use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{Cmd, ErrorKind, Pipeline, RedisFuture, ServerErrorKind, Value};
use tokio::time::Instant;

use super::connect::{RedisSettings, check_cluster_mode, probe};
use crate::error::StoreError;

/// Re-resolving more often than this is pointless: the sentinels need time to agree.
const RESOLVE_EVERY: Duration = Duration::from_millis(100);

/// The connection the single-primary backend sends on.
#[derive(Clone)]
pub(crate) enum PrimaryConn {
    /// One fixed address (`Client::connect`).
    Fixed(ConnectionManager),
    /// Whichever node the sentinels say is the primary (`Client::connect_sentinel`).
    Following(FollowingConn),
}

impl ConnectionLike for PrimaryConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Fixed(conn) => conn.req_packed_command(cmd),
            Self::Following(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Fixed(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Following(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Fixed(conn) => conn.get_db(),
            Self::Following(conn) => conn.get_db(),
        }
    }
}

/// A connection to whichever node the sentinels say is the primary of `master`.
#[derive(Clone)]
pub(crate) struct FollowingConn {
    shared: Arc<Following>,
}

struct Following {
    sentinel: tokio::sync::Mutex<Sentinel>,
    master: String,
    node: SentinelNodeConnectionInfo,
    settings: RedisSettings,
    current: RwLock<Current>,
    /// One re-resolution at a time.
    resolving: tokio::sync::Mutex<()>,
    last_resolved: Mutex<Instant>,
    /// Told the new primary's address after a switch (the wake-up link follows).
    on_switch: OnceLock<OnSwitch>,
}

/// What follows a switch of primary.
type OnSwitch = Box<dyn Fn(&redis::ConnectionInfo) + Send + Sync>;

struct Current {
    conn: ConnectionManager,
    info: redis::ConnectionInfo,
}

/// Whether an error means the node may no longer be the primary.
fn points_elsewhere(err: &redis::RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
        || err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
}

fn is_readonly(err: &redis::RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}

impl FollowingConn {
    /// Asks the sentinels for `master`'s primary and connects to it (eagerly: wrong
    /// credentials, an old server or an unknown master name fail here, once).
    pub(crate) async fn connect(
        sentinels: Vec<redis::ConnectionInfo>,
        master: &str,
        node: SentinelNodeConnectionInfo,
        settings: &RedisSettings,
    ) -> Result<(Self, redis::ConnectionInfo), StoreError> {
        let mut sentinel = Sentinel::build(sentinels)?;
        let limit = settings.connect_timeout.saturating_mul(2);
        let client = tokio::time::timeout(limit, sentinel.async_master_for(master, Some(&node)))
            .await
            .map_err(|_| StoreError::Timeout { after: limit })?
            .map_err(|e| sentinel_error(master, e))?;
        let info = client.get_connection_info().clone();
        let mut probe_conn = probe(client.clone(), settings).await?;
        check_cluster_mode(&mut probe_conn, false).await?;
        drop(probe_conn);
        let conn = manager(client, settings).await?;
        let following = Self {
            shared: Arc::new(Following {
                sentinel: tokio::sync::Mutex::new(sentinel),
                master: master.to_owned(),
                node,
                settings: settings.clone(),
                current: RwLock::new(Current {
                    conn,
                    info: info.clone(),
                }),
                resolving: tokio::sync::Mutex::new(()),
                last_resolved: Mutex::new(Instant::now()),
                on_switch: OnceLock::new(),
            }),
        };
        Ok((following, info))
    }

    /// Registers what follows a switch of primary (set once, by the store).
    pub(crate) fn on_switch(&self, f: impl Fn(&redis::ConnectionInfo) + Send + Sync + 'static) {
        let _ = self.shared.on_switch.set(Box::new(f));
    }

    fn current(&self) -> ConnectionManager {
        self.shared
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .conn
            .clone()
    }

    /// Asks the sentinels which node is the primary now, and moves there if it changed.
    /// Bounded by the connect timeout; a failure leaves the current connection in place.
    async fn resolve(&self) {
        let shared = &self.shared;
        let _one = shared.resolving.lock().await;
        {
            let mut last = shared
                .last_resolved
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if last.elapsed() < RESOLVE_EVERY {
                return;
            }
            *last = Instant::now();
        }
        let limit = shared.settings.connect_timeout;
        let found = tokio::time::timeout(limit, async {
            let mut sentinel = shared.sentinel.lock().await;
            sentinel
                .async_master_for(&shared.master, Some(&shared.node))
                .await
        })
        .await;
        let client = match found {
            Ok(Ok(client)) => client,
            Ok(Err(err)) => {
                tracing::debug!(master = %shared.master, error = %err, "distlock: sentinels could not name a primary yet");
                return;
            }
            Err(_) => return,
        };
        let info = client.get_connection_info().clone();
        let same = shared
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .info
            .addr()
            == info.addr();
        if same {
            return;
        }
        match manager(client, &shared.settings).await {
            Ok(conn) => {
                tracing::warn!(master = %shared.master, primary = %info.addr(), "distlock: following a failover to the new primary");
                *shared
                    .current
                    .write()
                    .unwrap_or_else(PoisonError::into_inner) = Current {
                    conn,
                    info: info.clone(),
                };
                if let Some(on_switch) = shared.on_switch.get() {
                    on_switch(&info);
                }
            }
            Err(err) => {
                tracing::debug!(primary = %info.addr(), error = %err, "distlock: cannot connect to the new primary yet");
            }
        }
    }
}

impl ConnectionLike for FollowingConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut conn = self.current();
            let result = conn.req_packed_command(cmd).await;
            match result {
                Err(err) if points_elsewhere(&err) => {
                    self.resolve().await;
                    if is_readonly(&err) {
                        // Not applied: the demoted node refused it. Once to the new primary.
                        let mut conn = self.current();
                        return conn.req_packed_command(cmd).await;
                    }
                    Err(err)
                }
                other => other,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut conn = self.current();
            let result = conn.req_packed_commands(pipeline, offset, count).await;
            match result {
                Err(err) if points_elsewhere(&err) => {
                    self.resolve().await;
                    Err(err)
                }
                other => other,
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.current().get_db()
    }
}

/// The manager for one primary: commands to a dead node fail at once (no reconnect retries),
/// so that the re-resolution starts without waiting for reconnect attempts to a node the
/// sentinels are about to replace.
async fn manager(
    client: redis::Client,
    settings: &RedisSettings,
) -> Result<ConnectionManager, StoreError> {
    let config = settings.manager_config().set_number_of_retries(0);
    let limit = settings.connect_timeout.saturating_mul(2);
    tokio::time::timeout(limit, ConnectionManager::new_with_config(client, config))
        .await
        .map_err(|_| StoreError::Timeout { after: limit })?
        .map_err(StoreError::from)
}

/// A sentinel lookup's error, with the master's name.
fn sentinel_error(master: &str, err: redis::RedisError) -> StoreError {
    match StoreError::from(err) {
        StoreError::Unreachable { message } => StoreError::Unreachable {
            message: format!("no sentinel could name a primary for `{master}`: {message}"),
        },
        other => other,
    }
}
