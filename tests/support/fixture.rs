//! One fixture for both stores: a client (and, for Redis, the server it talks to), more
//! clients on the same store, store-level views of a lock, and `on_both_stores!`, which turns
//! one test body into a `redis` and a `memory` test.

use std::time::Duration;

use distlock::Client;

use super::RedisServer;

pub struct Fixture {
    pub client: Client,
    pub server: Option<RedisServer>,
}

impl Fixture {
    pub async fn redis() -> Self {
        let server = RedisServer::start();
        let client = connect(&server.url()).await;
        Self {
            client,
            server: Some(server),
        }
    }

    pub fn memory() -> Self {
        Self {
            client: Client::in_memory(),
            server: None,
        }
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

/// A client of the test server with a roomy response timeout.
pub async fn connect(url: &str) -> Client {
    Client::builder()
        .response_timeout(Duration::from_secs(2))
        .connect(url)
        .await
        .expect("connect to the test redis-server")
}

/// Generates, for each named `async fn body(fx: Fixture)`, a module with a `redis` and a
/// `memory` test that run it on each store.
macro_rules! on_both_stores {
    ($($body:ident),* $(,)?) => {$(
        mod $body {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$body($crate::support::fixture::Fixture::redis().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                super::$body($crate::support::fixture::Fixture::memory()).await;
            }
        }
    )*};
}
pub(crate) use on_both_stores;
