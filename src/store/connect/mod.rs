//! Connection set-up shared by every Redis backend (a single primary, Sentinel, a Cluster, a
//! quorum's nodes): a plain first attempt to a server (so wrong credentials fail once,
//! clearly), the version and cluster-mode checks, the self-reconnecting `ConnectionManager`,
//! the cluster client's settings, following a Sentinel-managed primary ([`sentinel`]), and
//! starting without the server ([`lazy`]).

/// Writes `ConnectionLike::req_packed_commands` (commands `offset..offset + count` of a
/// pipeline) around `body`, with the names it binds: the signature the redis trait asks of
/// every connection of ours, spelled once.
macro_rules! req_packed_commands {
    ($self:ident, $pipeline:ident, $offset:ident, $count:ident => $body:expr) => {
        fn req_packed_commands<'a>(
            &'a mut $self,
            $pipeline: &'a ::redis::Pipeline,
            $offset: usize,
            $count: usize,
        ) -> ::redis::RedisFuture<'a, Vec<::redis::Value>> {
            $body
        }
    };
}
pub(crate) use req_packed_commands;

mod lazy;
mod sentinel;

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;

pub(crate) use self::lazy::LazyConn;
pub(crate) use self::sentinel::{FollowingConn, PrimaryConn, SentinelTarget};
use crate::error::StoreError;

/// Connection settings, validated by the client builder.
#[derive(Clone, Debug)]
pub(crate) struct RedisSettings {
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) reconnect_retries: usize,
    /// Refuse a server whose eviction policy can drop keys, instead of warning.
    pub(crate) require_noeviction: bool,
    /// A CA to trust and a client identity for `rediss://` (redis-rs redacts them in `Debug`).
    #[cfg(any(feature = "tls", feature = "tls-native-roots"))]
    pub(crate) tls: Option<redis::TlsCertificates>,
}

impl RedisSettings {
    /// A client for the server at `info`, with the TLS certificates if any.
    pub(crate) fn client(&self, info: redis::ConnectionInfo) -> Result<redis::Client, StoreError> {
        install_crypto_provider();
        #[cfg(any(feature = "tls", feature = "tls-native-roots"))]
        if let Some(certs) = &self.tls {
            return Ok(redis::Client::build_with_tls(info, certs.clone())?);
        }
        Ok(redis::Client::open(info)?)
    }

    /// The connection manager's settings: our timeouts, bounded jittered reconnects.
    pub(crate) fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.response_timeout))
            .set_connection_timeout(Some(self.connect_timeout))
            .set_number_of_retries(self.reconnect_retries)
            .set_max_delay(Duration::from_secs(1))
    }
}

/// The least and the most the cluster client waits before a retry, in ms.
const CLUSTER_RETRY_WAIT_MIN_MS: u64 = 10;
const CLUSTER_RETRY_WAIT_MAX_MS: u64 = 1_000;

/// The cluster client's settings: our timeouts (the response timeout also bounds a call's
/// redirects and retries), as many retries as reconnects on a single primary, and short waits
/// between them.
///
/// redis-rs waits at least 1.28 s before retrying a `TRYAGAIN` (a multi-key call in a slot
/// that is being migrated, some of whose keys have moved: an acquire's lock and fence keys,
/// for one). A migration step lasts milliseconds, and a lock waiter that slept 1.28 s more
/// than needed would miss its turn; so the waits here grow from 10 ms, doubling, up to 1 s.
pub(crate) fn cluster_client(
    nodes: &[redis::ConnectionInfo],
    settings: &RedisSettings,
) -> ClusterClientBuilder {
    install_crypto_provider();
    let builder = ClusterClientBuilder::new(nodes.to_vec())
        .connection_timeout(settings.connect_timeout)
        .response_timeout(settings.response_timeout)
        .retries(u32::try_from(settings.reconnect_retries).unwrap_or(u32::MAX))
        .min_retry_wait(CLUSTER_RETRY_WAIT_MIN_MS)
        .max_retry_wait(CLUSTER_RETRY_WAIT_MAX_MS)
        .retry_wait_formula(CLUSTER_RETRY_WAIT_MIN_MS, 2);
    #[cfg(any(feature = "tls", feature = "tls-native-roots"))]
    if let Some(certs) = &settings.tls {
        return builder.certs(certs.clone());
    }
    builder
}

/// The settings of another node of the same deployment at `host:port`: `seed`'s credentials,
/// database and TLS parameters, with its address replaced.
pub(crate) fn node_info(
    seed: &redis::ConnectionInfo,
    host: &str,
    port: u16,
) -> redis::ConnectionInfo {
    let addr = match seed.addr() {
        redis::ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => redis::ConnectionAddr::TcpTls {
            host: host.to_owned(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => redis::ConnectionAddr::Tcp(host.to_owned(), port),
    };
    seed.clone().set_addr(addr)
}

/// rustls needs a process-wide crypto provider before its first handshake, and redis-rs
/// installs none: without one every `rediss://` connection fails. Installs ring's once,
/// unless the application installed its own first (then `install_default` refuses, which is
/// what we want).
pub(crate) fn install_crypto_provider() {
    #[cfg(any(feature = "tls", feature = "tls-native-roots"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            let _ = rustls::crypto::ring::default_provider().install_default();
        });
    }
}

/// One plain connection to the server of `client`, with the version checked: the first
/// contact with a server, so that a wrong URL, wrong credentials or an old server fail here,
/// once and clearly (the connection manager and the cluster client retry their first
/// connection on every error, which would turn a clear `Auth` error into a slow timeout).
pub(crate) async fn probe(
    client: redis::Client,
    settings: &RedisSettings,
) -> Result<redis::aio::MultiplexedConnection, StoreError> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(settings.connect_timeout))
        .set_response_timeout(Some(settings.response_timeout));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| {
            let err = StoreError::from(e).with_deadline(settings.connect_timeout);
            naming_the_server(err, client.get_connection_info().addr())
        })?;
    check_version(&mut conn).await?;
    check_eviction(&mut conn, settings.require_noeviction).await?;
    Ok(conn)
}

/// The server's `maxmemory-policy`, from `INFO memory`; `None` when it cannot be read (an
/// ACL that forbids `INFO`).
pub(crate) async fn eviction_policy<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
) -> Option<String> {
    let info = redis::cmd("INFO")
        .arg("memory")
        .query_async::<String>(conn)
        .await
        .ok()?;
    policy_in(&info)
}

/// The `maxmemory_policy` field of an `INFO memory` answer.
pub(crate) fn policy_in(info: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.strip_prefix("maxmemory_policy:"))
        .map(|policy| policy.trim().to_owned())
}

/// Whether a server under `policy` may delete keys before their ttl: every policy but
/// `noeviction` (`volatile-*` ones pick keys with a ttl, which every lock key has).
pub(crate) fn can_evict(policy: &str) -> bool {
    policy != "noeviction"
}

/// Warns about (or, when `refuse`, refuses) a server whose eviction policy can delete lock
/// keys before their ttl, which would end mutual exclusion with nobody told.
pub(crate) async fn check_eviction<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
    refuse: bool,
) -> Result<(), StoreError> {
    let Some(policy) = eviction_policy(conn).await else {
        return Ok(());
    };
    if !can_evict(&policy) {
        return Ok(());
    }
    if refuse {
        return Err(StoreError::Evicting { policy });
    }
    tracing::warn!(
        maxmemory_policy = %policy,
        "this Redis server may evict keys under memory pressure (maxmemory-policy {policy}): \
         a lock key evicted before its ttl lets a second holder in with nobody told; set \
         maxmemory-policy noeviction (see the guide's deployment page)"
    );
    Ok(())
}

/// An unreachable server's error with its address first (`127.0.0.1:6379: Connection
/// refused`): at start-up the connection layer's words alone do not say which of the
/// configured servers it was.
fn naming_the_server(err: StoreError, addr: &redis::ConnectionAddr) -> StoreError {
    match err {
        StoreError::Unreachable { message, cause } => StoreError::Unreachable {
            message: format!("{addr}: {message}"),
            cause,
        },
        other => other,
    }
}

/// Refuses a server whose cluster mode is not the one the client asked for, with an error
/// that names the right constructor; a cluster also needs Redis 7.0 (sharded pub/sub). A
/// server that does not answer `INFO` (an ACL that forbids it) is let through.
pub(crate) async fn check_cluster_mode<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
    cluster: bool,
) -> Result<(), StoreError> {
    // One section per INFO: Redis 6.2 answers a syntax error to a list of sections (7.0 added
    // them), which would let every server through.
    let mut info = String::new();
    for section in ["server", "cluster"] {
        let Ok(text) = redis::cmd("INFO")
            .arg(section)
            .query_async::<String>(conn)
            .await
        else {
            return Ok(());
        };
        info.push_str(&text);
    }
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    match (field("cluster_enabled"), cluster) {
        (Some("1"), false) => {
            return Err(StoreError::Config {
                message: "this server runs in cluster mode: connect with \
                          Client::connect_cluster([...node urls])"
                    .to_owned(),
            });
        }
        (Some("0"), true) => {
            return Err(StoreError::Config {
                message: "this server does not run in cluster mode: connect with \
                          Client::connect(url)"
                    .to_owned(),
            });
        }
        _ => {}
    }
    if cluster
        && let Some(version) = field("redis_version")
        && !at_least(version, (7, 0))
    {
        return Err(StoreError::Unsupported {
            version: format!("{version} (a cluster needs 7.0 or newer, for sharded pub/sub)"),
        });
    }
    Ok(())
}

/// Connects eagerly to the server of `client` ([`probe`], then the cluster-mode check), then
/// makes the manager, which reconnects by itself from then on.
pub(crate) async fn manager(
    client: redis::Client,
    settings: &RedisSettings,
) -> Result<ConnectionManager, StoreError> {
    let mut conn = probe(client.clone(), settings).await?;
    check_cluster_mode(&mut conn, false).await?;
    drop(conn);
    let limit = settings.connect_timeout.saturating_mul(2);
    tokio::time::timeout(
        limit,
        ConnectionManager::new_with_config(client, settings.manager_config()),
    )
    .await
    .map_err(|_| StoreError::Timeout { after: limit })?
    .map_err(StoreError::from)
}

/// Refuses a server older than [`MIN_REDIS_VERSION`](crate::MIN_REDIS_VERSION) with a clear
/// error, instead of failing later inside a script (after a lock was already taken). A server
/// that does not answer `INFO server` (an ACL that forbids it) or reports no version is let
/// through; one that wants credentials the URL does not carry (`NOAUTH`) is an
/// [`Auth`](StoreError::Auth) error here, not at the first lock.
pub(crate) async fn check_version<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
) -> Result<(), StoreError> {
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
    // A sentinel answers INFO too (and PING, and a version): without this, `connect` to a
    // sentinel's address would succeed and every script call fail with "unknown command".
    if info
        .lines()
        .any(|line| line.trim() == "redis_mode:sentinel")
    {
        return Err(StoreError::Config {
            message: "this address is a Redis Sentinel, not a data server: connect with \
                      Client::connect_sentinel(master_name, [...sentinel urls])"
                .to_owned(),
        });
    }
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
    match parse_version(crate::error::MIN_REDIS_VERSION) {
        Some(need) => at_least(version, need),
        None => true,
    }
}

/// Whether `version` is at least `need`; an unparsable version is given the benefit of the
/// doubt.
fn at_least(version: &str, need: (u32, u32)) -> bool {
    parse_version(version).is_none_or(|have| have >= need)
}

fn parse_version(v: &str) -> Option<(u32, u32)> {
    let mut parts = v.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
