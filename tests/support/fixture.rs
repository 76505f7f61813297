//! One fixture for both stores: a client (and, for Redis, the server it talks to), more
//! clients on the same store, store-level views of a lock, and `on_both_stores!`, which turns
//! one test body into a `redis` and a `memory` test.
//!
//! Timing: on Redis (and in plain `memory` tests) time is real, and a busy machine can run a
//! timer, a task or the server late by far more than any drift allowance; only bounds the
//! library promises whatever the scheduling hold there. `on_both_stores!(paused_memory: ...)`
//! runs the `memory` test on tokio's paused clock instead: time moves only when every task
//! waits on a timer, so the library's timers fire exactly on time and a body can assert its
//! exact bounds when [`Fixture::paused`] says so.

use std::time::Duration;

use distlock::Client;

use super::RedisServer;
use super::cluster::RedisCluster;

pub struct Fixture {
    pub client: Client,
    pub server: Option<RedisServer>,
    /// The test runs on tokio's paused clock (memory only).
    paused: bool,
}

impl Fixture {
    pub async fn redis() -> Self {
        let server = RedisServer::start();
        let client = connect(&server.url()).await;
        Self {
            client,
            server: Some(server),
            paused: false,
        }
    }

    /// A fixture for `server` whose client is `client` (made with other settings than
    /// [`connect`]'s).
    pub fn with_client(client: Client, server: RedisServer) -> Self {
        Self {
            client,
            server: Some(server),
            paused: false,
        }
    }

    /// A fixture for a client of a store the test set up itself (a Cluster, say): no
    /// server of its own.
    pub fn on_client(client: Client) -> Self {
        Self {
            client,
            server: None,
            paused: false,
        }
    }

    /// A fixture on the process's shared Cluster ([`RedisCluster::shared`]), its keys under
    /// `prefix` so that tests sharing the Cluster never meet.
    pub async fn on_shared_cluster(prefix: &str) -> Self {
        Self::on_client(shared_cluster_client(prefix).await)
    }

    pub fn memory() -> Self {
        Self {
            client: Client::in_memory(),
            server: None,
            paused: false,
        }
    }

    /// The memory store, in a test whose runtime was started with tokio's clock paused.
    pub fn memory_on_paused_clock() -> Self {
        Self {
            paused: true,
            ..Self::memory()
        }
    }

    /// Whether time is tokio's paused clock: nothing runs late, so a timer of the library
    /// fires exactly when it is due and exact bounds can be asserted. On the real clock only
    /// what the library promises whatever the scheduling can be.
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// Another client on the same store: a new connection for Redis; for memory, a clone (an
    /// in-memory store is shared by clones only).
    pub async fn another_client(&self) -> Client {
        match &self.server {
            Some(server) => connect(&server.url()).await,
            None => self.client.clone(),
        }
    }

    /// The server log, for assertion messages (empty for memory).
    pub fn log(&self) -> String {
        self.server
            .as_ref()
            .map(RedisServer::log)
            .unwrap_or_default()
    }

    /// The key that holds lock `name`.
    pub fn lock_key(&self, name: &str) -> String {
        self.client
            .__inspect()
            .lock_key(name)
            .expect("valid lock name")
    }

    /// When `key` expires, as far as one PTTL read can tell (see [`Expiry`]).
    pub async fn expiry(&self, key: &str) -> Expiry {
        let sent = tokio::time::Instant::now();
        let pttl = self.client.__inspect().pttl(key).await.expect("PTTL");
        Expiry {
            pttl,
            sent,
            answered: tokio::time::Instant::now(),
        }
    }

    /// Waits (bounded) until at least `clients` clients listen on the prefix's revocation
    /// channel, where operators' forces are announced (Redis; in memory it is delivered
    /// without a subscription). A force announced before a holder listens reaches it only at
    /// its next renewal.
    pub async fn until_listening_for_forces(&self, clients: u64) {
        let Some(server) = &self.server else {
            return;
        };
        let mut conn = server.conn().await;
        let channel = format!("{}:revoked", self.client.prefix());
        super::server::until_subscribed(&mut conn, &channel, clients, "clients").await;
    }

    /// Whether the store holds lock `name` for anyone right now.
    pub async fn is_held(&self, name: &str) -> bool {
        self.client
            .__inspect()
            .get(&self.lock_key(name))
            .await
            .expect("store answers")
            .is_some()
    }

    /// Whether lock `name` is free in the store.
    pub async fn is_free(&self, name: &str) -> bool {
        !self.is_held(name).await
    }

    /// Waits (bounded) until lock `name` is free in the store; `false` if it stayed held.
    pub async fn wait_free(&self, name: &str, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            if self.is_free(name).await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }
}

/// One PTTL read of a key: the server read its clock at some instant between the request's
/// send and its answer, in whole milliseconds (and expires a key 1 ms after its last
/// millisecond). So the key expires between `sent + pttl - 1 ms` and `answered + pttl + 1 ms`:
/// a busy machine widens that window, never moves it the wrong way, so bounds checked
/// against its edges hold whatever the scheduling. (On tokio's paused clock, the memory
/// store's `pttl` is exact to the nanosecond and no time passes between send and answer.)
#[derive(Debug, Clone, Copy)]
pub struct Expiry {
    /// `None`: no such key.
    pub pttl: Option<Duration>,
    pub sent: tokio::time::Instant,
    pub answered: tokio::time::Instant,
}

impl Expiry {
    const MS: Duration = Duration::from_millis(1);

    /// The earliest the key can expire; `None` if there was no key.
    pub fn earliest(&self) -> Option<tokio::time::Instant> {
        self.pttl.map(|pttl| {
            (self.sent + pttl)
                .checked_sub(Self::MS)
                .unwrap_or(self.sent)
        })
    }

    /// The latest the key can expire; `None` if there was no key.
    pub fn latest(&self) -> Option<tokio::time::Instant> {
        self.pttl.map(|pttl| self.answered + pttl + Self::MS)
    }

    /// Whether the key was there.
    pub fn exists(&self) -> bool {
        self.pttl.is_some()
    }
}

/// How long a test client waits for the test server's answer. Tests about a timeout use
/// clients of their own; for the rest an answer is only late, never missing, and a loaded
/// 2-core machine (load 18 beside the under-load script's hogs) kept one from a release for
/// over 2 s: `Store(Timeout)`, rightly, failing a test about something else.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(15);

/// A client of the test server with a roomy response timeout.
pub async fn connect(url: &str) -> Client {
    connect_with_timeout(url, RESPONSE_TIMEOUT).await
}

/// A client of the test server that gives up on a command after `timeout` (for tests of a
/// store that stops answering).
pub async fn connect_with_timeout(url: &str, timeout: Duration) -> Client {
    Client::builder()
        .response_timeout(timeout)
        .connect(url)
        .await
        .expect("connect to the test redis-server")
}

/// Generates, for each named `async fn body(fx: Fixture)`, a module with a `redis` and a
/// `memory` test that run it on each store. With `paused_memory:` first, the `memory` test
/// runs on a current-thread runtime with tokio's clock paused ([`Fixture::paused`]).
/// A client of the process's shared Cluster ([`RedisCluster::shared`]) under `prefix`, with
/// a patient response timeout; a failure to connect shows the nodes' logs.
pub async fn shared_cluster_client(prefix: &str) -> Client {
    let cluster = RedisCluster::shared();
    Client::builder()
        .prefix(prefix)
        .response_timeout(Duration::from_secs(15))
        .connect_cluster(cluster.seed_urls())
        .await
        .unwrap_or_else(|e| panic!("connect_cluster: {e}\n{}", cluster.logs()))
}

/// Runs each test body on a single Redis primary and in memory, as `mod <body> { redis,
/// memory }`. `paused_memory:` runs the memory one on a paused clock; `on_a_cluster_too:` adds
/// `on_a_cluster`, the same body on the process's shared Cluster (the version matrix skips it
/// below Redis 7, by that name).
macro_rules! on_both_stores {
    (@redis $body:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn redis() {
            super::$body($crate::support::fixture::Fixture::redis().await).await;
        }
    };
    (on_a_cluster_too: $($body:ident),* $(,)?) => {$(
        mod $body {
            $crate::support::fixture::on_both_stores!(@redis $body);

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                super::$body($crate::support::fixture::Fixture::memory()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_a_cluster() {
                let prefix = stringify!($body);
                super::$body($crate::support::fixture::Fixture::on_shared_cluster(prefix).await)
                    .await;
            }
        }
    )*};
    (paused_memory: $($body:ident),* $(,)?) => {$(
        mod $body {
            $crate::support::fixture::on_both_stores!(@redis $body);

            #[tokio::test(start_paused = true)]
            async fn memory() {
                super::$body($crate::support::fixture::Fixture::memory_on_paused_clock()).await;
            }
        }
    )*};
    ($($body:ident),* $(,)?) => {$(
        mod $body {
            $crate::support::fixture::on_both_stores!(@redis $body);

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                super::$body($crate::support::fixture::Fixture::memory()).await;
            }
        }
    )*};
}
pub(crate) use on_both_stores;
