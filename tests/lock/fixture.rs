//! One fixture for both stores: a client (and, for Redis, the server it talks to), and a way
//! to make more clients on the same store.

use std::time::Duration;

use distlock::Client;

use crate::support::RedisServer;

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
}

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
                super::$body($crate::fixture::Fixture::redis().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                super::$body($crate::fixture::Fixture::memory()).await;
            }
        }
    )*};
}
pub(crate) use on_both_stores;
