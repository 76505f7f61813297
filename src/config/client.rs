//! [`ClientConfig`]: which store, and the client's settings, as a service keeps them in its
//! configuration; [`connect`](ClientConfig::connect) builds the client through
//! [`ClientBuilder`].

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::de::{FieldValue, ReadTable, Table, above_zero, deserialize_table, note, read_items};
use super::{ConnectError, FieldErrorKind, InvalidField};
use crate::client::{Client, ClientBuilder};

/// A [`Client`]'s configuration: exactly one store, and the [`ClientBuilder`] settings, each
/// optional (unset: the builder's default). Deserialises from a table whose fields are the
/// builder's options; [`connect`](Self::connect) makes the client.
///
/// | field | value | builder option |
/// |---|---|---|
/// | `url` | a single primary: `"redis://host:6379/"` (`rediss://` for TLS) | [`ClientBuilder::connect`] |
/// | `cluster` | a Redis Cluster: a list of node URLs | [`ClientBuilder::connect_cluster`] |
/// | `sentinel` | `{ master = "mymaster", nodes = [sentinel URLs], primary_auth = { username = "app", password = "..." } }` (`primary_auth`, and its `username`, optional) | [`ClientBuilder::connect_sentinel`], [`ClientBuilder::primary_auth`] |
/// | `quorum` | Redlock: a list of node URLs, or `{ nodes = [..], node_timeout = "50ms", restart_quarantine = "1min" }` | [`ClientBuilder::connect_quorum`], [`quorum_node_timeout`](ClientBuilder::quorum_node_timeout), [`restart_quarantine`](ClientBuilder::restart_quarantine) |
/// | `memory` | `true`: the in-memory store (one process only) | [`ClientBuilder::try_in_memory`] |
/// | `prefix` | text | [`ClientBuilder::prefix`] |
/// | `response_timeout`, `connect_timeout` | a duration (`"500ms"`) | [`ClientBuilder::response_timeout`], [`ClientBuilder::connect_timeout`] |
/// | `reconnect_retries` | a whole number | [`ClientBuilder::reconnect_retries`] |
/// | `lazy` | `true`: start while the server is down; `url` only | [`ClientBuilder::lazy`] |
/// | `watch_deletions` | `true`: holders are told at once of keys deleted by hand (needs the server's keyspace notifications); `url` or `sentinel` only | [`ClientBuilder::watch_deletions`] |
/// | `identity` | who this client's leases say holds them: 1 to 128 bytes of visible ASCII (default `<host>/<pid>`) | [`ClientBuilder::identity`] |
/// | `replicas` | `{ count = 1, timeout = "50ms" }`; `url` or `sentinel` only | [`ClientBuilder::replicas`] |
/// | `tls` | `{ ca_file = "ca.pem", cert_file = "client.pem", key_file = "client.key" }`, each optional (a certificate with its key); `rediss://` URLs only; features `tls` / `tls-native-roots` | [`ClientBuilder::tls_root_certificate`], [`ClientBuilder::tls_client_identity`] |
/// | `counting_on` | another client's table (`{ url = "redis://counts:6379/" }`, `cluster`, `sentinel` or `memory`; not a `quorum`, and no `counting_on` of its own): where rate limits, semaphores, Bloom filters and fenced writes go, for a Redlock `quorum` whose primaries cannot count. Its `prefix` is this one's unless set, and must equal it | [`ClientBuilder::counting_on`] |
///
/// Unknown fields, a field given twice, no store or two stores are errors that name the
/// field, and so are a URL that is not a Redis URL (a wrong scheme, no host) and a prefix
/// the builder would refuse (empty, braces, whitespace), with the line they are on. The files are read by [`connect`](Self::connect), not when the configuration is
/// parsed. `Debug` shows neither the passwords of `primary_auth` nor those in URLs.
///
/// ```
/// # fn main() -> Result<(), toml::de::Error> {
/// use distlock::config::{ClientConfig, StoreConfig};
///
/// let config: ClientConfig = toml::from_str(
///     r#"
///     url = "redis://app:s3cret@10.0.0.5:6379/"
///     prefix = "shop"
///     response_timeout = "500ms"
///     "#,
/// )?;
/// assert!(matches!(config.store, StoreConfig::Redis(_)));
/// assert!(!format!("{config:?}").contains("s3cret"));
///
/// let err = toml::from_str::<ClientConfig>("url = \"redis://a/\"\nmemory = true").unwrap_err();
/// assert!(err.message().contains("set exactly one of"));
/// # Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Which store the client uses.
    pub store: StoreConfig,
    /// [`ClientBuilder::prefix`].
    pub prefix: Option<String>,
    /// [`ClientBuilder::response_timeout`].
    pub response_timeout: Option<Duration>,
    /// [`ClientBuilder::connect_timeout`].
    pub connect_timeout: Option<Duration>,
    /// [`ClientBuilder::reconnect_retries`].
    pub reconnect_retries: Option<usize>,
    /// [`ClientBuilder::lazy`]: start without the server (`url` only).
    pub lazy: bool,
    /// [`ClientBuilder::identity`]: who this client's leases say holds them.
    pub identity: Option<String>,
    /// [`ClientBuilder::watch_deletions`] (`url` or `sentinel` only).
    pub watch_deletions: bool,
    /// [`ClientBuilder::replicas`]: the replica acknowledgement every lock asks for.
    pub replicas: Option<ReplicasConfig>,
    /// Certificates for `rediss://`, read by [`connect`](Self::connect).
    pub tls: Option<TlsFiles>,
    /// [`ClientBuilder::counting_on`]: the client counting primitives go to, connected by
    /// [`connect`](Self::connect) (its prefix, unless set, is this one's).
    pub counting_on: Option<Box<ClientConfig>>,
}

/// The store of a [`ClientConfig`]: one of its fields `url`, `cluster`, `sentinel`, `quorum`
/// or `memory`. `Debug` hides the passwords in URLs.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreConfig {
    /// A single primary (`url`).
    Redis(String),
    /// A Redis Cluster, through one or more of its nodes (`cluster`).
    Cluster(Vec<String>),
    /// The primary Sentinel names (`sentinel`).
    Sentinel(SentinelConfig),
    /// A Redlock quorum of independent primaries (`quorum`).
    Quorum(QuorumConfig),
    /// The in-memory store (`memory = true`).
    Memory,
}

/// Sentinel settings: `{ master, nodes, primary_auth }`.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SentinelConfig {
    /// The name the sentinels monitor the primary under (non-empty).
    pub master: String,
    /// The sentinels' URLs (`redis://host:26379/`; their own credentials in the URL).
    pub nodes: Vec<String>,
    /// The credentials of the primary and its replicas ([`ClientBuilder::primary_auth`]).
    pub primary_auth: Option<Credentials>,
}

/// Redlock settings: the nodes, as a list or as `{ nodes, node_timeout, restart_quarantine }`.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QuorumConfig {
    /// The independent primaries' URLs.
    pub nodes: Vec<String>,
    /// [`ClientBuilder::quorum_node_timeout`].
    pub node_timeout: Option<Duration>,
    /// [`ClientBuilder::restart_quarantine`].
    pub restart_quarantine: Option<Duration>,
}

/// A username (optional) and a password: `{ username = "app", password = "..." }`. `Debug`
/// does not show the password.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Credentials {
    /// The ACL user; none: the `default` user.
    pub username: Option<String>,
    /// The password.
    pub password: String,
}

/// Replica acknowledgement: `{ count = 1, timeout = "50ms" }`; see
/// [`LockBuilder::replicas`](crate::LockBuilder::replicas).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicasConfig {
    /// How many replicas must acknowledge (0: none).
    pub count: u32,
    /// How long to wait for them: above zero and below the lock's ttl.
    pub timeout: Duration,
}

/// TLS certificates as files (PEM): `{ ca_file, cert_file, key_file }`, read by
/// [`ClientConfig::connect`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TlsFiles {
    /// A CA to trust instead of the default roots ([`ClientBuilder::tls_root_certificate`]).
    pub ca_file: Option<PathBuf>,
    /// The client certificate to present ([`ClientBuilder::tls_client_identity`]); with
    /// `key_file`.
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key; with `cert_file`.
    pub key_file: Option<PathBuf>,
}

impl ClientConfig {
    /// A configuration of `store` with every setting at the builder's default.
    #[must_use]
    pub fn new(store: StoreConfig) -> Self {
        Self {
            store,
            prefix: None,
            response_timeout: None,
            connect_timeout: None,
            reconnect_retries: None,
            lazy: false,
            identity: None,
            watch_deletions: false,
            replicas: None,
            tls: None,
            counting_on: None,
        }
    }

    /// Connects to the configured store: reads the TLS files, sets every option on a
    /// [`ClientBuilder`] and calls the store's `connect_*` (or
    /// [`try_in_memory`](ClientBuilder::try_in_memory)).
    ///
    /// # Errors
    /// [`ConnectError::Invalid`] for settings that cannot work together (what parsing
    /// refuses, for a configuration built in code), [`ConnectError::ReadFile`] for a TLS file
    /// that cannot be read, [`ConnectError::TlsUnavailable`] for `tls` without the `tls`
    /// feature, and
    /// [`ConnectError::Store`] for what connecting returns (an invalid setting is
    /// [`StoreError::Config`](crate::StoreError::Config)).
    pub async fn connect(&self) -> Result<Client, ConnectError> {
        self.check()?;
        let builder = self.builder().await?;
        let client = match &self.store {
            StoreConfig::Redis(url) => builder.connect(url).await?,
            StoreConfig::Cluster(nodes) => builder.connect_cluster(nodes).await?,
            StoreConfig::Sentinel(sentinel) => {
                let builder = match &sentinel.primary_auth {
                    Some(auth) => builder.primary_auth(auth.username.as_deref(), &auth.password),
                    None => builder,
                };
                builder
                    .connect_sentinel(&sentinel.master, &sentinel.nodes)
                    .await?
            }
            StoreConfig::Quorum(quorum) => {
                let mut builder = builder;
                if let Some(timeout) = quorum.node_timeout {
                    builder = builder.quorum_node_timeout(timeout);
                }
                if let Some(quarantine) = quorum.restart_quarantine {
                    builder = builder.restart_quarantine(quarantine);
                }
                builder.connect_quorum(&quorum.nodes).await?
            }
            StoreConfig::Memory => builder.try_in_memory()?,
        };
        Ok(client)
    }

    /// A [`ClientBuilder`] with the settings (the TLS files read), for a `connect_*` of your
    /// own, such as [`connect_redis_client`](ClientBuilder::connect_redis_client). The store's
    /// own settings (`primary_auth`, the quorum's) are set by [`connect`](Self::connect).
    ///
    /// # Errors
    /// [`ConnectError::ReadFile`] and [`ConnectError::TlsUnavailable`], as
    /// [`connect`](Self::connect).
    pub async fn builder(&self) -> Result<ClientBuilder, ConnectError> {
        let mut builder = Client::builder();
        if let Some(prefix) = &self.prefix {
            builder = builder.prefix(prefix.clone());
        }
        if let Some(timeout) = self.response_timeout {
            builder = builder.response_timeout(timeout);
        }
        if let Some(timeout) = self.connect_timeout {
            builder = builder.connect_timeout(timeout);
        }
        if let Some(retries) = self.reconnect_retries {
            builder = builder.reconnect_retries(retries);
        }
        if self.lazy {
            builder = builder.lazy(true);
        }
        if let Some(identity) = &self.identity {
            builder = builder.identity(identity.clone());
        }
        if self.watch_deletions {
            builder = builder.watch_deletions(true);
        }
        if let Some(replicas) = self.replicas {
            builder = builder.replicas(replicas.count, replicas.timeout);
        }
        if let Some(tls) = &self.tls {
            builder = tls.apply(builder).await?;
        }
        if let Some(counting) = &self.counting_on {
            let mut counting = (**counting).clone();
            if counting.prefix.is_none() {
                counting.prefix.clone_from(&self.prefix);
            }
            // Boxed: `connect` calls `builder`, which may call `connect` once more.
            let other = Box::pin(counting.connect()).await?;
            builder = builder.counting_on(other);
        }
        Ok(builder)
    }
}

impl TlsFiles {
    #[cfg(any(feature = "tls", feature = "tls-native-roots"))]
    async fn apply(&self, mut builder: ClientBuilder) -> Result<ClientBuilder, ConnectError> {
        if let Some(ca) = &self.ca_file {
            builder = builder.tls_root_certificate(read("tls.ca_file", ca).await?);
        }
        // `check` refused a certificate without its key, and the other way round.
        if let (Some(cert), Some(key)) = (&self.cert_file, &self.key_file) {
            let cert = read("tls.cert_file", cert).await?;
            let key = read("tls.key_file", key).await?;
            builder = builder.tls_client_identity(cert, key);
        }
        Ok(builder)
    }

    #[cfg(not(any(feature = "tls", feature = "tls-native-roots")))]
    async fn apply(&self, _builder: ClientBuilder) -> Result<ClientBuilder, ConnectError> {
        Err(ConnectError::TlsUnavailable)
    }
}

/// The contents of `path`, read off the runtime's threads.
#[cfg(any(feature = "tls", feature = "tls-native-roots"))]
async fn read(field: &'static str, path: &std::path::Path) -> Result<Vec<u8>, ConnectError> {
    let owned = path.to_owned();
    let contents = tokio::task::spawn_blocking(move || std::fs::read(owned))
        .await
        .unwrap_or_else(|join| Err(std::io::Error::other(join)));
    contents.map_err(|source| ConnectError::ReadFile {
        field,
        path: path.to_owned(),
        source,
    })
}

// ---- Debug: no passwords ----------------------------------------------------------------

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("store", &self.store)
            .field("prefix", &self.prefix)
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("reconnect_retries", &self.reconnect_retries)
            .field("lazy", &self.lazy)
            .field("identity", &self.identity)
            .field("watch_deletions", &self.watch_deletions)
            .field("replicas", &self.replicas)
            .field("tls", &self.tls)
            .field("counting_on", &self.counting_on)
            .finish()
    }
}

impl fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Redis(url) => f.debug_tuple("Redis").field(&Redacted(url)).finish(),
            Self::Cluster(nodes) => f.debug_tuple("Cluster").field(&RedactedAll(nodes)).finish(),
            Self::Sentinel(sentinel) => f.debug_tuple("Sentinel").field(sentinel).finish(),
            Self::Quorum(quorum) => f.debug_tuple("Quorum").field(quorum).finish(),
            Self::Memory => f.write_str("Memory"),
        }
    }
}

impl fmt::Debug for SentinelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelConfig")
            .field("master", &self.master)
            .field("nodes", &RedactedAll(&self.nodes))
            .field("primary_auth", &self.primary_auth)
            .finish()
    }
}

impl fmt::Debug for QuorumConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuorumConfig")
            .field("nodes", &RedactedAll(&self.nodes))
            .field("node_timeout", &self.node_timeout)
            .field("restart_quarantine", &self.restart_quarantine)
            .finish()
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &format_args!("<redacted>"))
            .finish()
    }
}

/// A URL with its password (`user:password@`, or a `pass`/`password` query parameter, as
/// redis-rs reads for Unix sockets) replaced by `<redacted>`.
struct Redacted<'a>(&'a str);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&redact(self.0), f)
    }
}

struct RedactedAll<'a>(&'a [String]);

impl fmt::Debug for RedactedAll<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|url| Redacted(url)))
            .finish()
    }
}

const REDACTED: &str = "<redacted>";

fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    // The authority ends at the first `/`, `?` or `#`; its userinfo at the last `@` in it.
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:{REDACTED}@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _)) if name == "pass" || name == "password" => {
                        format!("{name}={REDACTED}")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_owned(),
    };
    if scheme.is_empty() && !url.contains("://") {
        format!("{authority}{tail}")
    } else {
        format!("{scheme}://{authority}{tail}")
    }
}

// ---- Deserialize ------------------------------------------------------------------------

/// The store fields of a [`ClientConfig`], for messages.
const STORES: &str = "`url` (a single primary), `cluster`, `sentinel`, `quorum` or `memory = true`";

impl<'de> Deserialize<'de> for ClientConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_table(deserializer)
    }
}

impl ReadTable for ClientConfig {
    const WHAT: &'static str = "client settings";
    const FIELDS: &'static [&'static str] = &[
        "url",
        "cluster",
        "sentinel",
        "quorum",
        "memory",
        "prefix",
        "response_timeout",
        "connect_timeout",
        "reconnect_retries",
        "lazy",
        "identity",
        "watch_deletions",
        "replicas",
        "tls",
        "counting_on",
    ];

    fn read_fields<'de, A: MapAccess<'de>>(
        table: &mut Table<'_>,
        map: &mut A,
    ) -> Result<Self, A::Error> {
        let mut stores: Vec<(&'static str, StoreConfig)> = Vec::new();
        let mut config = Self::new(StoreConfig::Memory);
        while let Some(key) = table.next_key(map)? {
            match key {
                "url" => {
                    let url = table.value_checked(map, key, |url: &String| check_url(url))?;
                    stores.push((key, StoreConfig::Redis(url)));
                }
                "cluster" => {
                    let nodes =
                        table.value_checked(map, key, |urls: &Vec<String>| check_urls(urls))?;
                    stores.push((key, StoreConfig::Cluster(nodes)));
                }
                "sentinel" => stores.push((key, StoreConfig::Sentinel(table.value(map, key)?))),
                "quorum" => stores.push((key, StoreConfig::Quorum(table.value(map, key)?))),
                "memory" => {
                    if table.value::<bool, _>(map, key)? {
                        stores.push((key, StoreConfig::Memory));
                    }
                }
                "prefix" => {
                    config.prefix = Some(table.value_checked(map, key, |prefix: &String| {
                        crate::client::builder::check_prefix(prefix)
                    })?);
                }
                "response_timeout" => {
                    config.response_timeout = Some(table.value_checked(map, key, above_zero)?);
                }
                "connect_timeout" => {
                    config.connect_timeout = Some(table.value_checked(map, key, above_zero)?);
                }
                "reconnect_retries" => config.reconnect_retries = Some(table.value(map, key)?),
                "lazy" => config.lazy = table.value(map, key)?,
                "identity" => config.identity = Some(table.value(map, key)?),
                "watch_deletions" => config.watch_deletions = table.value(map, key)?,
                "replicas" => config.replicas = Some(table.value(map, key)?),
                "tls" => config.tls = Some(table.value(map, key)?),
                "counting_on" => {
                    config.counting_on = Some(Box::new(table.value(map, key)?));
                }
                _ => return Err(table.unhandled(key)),
            }
        }
        // In the order of `FIELDS`, whatever the format's order of keys.
        stores.sort_by_key(|(field, _)| Self::FIELDS.iter().position(|f| f == field));
        config.store = match stores.len() {
            1 => stores.swap_remove(0).1,
            0 => {
                note(FieldErrorKind::NoStore, &table.path("url"));
                return Err(de::Error::custom(format_args!(
                    "no store: set exactly one of {STORES}"
                )));
            }
            _ => {
                note(FieldErrorKind::TwoStores, &table.path(stores[1].0));
                return Err(de::Error::custom(format_args!(
                    "fields `{}` and `{}` both name a store: set exactly one of {STORES}",
                    table.path(stores[0].0),
                    table.path(stores[1].0)
                )));
            }
        };
        config
            .check()
            .map_err(|invalid| table.error(invalid.field(), invalid.reason()))?;
        Ok(config)
    }
}

impl ClientConfig {
    /// What the builder does not refuse and would not work, or not as written: a Sentinel
    /// without a master name, replica acknowledgement on a store without replicas, a lazy
    /// start of a store that needs its servers at start, and TLS
    /// settings that would do nothing (none set, half a client certificate, or a store
    /// reached over `redis://`, which would connect in the clear).
    fn check(&self) -> Result<(), InvalidField> {
        for (field, timeout) in [
            ("response_timeout", self.response_timeout),
            ("connect_timeout", self.connect_timeout),
        ] {
            if timeout.is_some_and(|t| t.is_zero()) {
                return Err(InvalidField::new(field, "zero; it must be above zero"));
            }
        }
        if let StoreConfig::Quorum(quorum) = &self.store
            && quorum.node_timeout.is_some_and(|t| t.is_zero())
        {
            return Err(InvalidField::new(
                "quorum.node_timeout",
                "zero; it must be above zero",
            ));
        }
        if let StoreConfig::Sentinel(sentinel) = &self.store
            && sentinel.master.trim().is_empty()
        {
            return Err(InvalidField::new(
                "sentinel.master",
                "empty; give the name the sentinels monitor the primary under (their \
                 `sentinel monitor <name> ...`), e.g. \"mymaster\"",
            ));
        }
        if self.replicas.is_some_and(|r| r.count > 0)
            && !matches!(self.store, StoreConfig::Redis(_) | StoreConfig::Sentinel(_))
        {
            return Err(InvalidField::new(
                "replicas",
                "replica acknowledgement needs a single primary (`url` or `sentinel`)",
            ));
        }
        if self.lazy && !matches!(self.store, StoreConfig::Redis(_) | StoreConfig::Memory) {
            return Err(InvalidField::new(
                "lazy",
                "a lazy start needs a single primary (`url`): a Cluster, Sentinel or quorum \
                 client needs its servers at start",
            ));
        }
        if self.watch_deletions
            && !matches!(
                self.store,
                StoreConfig::Redis(_) | StoreConfig::Sentinel(_) | StoreConfig::Memory
            )
        {
            return Err(InvalidField::new(
                "watch_deletions",
                "watching deletions needs a single primary (`url` or `sentinel`): a Cluster \
                 keeps keyspace notifications on each node, and a quorum has no one server",
            ));
        }
        if let Some(identity) = &self.identity
            && let Err(why) = crate::holder::check_identity(identity)
        {
            return Err(InvalidField::new("identity", why));
        }
        if let Some(tls) = &self.tls {
            tls.check(&self.store)?;
        }
        if let Some(counting) = &self.counting_on {
            if matches!(counting.store, StoreConfig::Quorum(_)) {
                return Err(InvalidField::new(
                    "counting_on",
                    "a Redlock quorum cannot count: give a single primary (`url`), `sentinel`, \
                     `cluster` or `memory = true`",
                ));
            }
            if counting.counting_on.is_some() {
                return Err(InvalidField::new(
                    "counting_on.counting_on",
                    "the client counting is given has its own store: it counts on nothing else",
                ));
            }
            if let (Some(counting), Some(own)) = (&counting.prefix, &self.prefix)
                && counting != own
            {
                return Err(InvalidField::new(
                    "counting_on.prefix",
                    format!(
                        "{counting:?}, but this client's is {own:?}: one prefix names one \
                         application's keys on both stores (leave it out to use this one's)"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Whether `url` is a Redis URL the client can connect with (scheme, host, port, database);
/// the message says what to write instead, without the URL's password.
fn check_url(url: &str) -> Result<(), String> {
    use redis::IntoConnectionInfo as _;
    match url.into_connection_info() {
        Ok(_) => Ok(()),
        Err(err) => Err(format!(
            "{:?} is not a Redis URL ({err}): write redis://host:6379/ (rediss:// for TLS, \
             redis+unix:///path for a socket)",
            redact(url)
        )),
    }
}

/// [`check_url`] for each URL of a list, naming the first that fails by its index.
fn check_urls(urls: &[String]) -> Result<(), String> {
    for (i, url) in urls.iter().enumerate() {
        check_url(url).map_err(|why| format!("[{i}]: {why}"))?;
    }
    Ok(())
}

impl TlsFiles {
    fn check(&self, store: &StoreConfig) -> Result<(), InvalidField> {
        match (&self.ca_file, &self.cert_file, &self.key_file) {
            (None, None, None) => {
                return Err(InvalidField::new(
                    "tls",
                    "empty; set `ca_file`, or `cert_file` with `key_file`, or both",
                ));
            }
            (_, Some(_), None) | (_, None, Some(_)) => {
                return Err(InvalidField::new(
                    "tls",
                    "a client certificate needs both `cert_file` and `key_file`",
                ));
            }
            _ => {}
        }
        let (field, urls): (&str, &[String]) = match store {
            StoreConfig::Redis(url) => ("url", std::slice::from_ref(url)),
            StoreConfig::Cluster(nodes) => ("cluster", nodes),
            StoreConfig::Quorum(quorum) => ("quorum", &quorum.nodes),
            // The sentinels' scheme says how the primary is reached too.
            StoreConfig::Sentinel(sentinel) => ("sentinel.nodes", &sentinel.nodes),
            // Memory has nothing to secure.
            StoreConfig::Memory => return Ok(()),
        };
        if let Some(plain) = urls.iter().position(|url| !url.starts_with("rediss://")) {
            let at = match store {
                StoreConfig::Redis(_) => field.to_owned(),
                _ => format!("{field}[{plain}]"),
            };
            return Err(InvalidField::new(
                "tls",
                format!(
                    "`{at}` is not a `rediss://` URL, so it would connect without TLS; use \
                     `rediss://` or remove `tls`"
                ),
            ));
        }
        Ok(())
    }
}

impl ReadTable for SentinelConfig {
    const WHAT: &'static str = "Sentinel settings";
    const FIELDS: &'static [&'static str] = &["master", "nodes", "primary_auth"];

    fn read_fields<'de, A: MapAccess<'de>>(
        table: &mut Table<'_>,
        map: &mut A,
    ) -> Result<Self, A::Error> {
        let mut master: Option<String> = None;
        let mut nodes = None;
        let mut primary_auth = None;
        while let Some(key) = table.next_key(map)? {
            match key {
                "master" => master = Some(table.value(map, key)?),
                "nodes" => {
                    nodes =
                        Some(table.value_checked(map, key, |urls: &Vec<String>| check_urls(urls))?)
                }
                "primary_auth" => primary_auth = Some(table.value(map, key)?),
                _ => return Err(table.unhandled(key)),
            }
        }
        Ok(Self {
            master: master.ok_or_else(|| table.missing("master"))?,
            nodes: nodes.ok_or_else(|| table.missing("nodes"))?,
            primary_auth,
        })
    }
}

impl ReadTable for Credentials {
    const WHAT: &'static str = "credentials";
    const FIELDS: &'static [&'static str] = &["username", "password"];

    fn read_fields<'de, A: MapAccess<'de>>(
        table: &mut Table<'_>,
        map: &mut A,
    ) -> Result<Self, A::Error> {
        let mut username = None;
        let mut password = None;
        while let Some(key) = table.next_key(map)? {
            match key {
                "username" => username = Some(table.value(map, key)?),
                "password" => password = Some(table.value(map, key)?),
                _ => return Err(table.unhandled(key)),
            }
        }
        Ok(Self {
            username,
            password: password.ok_or_else(|| table.missing("password"))?,
        })
    }
}

impl ReadTable for ReplicasConfig {
    const WHAT: &'static str = "replica acknowledgement";
    const FIELDS: &'static [&'static str] = &["count", "timeout"];

    fn read_fields<'de, A: MapAccess<'de>>(
        table: &mut Table<'_>,
        map: &mut A,
    ) -> Result<Self, A::Error> {
        let mut count = None;
        let mut timeout = None;
        while let Some(key) = table.next_key(map)? {
            match key {
                "count" => count = Some(table.value(map, key)?),
                "timeout" => timeout = Some(table.value(map, key)?),
                _ => return Err(table.unhandled(key)),
            }
        }
        let count = count.ok_or_else(|| table.missing("count"))?;
        let timeout: Duration = timeout.ok_or_else(|| table.missing("timeout"))?;
        if count > 0 && timeout.is_zero() {
            return Err(table.error("timeout", "zero; it must be above zero"));
        }
        Ok(Self { count, timeout })
    }
}

impl ReadTable for TlsFiles {
    const WHAT: &'static str = "TLS files";
    const FIELDS: &'static [&'static str] = &["ca_file", "cert_file", "key_file"];

    fn read_fields<'de, A: MapAccess<'de>>(
        table: &mut Table<'_>,
        map: &mut A,
    ) -> Result<Self, A::Error> {
        let mut files = Self::default();
        while let Some(key) = table.next_key(map)? {
            match key {
                "ca_file" => files.ca_file = Some(table.value(map, key)?),
                "cert_file" => files.cert_file = Some(table.value(map, key)?),
                "key_file" => files.key_file = Some(table.value(map, key)?),
                _ => return Err(table.unhandled(key)),
            }
        }
        Ok(files)
    }
}

impl ReadTable for QuorumTable {
    const WHAT: &'static str = "Redlock settings";
    const FIELDS: &'static [&'static str] = &["nodes", "node_timeout", "restart_quarantine"];

    fn read_fields<'de, A: MapAccess<'de>>(
        table: &mut Table<'_>,
        map: &mut A,
    ) -> Result<Self, A::Error> {
        let mut nodes = None;
        let mut node_timeout = None;
        let mut restart_quarantine = None;
        while let Some(key) = table.next_key(map)? {
            match key {
                "nodes" => {
                    nodes =
                        Some(table.value_checked(map, key, |urls: &Vec<String>| check_urls(urls))?)
                }
                "node_timeout" => {
                    node_timeout = Some(table.value_checked(map, key, above_zero)?);
                }
                "restart_quarantine" => restart_quarantine = Some(table.value(map, key)?),
                _ => return Err(table.unhandled(key)),
            }
        }
        Ok(Self(QuorumConfig {
            nodes: nodes.ok_or_else(|| table.missing("nodes"))?,
            node_timeout,
            restart_quarantine,
        }))
    }
}

/// The table form of `quorum`.
struct QuorumTable(QuorumConfig);

/// `quorum`: a list of URLs, or the table.
impl FieldValue for QuorumConfig {
    fn read<'de, D: Deserializer<'de>>(path: &str, deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(QuorumVisitor(path))
    }
}

struct QuorumVisitor<'a>(&'a str);

impl<'de> Visitor<'de> for QuorumVisitor<'_> {
    type Value = QuorumConfig;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        note(FieldErrorKind::WrongType, self.0);
        write!(
            f,
            "field `{}`: a list of node URLs, or a table of `nodes`, `node_timeout` and \
             `restart_quarantine`",
            self.0
        )
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<QuorumConfig, A::Error> {
        let nodes = read_items(self.0, seq)?;
        if let Err(why) = check_urls(&nodes) {
            note(FieldErrorKind::InvalidValue, self.0);
            return Err(de::Error::custom(format_args!("field `{}`: {why}", self.0)));
        }
        Ok(QuorumConfig {
            nodes,
            node_timeout: None,
            restart_quarantine: None,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<QuorumConfig, A::Error> {
        let table =
            <QuorumTable as FieldValue>::read(self.0, de::value::MapAccessDeserializer::new(map))?;
        Ok(table.0)
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn urls_lose_their_passwords_and_nothing_else() {
        for (url, shown) in [
            ("redis://127.0.0.1:6379/", "redis://127.0.0.1:6379/"),
            ("redis://:pw@host/0", "redis://:<redacted>@host/0"),
            (
                "rediss://app:p@ss:w0rd@host:6380/",
                "rediss://app:<redacted>@host:6380/",
            ),
            ("redis://app@host", "redis://app@host"),
            (
                "redis+unix:///run/redis.sock?db=1&pass=pw&user=app",
                "redis+unix:///run/redis.sock?db=1&pass=<redacted>&user=app",
            ),
            ("host:6379", "host:6379"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }
}
