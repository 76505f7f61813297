//! A store to run the locked functions on: a fresh `redis-server` with a client, or an
//! in-memory client.

use std::time::Duration;

use distlock::Client;

use crate::support::RedisServer;

pub struct Store {
    pub client: Client,
    pub server: Option<RedisServer>,
}

impl Store {
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

    /// Another client of the same store: its own connection on Redis; on memory a clone, since
    /// an in-memory store is shared by clones only.
    pub async fn another_client(&self) -> Client {
        match &self.server {
            Some(server) => connect(&server.url()).await,
            None => self.client.clone(),
        }
    }

    /// The name of the key that holds lock `name`.
    pub fn lock_key(&self, name: &str) -> String {
        self.client.__inspect().lock_key(name).expect("lock key")
    }

    /// Whether lock `name` is held by anyone right now.
    pub async fn is_held(&self, name: &str) -> bool {
        self.client
            .__inspect()
            .get(&self.lock_key(name))
            .await
            .expect("get")
            .is_some()
    }

    /// The server log for assertion messages (empty on memory).
    pub fn log(&self) -> String {
        self.server
            .as_ref()
            .map(RedisServer::log)
            .unwrap_or_default()
    }
}

pub async fn connect(url: &str) -> Client {
    Client::builder()
        .response_timeout(Duration::from_secs(2))
        .connect(url)
        .await
        .expect("connect to the test redis-server")
}

/// For each `async fn name(store: Store)`, a module `name` with a `redis` and a `memory` test.
macro_rules! on_both_stores {
    ($($case:ident),* $(,)?) => {$(
        mod $case {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$case($crate::fixture::Store::redis().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                super::$case($crate::fixture::Store::memory()).await;
            }
        }
    )*};
}
pub(crate) use on_both_stores;
