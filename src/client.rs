//! The client: one store (Redis or memory), its key prefix, and the per-client machinery shared
//! by every lock it hands out (the watchdog and the wake-up registry).

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use redis::IntoConnectionInfo;

use crate::bloom::BloomBuilder;
use crate::core::{Core, HybridRegistry};
use crate::error::StoreError;
use crate::fenced::{FencedError, FencedResource};
use crate::idempotency::{Idempotency, IdempotencyError};
use crate::lock::context::LockContext;
use crate::lock::job::JobBuilder;
use crate::lock::multi::MultiLockBuilder;
use crate::lock::rwlock::RwLockBuilder;
use crate::lock::semaphore::SemaphoreBuilder;
use crate::lock::{DEFAULT_TTL, LockBuilder};
use crate::ratelimit::{Policy, RateLimiterBuilder};
use crate::store::{
    Capability, MemoryStore, QuorumSettings, QuorumStore, RedisSettings, Replicas, Store,
    StoreKind, Unsupported,
};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "distlock";

/// A handle to a store. Cheap to clone: clones share one connection, one watchdog and one
/// pub/sub subscription set.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock::LockError> {
/// let client = distlock::Client::in_memory();
/// let lease = client.lock("order:42").acquire().await?;
/// println!("fence {}", lease.fence().await?); // minted on first use
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    /// The store and its keys ([`Core`]), with the watchdog and hand-off registry of this
    /// client's leases.
    locks: LockContext,
    /// The client whose store serves this one's counting primitives (semaphores, read-write
    /// locks, Bloom filters; rate limits go there through the store), if not this one: see
    /// [`ClientBuilder::counting_on`].
    counting: Option<Client>,
    /// The hybrid rate limiters built on this client, for [`Client::shutdown`].
    pub(crate) hybrids: Arc<HybridRegistry>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("Client");
        debug.field("store", &self.store().kind().as_str());
        if self.inner.counting.is_some() {
            debug.field("counting_on", &self.store().counting_kind().as_str());
        }
        debug
            .field("prefix", &self.core().prefix())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to a single Redis primary: `redis://[user[:password]@]host[:port][/db]`, or
    /// `rediss://` for TLS (with the `tls` feature). Fails once, clearly, on a bad URL, a
    /// refused connection or wrong credentials.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::builder().connect(url).await
    }

    /// Connects to a Redis Cluster through one or more of its nodes (`redis://host:port`, each
    /// with the same credentials; `rediss://` with the `tls` feature). The cluster must run
    /// Redis 7.0 or newer (release wake-ups use sharded pub/sub). Every lock and rate-limit
    /// operation is one single-slot script on the node that owns it; `MOVED` and `ASK` are
    /// followed and retried within the response timeout. Fails once, clearly, if the first
    /// node is not in cluster mode (use [`connect`](Self::connect)), cannot be reached, or
    /// rejects the credentials.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), distlock::StoreError> {
    /// let client = distlock::Client::connect_cluster([
    ///     "redis://10.0.0.1:6379/",
    ///     "redis://10.0.0.2:6379/",
    /// ])
    /// .await?;
    /// # let _ = client; Ok(()) }
    /// ```
    pub async fn connect_cluster<I, S>(nodes: I) -> Result<Self, StoreError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder().connect_cluster(nodes).await
    }

    /// Connects to the primary that the sentinels (`redis://host:26379/`, one or more) name for
    /// `master`, and follows it through failovers: when the primary stops answering, or
    /// answers `READONLY` because it was demoted, the client asks the sentinels again and
    /// moves to the promoted replica (its wake-up subscriptions too). Everything else is the
    /// single-primary client. Set the primary's credentials with
    /// [`ClientBuilder::primary_auth`].
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), distlock::StoreError> {
    /// let client = distlock::Client::connect_sentinel(
    ///     "mymaster",
    ///     ["redis://10.0.0.1:26379/", "redis://10.0.0.2:26379/", "redis://10.0.0.3:26379/"],
    /// )
    /// .await?;
    /// # let _ = client; Ok(()) }
    /// ```
    pub async fn connect_sentinel<I, S>(master: &str, sentinels: I) -> Result<Self, StoreError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder().connect_sentinel(master, sentinels).await
    }

    /// Connects to a Redlock quorum: an odd number (at least 3) of **independent** Redis
    /// primaries (no replication between them). A lease is granted only by a majority, within
    /// what is left of its ttl after the time spent and the clock drift; renewed by a
    /// majority; released on every node. It survives the loss of a minority of the nodes,
    /// without relying on replication. Rate limits are refused on such a client
    /// ([`RateLimitError::UnsupportedStore`](crate::RateLimitError::UnsupportedStore)).
    ///
    /// Fails at once on wrong credentials or an unsupported server on any node, and with
    /// [`StoreError::Config`] when two members are one server (the same address after
    /// resolving names, the same boot value, or the same `run_id`): such a server would vote
    /// twice. Nodes that cannot be reached are tolerated as long as a majority can (they join
    /// when they come up, once checked against the others). See the guide's
    /// [Redlock page](crate::guide::redlock) for what it promises and what it does not.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), distlock::StoreError> {
    /// let client = distlock::Client::connect_quorum([
    ///     "redis://10.0.1.1:6379/",
    ///     "redis://10.0.2.1:6379/",
    ///     "redis://10.0.3.1:6379/",
    /// ])
    /// .await?;
    /// # let _ = client; Ok(()) }
    /// ```
    pub async fn connect_quorum<I, S>(nodes: I) -> Result<Self, StoreError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder().connect_quorum(nodes).await
    }

    /// A client over an in-memory store with the same semantics as Redis, for tests and local
    /// development. Locks are shared by clones of this client only.
    #[must_use]
    pub fn in_memory() -> Self {
        Self::builder().in_memory()
    }

    /// A client with non-default settings.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// Starts building a lock on `name`. Any UTF-8 text up to
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes is a valid name.
    pub fn lock(&self, name: impl Into<String>) -> LockBuilder {
        LockBuilder::new(self.locks().clone(), name.into())
    }

    /// Starts taking permits of the semaphore `name`, which lets at most `permits` leases
    /// hold at once across every client of the store (1 to
    /// [`MAX_PERMITS`](crate::MAX_PERMITS)). Each grant is a [`Lease`](crate::Lease) on its
    /// permits, with a ttl, the watchdog, the lost signal and a fence, like a lock's; a
    /// holder that dies gives its permits back within its ttl. Not on a Redlock quorum (but on
    /// a quorum client's [`counting_on`](ClientBuilder::counting_on) store).
    ///
    /// The limit is the caller's: clients that pass different numbers for one name each
    /// grant up to their own. Lowering it takes nothing from the holders; new grants wait
    /// until enough have gone.
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> SemaphoreBuilder {
        SemaphoreBuilder::new(self.counting().locks().clone(), name.into(), permits)
    }

    /// Starts taking the read-write lock `name`: many readers at once, or one writer, each
    /// hold a [`Lease`](crate::Lease). A waiting writer keeps new readers out, so readers
    /// cannot starve it. Independent of [`lock`](Self::lock) on the same name. Not on a
    /// Redlock quorum (but on a quorum client's [`counting_on`](ClientBuilder::counting_on)
    /// store).
    pub fn rw_lock(&self, name: impl Into<String>) -> RwLockBuilder {
        RwLockBuilder::new(self.counting().locks().clone(), name.into())
    }

    /// Starts taking the locks `names` all or nothing (the same locks as
    /// [`lock`](Self::lock) takes one by one).
    pub fn multi_lock<I, S>(&self, names: I) -> MultiLockBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        MultiLockBuilder::new(
            self.locks().clone(),
            names.into_iter().map(Into::into).collect(),
        )
    }

    /// Starts building the leader election `name` (the lock of the same name underneath);
    /// see the guide's [leader election](crate::guide::coordination#leader-election).
    pub fn election(&self, name: impl Into<String>) -> crate::ElectionBuilder {
        crate::ElectionBuilder::new(self.locks().clone(), name.into())
    }

    /// Starts a scheduled job's run under the lock `name` (the same lock as
    /// [`lock`](Self::lock)): at most one replica runs it, and with `at_least` at most once
    /// in that long.
    pub fn job(&self, name: impl Into<String>) -> JobBuilder {
        JobBuilder::new(self.locks().clone(), name.into())
    }

    /// Starts a rate limiter enforcing one policy; [`build`](RateLimiterBuilder::build) it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::ratelimit::{Policy, Rate};
    ///
    /// let client = distlock::Client::in_memory();
    /// let limiter = client
    ///     .rate_limiter(Policy::gcra("api", Rate::per_second(100)?.burst(20)?)?)
    ///     .build()?;
    /// assert!(limiter.check("user:7").await?.allowed);
    /// # Ok(()) }
    /// ```
    pub fn rate_limiter(&self, policy: Policy) -> RateLimiterBuilder {
        RateLimiterBuilder::new(self.core().clone(), vec![policy])
    }

    /// Starts a rate limiter enforcing several policies on each subject, all or nothing: a
    /// request passes only if every policy allows it, and then it consumes from every one.
    /// [`build`](RateLimiterBuilder::build) refuses none, more than
    /// [`MAX_POLICIES`](crate::ratelimit::MAX_POLICIES), or two with the same name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::ratelimit::{Policy, Rate};
    ///
    /// let client = distlock::Client::in_memory();
    /// let limiter = client
    ///     .rate_limiter_all([
    ///         Policy::gcra("per-second", Rate::per_second(10)?)?,
    ///         Policy::fixed_window("per-day", Rate::per_day(2)?)?,
    ///     ])
    ///     .build()?;
    /// assert!(limiter.check("user:7").await?.allowed);
    /// assert!(limiter.check("user:7").await?.allowed);
    /// let third = limiter.check("user:7").await?;
    /// assert!(!third.allowed);
    /// assert_eq!(&*third.policy, "per-day"); // the per-second policy was not consumed
    /// assert_eq!(third.policies[0].remaining, 8);
    /// # Ok(()) }
    /// ```
    pub fn rate_limiter_all(
        &self,
        policies: impl IntoIterator<Item = Policy>,
    ) -> RateLimiterBuilder {
        RateLimiterBuilder::new(self.core().clone(), policies.into_iter().collect())
    }

    /// Starts a rate limiter of several policies on each subject where *any* of them may let
    /// a request through: the policies decide in the order given, and the first that allows
    /// the request is charged, alone, in one atomic round trip. A steady rate backed by a
    /// separate burst budget for spikes is the usual pair (rate-limiter-flexible's
    /// `BurstyRateLimiter`). [`build`](RateLimiterBuilder::build) refuses what it refuses for
    /// [`rate_limiter_all`](Self::rate_limiter_all).
    ///
    /// The [`Decision`](crate::ratelimit::Decision) is allowed when one policy allowed; its
    /// binding policy is the one charged ([`PolicyDecision::charged`](crate::ratelimit::PolicyDecision::charged)),
    /// or, in a denial, the one that would allow soonest, whose wait is `retry_after`. A
    /// denial charges nothing; a policy's [lockout](crate::ratelimit::Lockout) is breached
    /// only by a request that every policy denied.
    ///
    /// Operations: [`check`](crate::ratelimit::RateLimiter::check),
    /// [`check_n`](crate::ratelimit::RateLimiter::check_n) and
    /// [`peek`](crate::ratelimit::RateLimiter::peek) as above (a cost must fit every policy's
    /// limit, as for all-or-nothing); [`reset`](crate::ratelimit::RateLimiter::reset) clears
    /// every policy; [`reserve`](crate::ratelimit::RateLimiter::reserve) is a check (there is
    /// no turn to queue for) and [`acquire`](crate::ratelimit::RateLimiter::acquire) sleeps
    /// until the soonest policy allows and checks again. [`refund`](crate::ratelimit::RateLimiter::refund),
    /// [`penalize`](crate::ratelimit::RateLimiter::penalize) and
    /// [`check_up_to`](crate::ratelimit::RateLimiter::check_up_to) fail with
    /// [`RateLimitError::NotForAnyOf`](crate::RateLimitError::NotForAnyOf): they would have to
    /// pick a policy; refund through a one-policy limiter of the policy that was charged.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::ratelimit::{Policy, Rate};
    ///
    /// let client = distlock::Client::in_memory();
    /// let limiter = client
    ///     .rate_limiter_any([
    ///         Policy::gcra("steady", Rate::per_second(2)?.burst(1)?)?,
    ///         Policy::fixed_window("burst", Rate::per_hour(3)?)?,
    ///     ])
    ///     .build()?;
    /// let charged = |d: &distlock::ratelimit::Decision| d.policy.to_string();
    /// assert_eq!(charged(&limiter.check("user:7").await?), "steady");
    /// // The steady rate is spent for half a second: the burst budget takes the next three.
    /// for _ in 0..3 {
    ///     let d = limiter.check("user:7").await?;
    ///     assert!(d.allowed && d.policies[1].charged && !d.policies[0].charged);
    /// }
    /// let fifth = limiter.check("user:7").await?;
    /// assert!(!fifth.allowed);
    /// assert_eq!(&*fifth.policy, "steady"); // the sooner of the two
    /// assert!(fifth.retry_after <= std::time::Duration::from_millis(500));
    /// # Ok(()) }
    /// ```
    pub fn rate_limiter_any(
        &self,
        policies: impl IntoIterator<Item = Policy>,
    ) -> RateLimiterBuilder {
        RateLimiterBuilder::new(self.core().clone(), policies.into_iter().collect()).any_of()
    }

    /// A Bloom filter named `name` (any UTF-8 up to 512 bytes, like a lock name), to
    /// configure and [`open`](BloomBuilder::open). See [`bloom`](crate::bloom).
    pub fn bloom_filter(&self, name: impl Into<String>) -> BloomBuilder {
        BloomBuilder::new(self.counting().core().clone(), name.into())
    }

    /// The fenced resource `resource` (any UTF-8 up to [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)
    /// bytes): values written under a lease's fence, refusing a write whose fence is lower
    /// than one already accepted. Give it the name of the lock that guards it. See
    /// [`fenced`](crate::fenced).
    ///
    /// # Errors
    /// [`FencedError::UnsupportedStore`] on a Redlock quorum client;
    /// [`FencedError::InvalidName`] for an empty or over-long name.
    pub fn fenced(&self, resource: impl Into<String>) -> Result<FencedResource, FencedError> {
        FencedResource::new(self.core().clone(), resource.into())
    }

    /// The idempotency keys of `namespace` (1 to 64 characters of `[A-Za-z0-9._-]`): run a
    /// key's first request once and give its stored outcome to the duplicates. See
    /// [`idempotency`](crate::idempotency).
    ///
    /// # Errors
    /// [`IdempotencyError::UnsupportedStore`] when locks go to a Redlock quorum;
    /// [`IdempotencyError::InvalidInput`] for a bad namespace.
    pub fn idempotency(
        &self,
        namespace: impl Into<String>,
    ) -> Result<Idempotency, IdempotencyError> {
        Idempotency::new(self.clone(), namespace.into())
    }

    /// The kind of store locks go to: [`StoreKind::Redis`] (a single primary),
    /// [`Cluster`](StoreKind::Cluster), [`Quorum`](StoreKind::Quorum) (Redlock) or
    /// [`Memory`](StoreKind::Memory) (see [`ClientBuilder::counting_on`] for a client that
    /// counts elsewhere). It compares equal to its name: `client.store_kind() == "quorum"`.
    #[must_use]
    pub fn store_kind(&self) -> StoreKind {
        self.store().kind()
    }

    /// The client counting primitives are built on: the one given to
    /// [`ClientBuilder::counting_on`], or this one.
    pub(crate) fn counting(&self) -> &Client {
        self.inner.counting.as_ref().unwrap_or(self)
    }

    /// The holder identity this client's leases carry (see [`ClientBuilder::identity`]).
    pub fn identity(&self) -> &str {
        self.core().identity()
    }

    /// The key prefix.
    #[must_use]
    pub fn prefix(&self) -> &str {
        self.core().prefix()
    }

    /// Whether this client's store can serve `capability`, and if not, why (with what to
    /// use instead). Every primitive that needs one asks when it is built, so a client whose
    /// store cannot serve it fails there, once, not on every request.
    ///
    /// ```
    /// use distlock::Capability;
    ///
    /// let client = distlock::Client::in_memory();
    /// assert!(client.supports(Capability::HolderSets).is_ok());
    /// ```
    ///
    /// # Errors
    /// [`Unsupported`](crate::Unsupported): the store, the capability, and the reason.
    pub fn supports(&self, capability: Capability) -> Result<(), Unsupported> {
        self.store().supports(capability)
    }

    /// The store, its prefix and its keys, as the floors below the client take them.
    pub(crate) fn core(&self) -> &Core {
        self.inner.locks.core()
    }

    /// The lock machinery: the core, the watchdog and the hand-off registry.
    pub(crate) fn locks(&self) -> &LockContext {
        &self.inner.locks
    }

    pub(crate) fn store(&self) -> &Store {
        self.core().store()
    }
}

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

static DEFAULT_CLIENT: RwLock<Option<Client>> = RwLock::new(None);

/// Installs the process-wide client used by `#[distributed_lock]` and `#[rate_limit]` when
/// they have no `client = ...` argument. Call it once at start-up; a later call replaces it.
///
/// A client that cannot count (a Redlock quorum built without
/// [`counting_on`](ClientBuilder::counting_on)) serves `#[distributed_lock]`, but every
/// `#[rate_limit]` call through it would fail: this says so here, at start-up, once, at
/// `warn`, with the fix. (A `#[rate_limit]` function is not known to the library before its
/// first call, so the start-up cannot refuse the client for it.)
pub fn set_default_client(client: Client) {
    if let Err(refused) = client.supports(Capability::RateLimits) {
        tracing::warn!(
            store = refused.store,
            "the default client cannot count, so every #[rate_limit] call through it will fail \
             (#[distributed_lock] works): {}",
            refused.reason
        );
    }
    *DEFAULT_CLIENT
        .write()
        .unwrap_or_else(PoisonError::into_inner) = Some(client);
}

/// The client installed with [`set_default_client`], if any.
#[must_use]
pub fn default_client() -> Option<Client> {
    DEFAULT_CLIENT
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}
