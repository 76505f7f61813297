//! [`ClientBuilder`]: a client's settings, checked when it connects, and the connect paths of
//! every store (one primary, Sentinel, Cluster, a Redlock quorum, memory).

use std::sync::Arc;
use std::time::Duration;

use redis::IntoConnectionInfo;

use crate::core::{Core, HybridRegistry};
use crate::error::StoreError;
use crate::lock::DEFAULT_TTL;
use crate::lock::context::LockContext;
use crate::store::{
    Capability, MemoryStore, QuorumSettings, QuorumStore, RedisSettings, Replicas, Store,
};

use super::{Client, ClientInner, DEFAULT_PREFIX};

/// Whether `prefix` can begin every key: non-empty, without braces (which would make it a
/// Cluster hash tag) or whitespace; the message says what is wrong.
pub(crate) fn check_prefix(prefix: &str) -> Result<(), String> {
    if prefix.is_empty()
        || prefix
            .chars()
            .any(|c| c == '{' || c == '}' || c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "prefix {prefix:?} must be non-empty, without braces or whitespace"
        ));
    }
    Ok(())
}

/// A URL as connection settings, or a `Config` error that quotes what is wrong.
fn connection_info(url: &str) -> Result<redis::ConnectionInfo, StoreError> {
    url.into_connection_info().map_err(|e| StoreError::Config {
        message: format!("cannot use Redis URL: {e}"),
    })
}

/// Every URL as connection settings, or the first one's `Config` error.
fn connection_infos<I, S>(urls: I) -> Result<Vec<redis::ConnectionInfo>, StoreError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    urls.into_iter()
        .map(|url| connection_info(url.as_ref()))
        .collect()
}

/// Settings for a [`Client`]. Consuming builder; every setter validates on `connect`.
#[derive(Clone, Debug)]
#[must_use]
pub struct ClientBuilder {
    prefix: String,
    response_timeout: Duration,
    connect_timeout: Duration,
    reconnect_retries: usize,
    /// Refuse a server whose eviction policy can drop lock keys ([`require_noeviction`]).
    ///
    /// [`require_noeviction`]: Self::require_noeviction
    require_noeviction: bool,
    quorum_node_timeout: Option<Duration>,
    restart_quarantine: Duration,
    /// Credentials of the primary behind Sentinel (username, password).
    primary_auth: Option<(Option<String>, Secret)>,
    /// The replica acknowledgement every lock of the client asks for by default.
    replicas: Option<Replicas>,
    /// Where counting primitives go, if not to this client's own store.
    counting: Option<Client>,
    /// Start without the server ([`lazy`](Self::lazy)).
    lazy: bool,
    /// The holder identity of this client's leases; `None`: `<host>/<pid>`.
    identity: Option<String>,
    /// Holders listen for keys deleted by hand ([`watch_deletions`](Self::watch_deletions)).
    watch_deletions: bool,
    /// Certificates for `rediss://` (a CA to trust, a client identity).
    #[cfg(any(feature = "tls", feature = "tls-native-roots"))]
    tls: Option<redis::TlsCertificates>,
}

/// A password: never shown by `Debug`.
#[derive(Clone)]
struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Default for ClientBuilder {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_PREFIX.to_owned(),
            response_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            reconnect_retries: 6,
            require_noeviction: false,
            quorum_node_timeout: None,
            restart_quarantine: DEFAULT_TTL,
            primary_auth: None,
            replicas: None,
            counting: None,
            lazy: false,
            identity: None,
            watch_deletions: false,
            #[cfg(any(feature = "tls", feature = "tls-native-roots"))]
            tls: None,
        }
    }
}

impl ClientBuilder {
    /// The first part of every key (default `distlock`). Must be non-empty and contain none of
    /// `{`, `}` or whitespace, so that it can never change a key's hash slot.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Who this client's leases say holds them, as [`Client::lock_state`] and its
    /// semaphore and read-write twins show it (default `<host>/<pid>`, e.g. `web-7f9c/4242`).
    /// A lock builder can name another for one lock
    /// ([`LockBuilder::identity`](crate::LockBuilder::identity)). 1 to
    /// [`MAX_HOLDER_IDENTITY_LEN`](crate::MAX_HOLDER_IDENTITY_LEN) bytes of visible ASCII;
    /// anything else is refused at `connect` with [`StoreError::Config`]. It is shown to
    /// whoever can read the store's keys: never put a secret in it.
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = Some(identity.into());
        self
    }

    /// Tells a holder at once when its key is deleted by hand (`DEL` or `UNLINK` in
    /// `redis-cli`), as an operator's force does (default off). Its client listens on the
    /// server's keyspace notifications for deletions (`__keyevent@<db>__:del`), which the
    /// server sends only when its `notify-keyspace-events` includes `E` and `g` (e.g.
    /// `CONFIG SET notify-keyspace-events Eg`; distlock does not change the server's
    /// configuration). Every deletion in the database, releases included, then becomes a
    /// message to every client that watches, so keep it for services whose operators delete
    /// keys by hand. A single primary (plain, by URL, `ConnectionInfo` or `redis::Client`) or
    /// behind Sentinel; `connect_cluster`, `connect_quorum` and `connect_manager` refuse it
    /// with [`StoreError::Config`] (a Cluster's keyspace notifications stay on the node that
    /// holds the key). Without it, or without the server's notifications, a holder learns at
    /// its next renewal, within a third of its ttl.
    pub fn watch_deletions(mut self, on: bool) -> Self {
        self.watch_deletions = on;
        self
    }

    /// How long one command may take before it fails with [`StoreError::Timeout`]
    /// (default 2 s). Every public operation is bounded by it. Zero is refused at
    /// `connect`; `Duration::MAX` means no bound.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long one connection attempt may take (default 2 s). Zero is refused at
    /// `connect`; `Duration::MAX` means no bound.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Whether `connect` refuses a server whose `maxmemory-policy` can evict keys
    /// ([`StoreError::Evicting`]) instead of logging a warning (default `false`: warn).
    ///
    /// Under any policy but `noeviction`, a server that reaches its `maxmemory` deletes keys
    /// before their ttl, and `volatile-*` policies pick exactly the short-lived keys locks
    /// are: a lock key evicted while its holder works lets a second holder in, with nobody
    /// told. Set `maxmemory-policy noeviction` on the servers locks use (writes then fail
    /// loudly with `OOM` instead), or give locks a server of their own. A server whose ACL
    /// refuses `INFO` is let through (its policy cannot be read).
    pub fn require_noeviction(mut self, require: bool) -> Self {
        self.require_noeviction = require;
        self
    }

    /// How many times the connection manager retries a reconnect before a command fails
    /// (default 6, with jittered exponential backoff up to 1 s). 0 fails a command at once
    /// when the connection is down.
    pub fn reconnect_retries(mut self, retries: usize) -> Self {
        self.reconnect_retries = retries;
        self
    }

    /// Start without the server (default `false`): [`connect`](Self::connect),
    /// [`connect_info`](Self::connect_info) and
    /// [`connect_redis_client`](Self::connect_redis_client) return at once, without
    /// contacting it, so a process can start while Redis is down and become ready when it
    /// answers.
    ///
    /// Until the server answers, every operation fails with a store error
    /// ([`StoreError::Unreachable`] or [`StoreError::Timeout`]), as it would during an outage:
    /// a rate limiter's [outage policy](crate::ratelimit::RateLimiterBuilder::on_outage) applies, and
    /// [`Client::ping`] says the store is not ready. A background task probes the server
    /// (every 100 ms at first, backing off to every 2 s) and, once it answers, checks it as an
    /// eager `connect` would. A server those checks refuse (wrong credentials, a Cluster node, a
    /// sentinel's address, a version older than 6.2) is refused for good: the error is logged
    /// once at ERROR, and every operation and `ping` return it ([`StoreError::Auth`] or
    /// [`StoreError::Config`]).
    ///
    /// A single primary only: with `lazy(true)`, `connect_cluster`, `connect_sentinel`,
    /// `connect_quorum` and `connect_manager` return [`StoreError::Config`] (they need their
    /// servers to learn the deployment's shape). It has no effect on the in-memory store.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), distlock::StoreError> {
    /// // Returns at once, even with Redis down; `client.ping()` says when it is ready.
    /// let client = distlock::Client::builder()
    ///     .lazy(true)
    ///     .connect("redis://127.0.0.1:6379/")
    ///     .await?;
    /// # let _ = client; Ok(()) }
    /// ```
    pub fn lazy(mut self, lazy: bool) -> Self {
        self.lazy = lazy;
        self
    }

    /// Refuses [`lazy`](Self::lazy) for a store that needs its servers at start.
    /// Refuses [`watch_deletions`](Self::watch_deletions) where it cannot work.
    fn refuse_watch(&self, connect: &str) -> Result<(), StoreError> {
        if self.watch_deletions {
            return Err(StoreError::Config {
                message: format!(
                    "watch_deletions(true) needs a single primary, plain or behind Sentinel                      (keyspace notifications of one known database); {connect} cannot"
                ),
            });
        }
        Ok(())
    }

    fn refuse_lazy(&self, connect: &str) -> Result<(), StoreError> {
        if self.lazy {
            return Err(StoreError::Config {
                message: format!(
                    "lazy(true) is for a single primary (connect, connect_info, \
                     connect_redis_client); {connect} needs its servers at start"
                ),
            });
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), StoreError> {
        let bad = |message: String| Err(StoreError::Config { message });
        check_prefix(&self.prefix).or_else(bad)?;
        if self.response_timeout.is_zero() || self.connect_timeout.is_zero() {
            return bad("timeouts must be greater than zero".to_owned());
        }
        if let Some(identity) = &self.identity {
            crate::holder::check_identity(identity)
                .or_else(|why| bad(format!("identity: {why}")))?;
        }
        if let Some(other) = &self.counting {
            for capability in [
                Capability::HolderSets,
                Capability::RateLimits,
                Capability::BloomFilters,
                Capability::FencedWrites,
            ] {
                if let Err(refused) = other.supports(capability) {
                    return bad(format!(
                        "counting_on: the client given counts on `{}`, which cannot: {}",
                        refused.store, refused.reason
                    ));
                }
            }
            if other.prefix() != self.prefix {
                return bad(format!(
                    "counting_on: the client given has the key prefix {:?}, this one {:?}: \
                     one prefix names one application's keys on both stores",
                    other.prefix(),
                    self.prefix
                ));
            }
        }
        Ok(())
    }

    /// Connects to Redis; see [`Client::connect`].
    pub async fn connect(self, url: &str) -> Result<Client, StoreError> {
        self.validate()?;
        let client = self.settings().client(connection_info(url)?)?;
        self.connect_single(client).await
    }

    /// Connects to the server described by `info` (for settings a URL cannot carry, or a
    /// `ConnectionInfo` your configuration already builds); otherwise as
    /// [`connect`](Self::connect).
    pub async fn connect_info(self, info: redis::ConnectionInfo) -> Result<Client, StoreError> {
        self.validate()?;
        let client = self.settings().client(info)?;
        self.connect_single(client).await
    }

    /// Connects through a `redis::Client` your application already has (its address,
    /// credentials and TLS parameters, e.g. one made with `redis::Client::build_with_tls`).
    /// distlock opens its own connections from it: one for commands and one for release
    /// wake-ups. The builder's timeouts and retries apply.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let redis = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let client = distlock::Client::builder().connect_redis_client(redis).await?;
    /// # let _ = client; Ok(()) }
    /// ```
    pub async fn connect_redis_client(self, client: redis::Client) -> Result<Client, StoreError> {
        self.validate()?;
        self.connect_single(client).await
    }

    /// A single primary through `client`, eagerly or [lazily](Self::lazy).
    async fn connect_single(self, client: redis::Client) -> Result<Client, StoreError> {
        let db = client.get_connection_info().redis_settings().db();
        let store = if self.lazy {
            crate::store::redis::connect_lazy(client, self.settings())?
        } else {
            crate::store::redis::connect_client(client, self.settings()).await?
        };
        Ok(self.build_watching(Store::Scripted(store), Some(db)))
    }

    /// Runs on a `ConnectionManager` your application already has, sharing its connection
    /// (and its reconnect settings). The server is checked as on [`connect`](Self::connect).
    /// The builder's response timeout still bounds every operation. A manager carries no
    /// address to open a pub/sub connection to, so waiters are not woken by releases: they
    /// retry, each sleep bounded by the holder's remaining ttl and 500 ms. Use
    /// [`connect_redis_client`](Self::connect_redis_client) to keep wake-ups.
    pub async fn connect_manager(
        self,
        manager: redis::aio::ConnectionManager,
    ) -> Result<Client, StoreError> {
        self.validate()?;
        self.refuse_lazy("connect_manager")?;
        self.refuse_watch("connect_manager")?;
        let store = crate::store::redis::from_manager(manager, self.settings()).await?;
        Ok(self.build(Store::Scripted(store)))
    }

    /// Redlock only: how long each node of a quorum may take to answer an acquire or renewal
    /// (default `min(ttl / 10, 50 ms)`, per lease), and how long a release waits for the
    /// nodes still silent once a majority released (default 50 ms). A node slower than this
    /// does not vote, so one frozen node costs an acquire or a release at most about this
    /// long (what it did not release expires with its ttl). At least 1 ms.
    pub fn quorum_node_timeout(mut self, timeout: Duration) -> Self {
        self.quorum_node_timeout = Some(timeout);
        self
    }

    /// Redlock only: the least time a node that lost its data (restarted without
    /// persistence, or flushed) sits out of majorities, so that every lease it forgot has
    /// expired before its vote counts again (default 30 s, the default ttl). The client
    /// raises it to the longest ttl it has used; set it to the longest ttl any client of the
    /// quorum uses.
    pub fn restart_quarantine(mut self, quarantine: Duration) -> Self {
        self.restart_quarantine = quarantine;
        self
    }

    /// TLS (`rediss://`, feature `tls` or `tls-native-roots`): trust this CA certificate (PEM)
    /// instead of the default roots, e.g. a private CA of your own servers. On every
    /// connection: a single server, a Cluster's nodes, a quorum's, and behind Sentinel the
    /// sentinels and the primaries they name (`rediss://` sentinel URLs).
    #[cfg(any(feature = "tls", feature = "tls-native-roots"))]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        let certs = self.tls.get_or_insert(redis::TlsCertificates {
            client_tls: None,
            root_cert: None,
        });
        certs.root_cert = Some(pem.into());
        self
    }

    /// TLS (`rediss://`): present this client certificate and key (PEM) to servers that ask
    /// for one (`tls-auth-clients yes`).
    #[cfg(any(feature = "tls", feature = "tls-native-roots"))]
    pub fn tls_client_identity(
        mut self,
        certificate_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        let certs = self.tls.get_or_insert(redis::TlsCertificates {
            client_tls: None,
            root_cert: None,
        });
        certs.client_tls = Some(redis::ClientTlsConfig {
            client_cert: certificate_pem.into(),
            client_key: key_pem.into(),
        });
        self
    }

    /// The replica acknowledgement every lock of this client asks for, unless the lock says
    /// otherwise; see [`LockBuilder::replicas`](crate::LockBuilder::replicas). `count` 0: none
    /// (the default).
    pub fn replicas(mut self, count: u32, timeout: Duration) -> Self {
        self.replicas = (count > 0).then_some(Replicas { count, timeout });
        self
    }

    /// Counting primitives on another store: the client built takes its locks (and
    /// `#[distributed_lock]`, jobs, multi-locks, `LockLayer`) on its own store, and its rate
    /// limiters, Bloom filters, semaphores, read-write locks and fenced resources (and
    /// `ConcurrencyLimitLayer`) on `other`'s. Made for a Redlock quorum, whose independent primaries serve locks but
    /// cannot count: one client, locks on the quorum, limits on a single primary or a Cluster.
    ///
    /// `other` must be able to count ([`Capability::HolderSets`], [`Capability::RateLimits`]
    /// and [`Capability::BloomFilters`]) and have the same key prefix; otherwise connecting
    /// fails with [`StoreError::Config`]. Its connections, timeouts and watchdog serve what
    /// goes there, and it keeps working on its own (the two clients share those
    /// primitives: a semaphore of one is the semaphore of the other).
    /// [`Client::supports`] answers for counting capabilities with `other`'s store, and
    /// [`Client::store_kind`] names the store locks go to.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::ratelimit::{Policy, Rate};
    /// use distlock::{Capability, Client};
    ///
    /// let limits = Client::connect_cluster(["redis://10.0.0.1:6379/"]).await?;
    /// let client = Client::builder()
    ///     .counting_on(limits)
    ///     .connect_quorum([
    ///         "redis://10.0.1.1:6379/",
    ///         "redis://10.0.2.1:6379/",
    ///         "redis://10.0.3.1:6379/",
    ///     ])
    ///     .await?;
    /// assert_eq!(client.store_kind(), "quorum");
    /// assert!(client.supports(Capability::RateLimits).is_ok());
    ///
    /// let lease = client.lock("order:42").acquire().await?; // a Redlock lease
    /// let api = client.rate_limiter(Policy::gcra("api", Rate::per_second(100)?)?).build()?; // on the Cluster
    /// assert!(api.check("user:7").await?.allowed);
    /// let export = client.semaphore("exports", 2).acquire().await?; // on the Cluster
    /// # drop((lease, export)); Ok(()) }
    /// ```
    pub fn counting_on(mut self, other: Client) -> Self {
        self.counting = Some(other);
        self
    }

    /// Sentinel only: the credentials of the primary (and of the replica that may replace
    /// it). The sentinels' own credentials go in their URLs.
    pub fn primary_auth(mut self, username: Option<&str>, password: &str) -> Self {
        self.primary_auth = Some((username.map(str::to_owned), Secret(password.to_owned())));
        self
    }

    /// Connects through Sentinel; see [`Client::connect_sentinel`].
    pub async fn connect_sentinel<I, S>(
        self,
        master: &str,
        sentinels: I,
    ) -> Result<Client, StoreError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.validate()?;
        self.refuse_lazy("connect_sentinel")?;
        if master.trim().is_empty() {
            return Err(StoreError::Config {
                message: "Sentinel needs the name the sentinels monitor the primary under \
                          (`sentinel monitor <name> ...`; often `mymaster`), not an empty one"
                    .to_owned(),
            });
        }
        let sentinels = connection_infos(sentinels)?;
        if sentinels.is_empty() {
            return Err(StoreError::Config {
                message: "Sentinel needs at least one sentinel URL".to_owned(),
            });
        }
        let mut primary = redis::RedisConnectionInfo::default();
        if let Some((username, password)) = &self.primary_auth {
            if let Some(username) = username {
                primary = primary.set_username(username);
            }
            primary = primary.set_password(&password.0);
        }
        // Sentinels reached over TLS: the primary and replicas are too (with the client's
        // CA and certificate, if it has them, on every connection).
        let tls = sentinels.iter().find_map(|info| match info.addr() {
            redis::ConnectionAddr::TcpTls { insecure, .. } => Some(if *insecure {
                redis::TlsMode::Insecure
            } else {
                redis::TlsMode::Secure
            }),
            _ => None,
        });
        let target = crate::store::SentinelTarget {
            master,
            primary,
            tls,
        };
        let store =
            crate::store::redis::connect_sentinel(sentinels, &target, self.settings()).await?;
        // The primary is reached on database 0.
        Ok(self.build_watching(Store::Scripted(store), Some(0)))
    }

    /// Connects to a Redlock quorum; see [`Client::connect_quorum`].
    pub async fn connect_quorum<I, S>(self, nodes: I) -> Result<Client, StoreError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.validate()?;
        self.refuse_lazy("connect_quorum")?;
        self.refuse_watch("connect_quorum")?;
        let nodes = connection_infos(nodes)?;
        let quorum = QuorumSettings {
            node_timeout: self.quorum_node_timeout,
            restart_quarantine: self.restart_quarantine,
        };
        let store = QuorumStore::connect(nodes, &self.prefix, self.settings(), quorum).await?;
        Ok(self.build(Store::Quorum(store)))
    }

    /// Connects to a Redis Cluster; see [`Client::connect_cluster`].
    pub async fn connect_cluster<I, S>(self, nodes: I) -> Result<Client, StoreError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.validate()?;
        self.refuse_lazy("connect_cluster")?;
        self.refuse_watch("connect_cluster")?;
        let nodes = connection_infos(nodes)?;
        let store = crate::store::cluster::connect(nodes, self.settings()).await?;
        Ok(self.build(Store::Scripted(store)))
    }

    fn settings(&self) -> RedisSettings {
        RedisSettings {
            response_timeout: self.response_timeout,
            connect_timeout: self.connect_timeout,
            reconnect_retries: self.reconnect_retries,
            require_noeviction: self.require_noeviction,
            #[cfg(any(feature = "tls", feature = "tls-native-roots"))]
            tls: self.tls.clone(),
        }
    }

    /// Builds a client over a fresh in-memory store.
    ///
    /// # Panics
    /// If the settings are invalid (see [`try_in_memory`](Self::try_in_memory));
    /// [`try_in_memory`](Self::try_in_memory) returns the error instead.
    pub fn in_memory(self) -> Client {
        self.try_in_memory()
            .unwrap_or_else(|err| panic!("ClientBuilder::in_memory: {err}"))
    }

    /// Builds a client over a fresh in-memory store, or says why the settings are invalid.
    ///
    /// ```
    /// use distlock::{Client, StoreError};
    ///
    /// let err = Client::builder().prefix("no{braces}").try_in_memory().unwrap_err();
    /// assert!(matches!(err, StoreError::Config { .. }));
    /// ```
    ///
    /// # Errors
    /// [`StoreError::Config`] for an invalid prefix, a zero timeout, or a
    /// [`counting_on`](Self::counting_on) client that cannot count or has another prefix.
    pub fn try_in_memory(self) -> Result<Client, StoreError> {
        self.validate()?;
        Ok(self.build(Store::Memory(MemoryStore::new())))
    }

    fn build(self, store: Store) -> Client {
        self.build_watching(store, None)
    }

    /// Builds the client; with [`watch_deletions`](Self::watch_deletions) on, its holders
    /// also listen for deletions in database `db` (`None`: a store where none can be
    /// watched, such as memory, where no key is deleted by hand).
    fn build_watching(self, store: Store, db: Option<i64>) -> Client {
        // `validate` checked it; the counting primitives are built on its own client.
        let counting = self.counting.map(|other| other.counting().clone());
        let store = match &counting {
            Some(other) => store.split(other.store().clone()),
            None => store,
        };
        let identity = match self.identity {
            Some(identity) => identity.into(),
            None => crate::holder::default_identity(),
        };
        let deletions = match db {
            Some(db) if self.watch_deletions => vec![format!("__keyevent@{db}__:del")],
            _ => Vec::new(),
        };
        let hybrids = Arc::new(HybridRegistry::default());
        let core = Core::new(
            store,
            self.prefix,
            self.replicas,
            identity,
            deletions,
            Arc::downgrade(&hybrids),
        );
        Client {
            inner: Arc::new(ClientInner {
                locks: LockContext::new(core),
                counting,
                hybrids,
            }),
        }
    }
}
