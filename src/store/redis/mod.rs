//! A single Redis primary: the scripted backend over the single-target route, on a
//! multiplexed `ConnectionManager` (which reconnects by itself), a few lazily connected lanes
//! for writes that wait for replicas, and a second, lazily connected RESP3 connection for
//! release wake-ups. Behind Sentinel, all of them follow the primary through failovers.

use std::sync::Arc;

use super::connect::{
    self, FollowingConn, PrimaryConn, RedisSettings, SentinelTarget, check_cluster_mode,
};
use super::pubsub::{FollowingLink, PubSubLink};
use super::scripted::{LANES, Route, ScriptedStore, Single};
use super::wakeups::Wakeups;
use crate::error::StoreError;

/// Connects (eagerly, so a wrong URL or password fails here, once) through a `redis::Client`
/// (its address, credentials and TLS parameters are used for the lanes and the pub/sub
/// connection too), and prepares the lazy lanes and pub/sub connection.
pub(crate) async fn connect_client(
    client: redis::Client,
    settings: RedisSettings,
) -> Result<ScriptedStore, StoreError> {
    let conn = PrimaryConn::Fixed(connect::manager(client.clone(), &settings).await?);
    with_lanes_and_link(&client, conn, settings)
}

/// As [`connect_client`], without contacting the server: the commands' connection connects
/// on first use, and the checks `connect` makes run in the background once the server answers
/// ([`LazyConn`](super::connect::LazyConn)). The lanes and the wake-up link are lazy anyway.
pub(crate) fn connect_lazy(
    client: redis::Client,
    settings: RedisSettings,
) -> Result<ScriptedStore, StoreError> {
    let conn = PrimaryConn::Lazy(connect::LazyConn::start(client.clone(), &settings)?);
    with_lanes_and_link(&client, conn, settings)
}

/// The store over `conn`, the commands' connection to `client`'s server, with the lanes and
/// the wake-up link (both connect on first use).
fn with_lanes_and_link(
    client: &redis::Client,
    conn: PrimaryConn,
    settings: RedisSettings,
) -> Result<ScriptedStore, StoreError> {
    let info = client.get_connection_info().clone();
    let lane_config = settings.manager_config();
    let lanes = (0..LANES)
        .map(|_| {
            redis::aio::ConnectionManager::new_lazy_with_config(client.clone(), lane_config.clone())
                .map(PrimaryConn::Fixed)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let wakeups = Wakeups::new();
    // Without a link, waiters poll with backoff; say so once.
    if let Some(err) = wakeups.link_or_deaf(PubSubLink::new(&info, &settings, &wakeups)) {
        tracing::warn!(error = %err, "no pub/sub connection for release wake-ups; waiters will poll");
    }
    Ok(store(conn, lanes, settings, wakeups))
}

/// Runs on a connection manager the application made (checked like a new connection). There
/// is no address to open another connection to: waiters poll, each retry bounded by the
/// holder's remaining ttl, and writes that wait for replicas share the one connection.
pub(crate) async fn from_manager(
    mut conn: redis::aio::ConnectionManager,
    settings: RedisSettings,
) -> Result<ScriptedStore, StoreError> {
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
    Ok(store(
        PrimaryConn::Fixed(conn),
        Vec::new(),
        settings,
        wakeups,
    ))
}

/// Connects through `sentinels` to the primary they name for `master`, and follows it
/// through failovers (the commands' connection, the lanes and the wake-up link).
pub(crate) async fn connect_sentinel(
    sentinels: Vec<redis::ConnectionInfo>,
    target: &SentinelTarget<'_>,
    settings: RedisSettings,
) -> Result<ScriptedStore, StoreError> {
    let (following, info) = FollowingConn::connect(sentinels, target, &settings).await?;
    let wakeups = Wakeups::new();
    let link = FollowingLink::new(&info, &settings, &wakeups).inspect(|link| {
        let relink = link.clone();
        following.on_switch(move |info| relink.switch(info));
    });
    if let Some(err) = wakeups.link_or_deaf(link) {
        tracing::warn!(error = %err, "no pub/sub connection for release wake-ups; waiters will poll");
    }
    let lanes = (0..LANES)
        .map(|lane| PrimaryConn::Following(following.lane(lane)))
        .collect();
    Ok(store(
        PrimaryConn::Following(following),
        lanes,
        settings,
        wakeups,
    ))
}

fn store(
    conn: PrimaryConn,
    lanes: Vec<PrimaryConn>,
    settings: RedisSettings,
    wakeups: Arc<Wakeups>,
) -> ScriptedStore {
    let single = Single::new(conn, lanes, settings.response_timeout);
    ScriptedStore::new(Route::Single(Box::new(single)), settings, wakeups)
}
