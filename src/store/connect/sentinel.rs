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
//! It also listens to the sentinels' `+switch-master` announcements and moves as soon as
//! one names a new primary for its master. That matters after a graceful failover
//! (`SENTINEL FAILOVER`, or a replica promoted while the old primary is only unreachable
//! from the sentinels): the old primary stays up and writable for several seconds before
//! the sentinels demote it, and everything written there meanwhile (renewals, new grants)
//! is discarded when it resyncs from the new primary. Without the announcement the client
//! would keep renewing its leases on the old node and lose them on the new one.
//!
//! The wake-up link follows too: on a switch it reconnects to the new primary and every
//! channel is subscribed again (waiters are woken, since releases may have been missed).
//!
//! Over TLS with a CA or a client certificate of the client's own, every connection carries
//! them: to the sentinels (lookups and the `+switch-master` listener), to the primary the
//! sentinels name (and the check that it is one), and to the primaries after a failover.

use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock, Weak};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{Cmd, ConnectionAddr, ErrorKind, RedisFuture, ServerErrorKind, Value};
use tokio::time::Instant;

use super::{RedisSettings, check_cluster_mode, probe};
use crate::error::StoreError;

/// Re-resolving more often than this is pointless: the sentinels need time to agree.
const RESOLVE_EVERY: Duration = Duration::from_millis(100);
/// Pause before listening to the next sentinel when one cannot be reached.
const LISTEN_RETRY: Duration = Duration::from_millis(500);
/// How long asking the sentinels does not move back to a primary an announcement left.
const LEFT_FOR: Duration = Duration::from_secs(60);
/// How often an idle listener checks whether its store is gone.
const LISTEN_CHECK: Duration = Duration::from_secs(1);

/// The connection the single-primary backend sends on.
#[derive(Clone)]
pub(crate) enum PrimaryConn {
    /// One fixed address (`Client::connect`).
    Fixed(ConnectionManager),
    /// Whichever node the sentinels say is the primary (`Client::connect_sentinel`).
    Following(FollowingConn),
    /// One fixed address, started without the server (`ClientBuilder::lazy`).
    Lazy(super::LazyConn),
}

impl ConnectionLike for PrimaryConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Fixed(conn) => conn.req_packed_command(cmd),
            Self::Following(conn) => conn.req_packed_command(cmd),
            Self::Lazy(conn) => conn.req_packed_command(cmd),
        }
    }

    req_packed_commands!(self, pipeline, offset, count => {
        match self {
            Self::Fixed(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Following(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Lazy(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    });

    fn get_db(&self) -> i64 {
        match self {
            Self::Fixed(conn) => conn.get_db(),
            Self::Following(conn) => conn.get_db(),
            Self::Lazy(conn) => conn.get_db(),
        }
    }
}

/// A connection to whichever node the sentinels say is the primary of `master`: the main one,
/// or one of its lanes (a spare connection to the same primary, see [`lane`](Self::lane)).
#[derive(Clone)]
pub(crate) struct FollowingConn {
    shared: Arc<Following>,
    /// `None`: the main connection; `Some(i)`: spare connection `i`.
    lane: Option<usize>,
}

/// How the primary is asked for.
enum Lookup {
    /// redis-rs's `Sentinel`: each sentinel URL keeps its own credentials; the primary is
    /// reached as `node` says (credentials, TLS with the default roots).
    Plain {
        sentinel: Sentinel,
        node: SentinelNodeConnectionInfo,
    },
    /// redis-rs's `SentinelClient`, the only one that takes certificates: they go to the
    /// sentinels and to the primary it names (and checks).
    #[cfg(any(feature = "tls", feature = "tls-native-roots"))]
    Certified(redis::sentinel::SentinelClient),
}

impl Lookup {
    /// A client of the primary the sentinels name for `master` now.
    async fn primary(&mut self, master: &str) -> redis::RedisResult<redis::Client> {
        match self {
            Self::Plain { sentinel, node } => sentinel.async_master_for(master, Some(node)).await,
            #[cfg(any(feature = "tls", feature = "tls-native-roots"))]
            Self::Certified(client) => {
                let _ = master; // the client was built for it
                client.async_get_client().await
            }
        }
    }
}

/// Who the primary is and how to reach it: the name the sentinels monitor it under, its
/// credentials (the same on a replica that replaces it), and TLS when the sentinels are
/// reached over TLS.
pub(crate) struct SentinelTarget<'a> {
    pub(crate) master: &'a str,
    pub(crate) primary: redis::RedisConnectionInfo,
    pub(crate) tls: Option<redis::TlsMode>,
}

impl SentinelTarget<'_> {
    /// How the primary is asked for: with the client's certificates if it has some.
    fn lookup(
        &self,
        sentinels: &[redis::ConnectionInfo],
        settings: &RedisSettings,
    ) -> Result<Lookup, StoreError> {
        #[cfg(any(feature = "tls", feature = "tls-native-roots"))]
        if let Some(certs) = &settings.tls {
            return self.certified(sentinels, certs).map(Lookup::Certified);
        }
        let _ = settings;
        let mut node =
            SentinelNodeConnectionInfo::default().set_redis_connection_info(self.primary.clone());
        if let Some(mode) = self.tls {
            node = node.set_tls_mode(mode);
        }
        Ok(Lookup::Plain {
            sentinel: Sentinel::build(sentinels.to_vec())?,
            node,
        })
    }

    /// A `SentinelClient` carrying `certs` to the sentinels and to the primary. Its
    /// sentinels share one set of credentials, so their URLs must carry the same.
    #[cfg(any(feature = "tls", feature = "tls-native-roots"))]
    fn certified(
        &self,
        sentinels: &[redis::ConnectionInfo],
        certs: &redis::TlsCertificates,
    ) -> Result<redis::sentinel::SentinelClient, StoreError> {
        use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
        let config = |message: &str| StoreError::Config {
            message: message.to_owned(),
        };
        let Some(mode) = self.tls else {
            return Err(config(
                "tls_root_certificate / tls_client_identity behind Sentinel need rediss:// \
                 sentinel URLs: the sentinels and the primary are then reached over TLS with \
                 them",
            ));
        };
        let Some(first) = sentinels.first().map(redis::ConnectionInfo::redis_settings) else {
            return Err(config("Sentinel needs at least one sentinel URL"));
        };
        if sentinels.iter().any(|info| {
            let other = info.redis_settings();
            other.username() != first.username() || other.password() != first.password()
        }) {
            return Err(config(
                "with tls_root_certificate / tls_client_identity, every sentinel URL must \
                 carry the same credentials (redis-rs gives the sentinels one set)",
            ));
        }
        let mut builder = SentinelClientBuilder::new(
            sentinels.iter().map(|info| info.addr().clone()),
            self.master,
            SentinelServerType::Master,
        )?
        .set_client_to_sentinel_certificates(certs.clone())
        .set_client_to_redis_tls_mode(mode)
        .set_client_to_redis_certificates(certs.clone());
        if let Some(username) = first.username() {
            builder = builder.set_client_to_sentinel_username(username);
        }
        if let Some(password) = first.password() {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if let Some(username) = self.primary.username() {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = self.primary.password() {
            builder = builder.set_client_to_redis_password(password);
        }
        Ok(builder.build()?)
    }
}

struct Following {
    lookup: tokio::sync::Mutex<Lookup>,
    /// The sentinels' addresses, for the `+switch-master` listener.
    sentinels: Vec<redis::ConnectionInfo>,
    master: String,
    settings: RedisSettings,
    current: RwLock<Current>,
    /// One re-resolution at a time.
    resolving: tokio::sync::Mutex<()>,
    /// The primary an announcement moved us away from, and when: a sentinel that has not
    /// heard of the failover yet still names it (and it still answers as a primary until it
    /// is demoted), so asking the sentinels does not move back there for a while.
    left: Mutex<Option<(ConnectionAddr, Instant)>>,
    last_resolved: Mutex<Instant>,
    /// Told the new primary's address after a switch (the wake-up link follows).
    on_switch: OnceLock<OnSwitch>,
}

/// What follows a switch of primary.
type OnSwitch = Box<dyn Fn(&redis::ConnectionInfo) + Send + Sync>;

struct Current {
    conn: ConnectionManager,
    info: redis::ConnectionInfo,
    /// Spare connections to the same primary, made when first used.
    lanes: Mutex<Vec<Option<ConnectionManager>>>,
}

impl Current {
    fn new(conn: ConnectionManager, info: redis::ConnectionInfo) -> Self {
        Self {
            conn,
            info,
            lanes: Mutex::new(Vec::new()),
        }
    }

    /// Spare connection `lane` to this primary, connected lazily (the main one if it cannot
    /// even be described, which a primary we are connected to always can).
    fn lane(&self, lane: usize, settings: &RedisSettings) -> ConnectionManager {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        if lanes.len() <= lane {
            lanes.resize(lane + 1, None);
        }
        if let Some(conn) = &lanes[lane] {
            return conn.clone();
        }
        let made = settings.client(self.info.clone()).and_then(|client| {
            let config = settings.manager_config().set_number_of_retries(0);
            Ok(ConnectionManager::new_lazy_with_config(client, config)?)
        });
        match made {
            Ok(conn) => {
                lanes[lane] = Some(conn.clone());
                conn
            }
            Err(_) => self.conn.clone(),
        }
    }
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
        target: &SentinelTarget<'_>,
        settings: &RedisSettings,
    ) -> Result<(Self, redis::ConnectionInfo), StoreError> {
        super::install_crypto_provider();
        let master = target.master;
        let mut lookup = target.lookup(&sentinels, settings)?;
        let limit = settings.connect_timeout.saturating_mul(2);
        let client = tokio::time::timeout(limit, lookup.primary(master))
            .await
            .map_err(|_| StoreError::Timeout { after: limit })?
            .map_err(|e| sentinel_error(master, e))?;
        let info = client.get_connection_info().clone();
        let mut probe_conn = probe(client.clone(), settings).await?;
        check_cluster_mode(&mut probe_conn, false).await?;
        drop(probe_conn);
        let conn = manager(client, settings).await?;
        let following = Self {
            lane: None,
            shared: Arc::new(Following {
                lookup: tokio::sync::Mutex::new(lookup),
                sentinels,
                master: master.to_owned(),
                settings: settings.clone(),
                current: RwLock::new(Current::new(conn, info.clone())),
                resolving: tokio::sync::Mutex::new(()),
                left: Mutex::new(None),
                last_resolved: Mutex::new(Instant::now()),
                on_switch: OnceLock::new(),
            }),
        };
        tokio::spawn(listen_for_switches(Arc::downgrade(&following.shared)));
        Ok((following, info))
    }

    /// Registers what follows a switch of primary (set once, by the store).
    pub(crate) fn on_switch(&self, f: impl Fn(&redis::ConnectionInfo) + Send + Sync + 'static) {
        let _ = self.shared.on_switch.set(Box::new(f));
    }

    /// Spare connection `lane` to the primary, following it like the main one: for commands
    /// that hold their connection (`WAIT`), so that they never delay the others.
    pub(crate) fn lane(&self, lane: usize) -> Self {
        Self {
            shared: self.shared.clone(),
            lane: Some(lane),
        }
    }

    fn current(&self) -> ConnectionManager {
        let current = self
            .shared
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        match self.lane {
            None => current.conn.clone(),
            Some(lane) => current.lane(lane, &self.shared.settings),
        }
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
            shared.lookup.lock().await.primary(&shared.master).await
        })
        .await;
        let client = match found {
            Ok(Ok(client)) => client,
            Ok(Err(err)) => {
                tracing::debug!(master = %shared.master, error = %err, "sentinels could not name a primary yet");
                return;
            }
            Err(_) => return,
        };
        let info = client.get_connection_info().clone();
        let left_recently = shared
            .left
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|(addr, at)| *addr == *info.addr() && at.elapsed() < LEFT_FOR);
        if left_recently {
            tracing::debug!(primary = %info.addr(), "a sentinel still names the primary we left; staying");
            return;
        }
        self.adopt(client, info).await;
    }

    /// Moves to the primary a sentinel announced at `host:port` (same credentials and TLS
    /// settings as the current one), once it answers as a primary.
    async fn switch_to(&self, host: &str, port: u16) {
        let shared = &self.shared;
        let _one = shared.resolving.lock().await;
        let current = shared
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .info
            .clone();
        let info = super::node_info(&current, host, port);
        let client = match shared.settings.client(info.clone()) {
            Ok(client) => client,
            Err(err) => {
                tracing::debug!(primary = %info.addr(), error = %err, "cannot address the announced primary");
                return;
            }
        };
        if self.adopt(client, info).await {
            *shared.left.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((current.addr().clone(), Instant::now()));
        }
        *shared
            .last_resolved
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    /// Connects to `client` and makes it the current primary, unless it already is or does
    /// not answer as a primary; whether it moved. The caller holds `resolving`.
    async fn adopt(&self, client: redis::Client, info: redis::ConnectionInfo) -> bool {
        let shared = &self.shared;
        let same = shared
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .info
            .addr()
            == info.addr();
        if same {
            return false;
        }
        let conn = match manager(client, &shared.settings).await {
            Ok(conn) => conn,
            Err(err) => {
                tracing::debug!(primary = %info.addr(), error = %err, "cannot connect to the new primary yet");
                return false;
            }
        };
        if let Err(why) = answers_as_primary(conn.clone(), shared.settings.response_timeout).await {
            tracing::debug!(primary = %info.addr(), why, "the announced primary is not one yet");
            return false;
        }
        tracing::warn!(master = %shared.master, primary = %info.addr(), "following a failover to the new primary");
        *shared
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Current::new(conn, info.clone());
        if let Some(on_switch) = shared.on_switch.get() {
            on_switch(&info);
        }
        true
    }
}

/// Whether the node behind `conn` says it is a primary (`ROLE`).
async fn answers_as_primary(mut conn: ConnectionManager, limit: Duration) -> Result<(), String> {
    let role = tokio::time::timeout(
        limit,
        redis::cmd("ROLE").query_async::<Vec<Value>>(&mut conn),
    )
    .await
    .map_err(|_| "no answer to ROLE".to_owned())?
    .map_err(|e| e.to_string())?;
    match role.first() {
        Some(Value::BulkString(role)) if role == b"master" => Ok(()),
        Some(Value::SimpleString(role)) if role == "master" => Ok(()),
        other => Err(format!("ROLE answered {other:?}")),
    }
}

/// Listens to the sentinels' `+switch-master` channel (one sentinel at a time, the next
/// when it goes away) and moves the connection to each primary announced for our master.
/// After each (re)subscription it also asks the sentinels once, in case an announcement was
/// missed. Ends when the store is dropped.
async fn listen_for_switches(shared: Weak<Following>) {
    use futures_util::StreamExt as _;
    let Some(strong) = shared.upgrade() else {
        return;
    };
    let sentinels = strong.sentinels.clone();
    let master = strong.master.clone();
    let settings = strong.settings.clone();
    drop(strong);
    let mut next = 0usize;
    loop {
        if sentinels.is_empty() || shared.strong_count() == 0 {
            return;
        }
        let info = sentinels[next % sentinels.len()].clone();
        next = next.wrapping_add(1);
        let subscribed = async {
            let client = settings.client(info.clone()).map_err(|e| e.to_string())?;
            let mut pubsub = client.get_async_pubsub().await.map_err(|e| e.to_string())?;
            pubsub
                .subscribe("+switch-master")
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(pubsub)
        };
        let mut pubsub = match tokio::time::timeout(settings.connect_timeout, subscribed).await {
            Ok(Ok(pubsub)) => pubsub,
            Ok(Err(err)) => {
                tracing::debug!(sentinel = %info.addr(), error = %err, "cannot listen to this sentinel's announcements");
                tokio::time::sleep(LISTEN_RETRY).await;
                continue;
            }
            Err(_) => {
                tokio::time::sleep(LISTEN_RETRY).await;
                continue;
            }
        };
        // Anything announced while no one listened.
        match shared.upgrade() {
            Some(strong) => {
                FollowingConn {
                    shared: strong,
                    lane: None,
                }
                .resolve()
                .await
            }
            None => return,
        }
        let mut messages = pubsub.on_message();
        loop {
            let message = match tokio::time::timeout(LISTEN_CHECK, messages.next()).await {
                Ok(Some(message)) => message,
                // The sentinel went away: the next one.
                Ok(None) => break,
                Err(_) if shared.strong_count() == 0 => return,
                Err(_) => continue,
            };
            let Ok(payload) = message.get_payload::<String>() else {
                continue;
            };
            // "<master> <old ip> <old port> <new ip> <new port>"
            let parts: Vec<&str> = payload.split_whitespace().collect();
            let [name, _, _, host, port] = parts[..] else {
                continue;
            };
            let Ok(port) = port.parse::<u16>() else {
                continue;
            };
            if name != master {
                continue;
            }
            let Some(strong) = shared.upgrade() else {
                return;
            };
            FollowingConn {
                shared: strong,
                lane: None,
            }
            .switch_to(host, port)
            .await;
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

    req_packed_commands!(self, pipeline, offset, count => {
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
    });

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
    // Every sentinel answered, and none monitors that name: a configuration mistake that no
    // retry fixes (redis-rs reports this kind only when no sentinel could name a primary).
    if err.kind() == ErrorKind::MasterNameNotFoundBySentinel {
        return StoreError::Config {
            message: format!(
                "no sentinel monitors a primary named `{master}`: check the name against \
                 `sentinel monitor <name> ...` in the sentinels' configuration"
            ),
        };
    }
    match StoreError::from(err) {
        StoreError::Unreachable { message, cause } => StoreError::Unreachable {
            message: format!("no sentinel could name a primary for `{master}`: {message}"),
            cause,
        },
        other => other,
    }
}
