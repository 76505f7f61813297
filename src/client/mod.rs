//! The client: one store (Redis or memory), its key prefix, and the per-client machinery shared
//! by every lock it hands out (the watchdog and the wake-up registry).

use std::sync::{Arc, PoisonError, RwLock};

use crate::bloom::BloomBuilder;
use crate::core::{Core, HybridRegistry};
use crate::error::StoreError;
use crate::fenced::{FencedError, FencedResource};
use crate::lock::LockBuilder;
use crate::lock::context::LockContext;
use crate::lock::hierarchy::HierarchyLockBuilder;
use crate::lock::job::JobBuilder;
use crate::lock::multi::MultiLockBuilder;
use crate::lock::rwlock::RwLockBuilder;
use crate::lock::semaphore::SemaphoreBuilder;
use crate::ratelimit::{Policy, RateLimiterBuilder};
use crate::store::{Capability, Store, StoreKind, Unsupported};

pub(crate) mod builder;

pub use builder::ClientBuilder;

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

    /// Starts taking the hierarchical lock `path` (`/`-separated levels, e.g. `db/orders/42`):
    /// a mode (IS, IX, S, X) on its last level and the intention mode on every level above,
    /// all at once, as a [`Lease`](crate::Lease). Many holders of rows run together while one
    /// holder of the table in X excludes them all; a waiter keeps new incompatible holders
    /// out, so it is not starved. The root level is the hash tag: on a Redis Cluster a whole
    /// hierarchy lives on one node. Not on a Redlock quorum (but on a quorum client's
    /// [`counting_on`](ClientBuilder::counting_on) store).
    pub fn hierarchy_lock(&self, path: impl Into<String>) -> HierarchyLockBuilder {
        HierarchyLockBuilder::new(self.counting().locks().clone(), path.into())
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
    pub fn election(&self, name: impl Into<String>) -> crate::election::ElectionBuilder {
        crate::election::ElectionBuilder::new(self.locks().clone(), name.into())
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
