//! One fixture for the three stores a fenced resource lives on (memory, a single primary, a
//! Cluster), and `on_every_store!`, which turns one test body into a test on each.

use std::time::Duration;

use distlock::Client;
use redis::aio::MultiplexedConnection;

use crate::support::cluster::RedisCluster;
use crate::support::server::RedisServer;

pub enum Backing {
    Memory,
    Redis(RedisServer),
    /// The binary's shared cluster: resource names must be unique per test.
    Cluster(&'static RedisCluster),
}

pub struct Store {
    pub client: Client,
    pub backing: Backing,
}

impl Store {
    pub fn memory() -> Self {
        Self {
            client: Client::in_memory(),
            backing: Backing::Memory,
        }
    }

    pub async fn redis() -> Self {
        let server = RedisServer::start();
        let client = connect(&server.url()).await;
        Self {
            client,
            backing: Backing::Redis(server),
        }
    }

    pub async fn cluster() -> Self {
        let cluster = RedisCluster::shared();
        let client = connect_cluster(cluster).await;
        Self {
            client,
            backing: Backing::Cluster(cluster),
        }
    }

    /// Another client of the same store (a clone in memory, where a store is per client).
    pub async fn another_client(&self) -> Client {
        match &self.backing {
            Backing::Memory => self.client.clone(),
            Backing::Redis(server) => connect(&server.url()).await,
            Backing::Cluster(cluster) => connect_cluster(cluster).await,
        }
    }

    /// A plain connection to the server holding `key` (`None` in memory).
    pub async fn raw(&self, key: &str) -> Option<MultiplexedConnection> {
        match &self.backing {
            Backing::Memory => None,
            Backing::Redis(server) => Some(server.conn().await),
            Backing::Cluster(cluster) => Some(cluster.master_of_key(key).await.conn().await),
        }
    }

    /// The servers' logs, for failure messages.
    pub fn log(&self) -> String {
        match &self.backing {
            Backing::Memory => String::new(),
            Backing::Redis(server) => server.log(),
            Backing::Cluster(_) => "(the shared cluster's logs are in its temp dir)".to_owned(),
        }
    }
}

pub async fn connect(url: &str) -> Client {
    Client::builder()
        .response_timeout(Duration::from_secs(3))
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

pub async fn connect_cluster(cluster: &RedisCluster) -> Client {
    match Client::builder()
        .response_timeout(Duration::from_secs(3))
        .connect_cluster(cluster.seed_urls())
        .await
    {
        Ok(client) => client,
        Err(e) => panic!("connect to the cluster: {e}\n{}", cluster.describe().await),
    }
}

/// For each `async fn body(store: Store, name: &str)`, a module with a `memory`, a `redis`
/// and a `cluster` test; `name` is unique per test (the cluster is shared).
macro_rules! on_every_store {
    ($($body:ident),* $(,)?) => {$(
        mod $body {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                super::$body($crate::stores::Store::memory(), concat!(stringify!($body), ":m")).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$body($crate::stores::Store::redis().await, concat!(stringify!($body), ":r")).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn cluster() {
                super::$body($crate::stores::Store::cluster().await, concat!(stringify!($body), ":c")).await;
            }
        }
    )*};
}
pub(crate) use on_every_store;
