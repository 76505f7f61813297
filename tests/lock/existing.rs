//! Clients made from what the application already has (issue 18 §3): a `redis::Client`
//! (its settings used for both of distlock's connections, wake-ups included), a
//! `ConnectionInfo`, and a `ConnectionManager` (shared; waiters poll).

use std::time::Duration;

use distlock::Client;
use tokio::time::Instant;

use crate::support::RedisServer;

/// Keys in database `db` of `server`.
async fn keys_in(server: &RedisServer, db: i64) -> Vec<String> {
    let mut conn = server.conn().await;
    let () = redis::cmd("SELECT")
        .arg(db)
        .query_async(&mut conn)
        .await
        .expect("SELECT");
    redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .expect("KEYS")
}

/// Holds `name` from `holder` for `hold`, while `waiter` waits for it; returns how long after
/// the release the waiter had it.
async fn handed_over_after(
    holder: &Client,
    waiter: &Client,
    name: &str,
    hold: Duration,
) -> Duration {
    let lease = holder
        .lock(name)
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .expect("holder acquires");
    let waiter = waiter.clone();
    let name = name.to_owned();
    let waiting = tokio::spawn(async move {
        let lease = waiter
            .lock(name)
            .wait(Duration::from_secs(8))
            .acquire()
            .await
            .expect("the waiter gets the lock");
        let at = Instant::now();
        lease.release().await.expect("release");
        at
    });
    tokio::time::sleep(hold).await;
    let released = Instant::now();
    lease.release().await.expect("release");
    waiting.await.expect("waiter task") - released
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_client_of_the_application_is_used_for_commands_and_wake_ups() {
    let server = RedisServer::start();
    // Database 3: a setting that must reach both of distlock's connections.
    let redis = redis::Client::open(format!("{}3", server.url())).expect("redis client");
    let holder = Client::builder()
        .connect_redis_client(redis.clone())
        .await
        .expect("connect_redis_client");
    let waiter = Client::builder()
        .connect_redis_client(redis)
        .await
        .expect("connect_redis_client");
    let after = handed_over_after(
        &holder,
        &waiter,
        "existing:client",
        Duration::from_millis(300),
    )
    .await;
    // Woken by the release (a missed wake-up would sleep for the holder's 10 s ttl).
    assert!(
        after < Duration::from_millis(500),
        "the waiter got the lock {after:?} after the release"
    );
    let lease = holder
        .lock("existing:client")
        .acquire()
        .await
        .expect("acquire");
    assert!(
        keys_in(&server, 3)
            .await
            .iter()
            .any(|k| k.contains("existing:client")),
        "the lock key is not in database 3"
    );
    assert!(keys_in(&server, 0).await.is_empty(), "keys in database 0");
    lease.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_info_is_used_as_given() {
    let server = RedisServer::start();
    let info = redis::IntoConnectionInfo::into_connection_info(server.url().as_str())
        .expect("connection info");
    let settings = info.redis_settings().clone().set_db(2);
    let info = info.set_redis_settings(settings);
    let client = Client::builder()
        .connect_info(info)
        .await
        .expect("connect_info");
    let lease = client
        .lock("existing:info")
        .acquire()
        .await
        .expect("acquire");
    assert!(
        keys_in(&server, 2)
            .await
            .iter()
            .any(|k| k.contains("existing:info")),
        "the lock key is not in database 2"
    );
    lease.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_manager_of_the_application_is_shared_and_waiters_poll() {
    let server = RedisServer::start();
    let redis = redis::Client::open(server.url()).expect("redis client");
    let manager = redis::aio::ConnectionManager::new(redis.clone())
        .await
        .expect("manager");
    let holder = Client::builder()
        .connect_manager(manager.clone())
        .await
        .expect("connect_manager");
    let waiter = Client::builder()
        .connect_manager(
            redis::aio::ConnectionManager::new(redis)
                .await
                .expect("manager"),
        )
        .await
        .expect("connect_manager");
    // No pub/sub: the waiter polls, each sleep at most 500 ms (+ jitter), never the ttl.
    let after = handed_over_after(
        &holder,
        &waiter,
        "existing:manager",
        Duration::from_millis(300),
    )
    .await;
    assert!(
        after < Duration::from_millis(1500),
        "the polling waiter got the lock {after:?} after the release"
    );
    // The application's own manager still works alongside.
    let mut mine = manager;
    let () = redis::cmd("SET")
        .arg("app:key")
        .arg("v")
        .query_async(&mut mine)
        .await
        .expect("the application's own command");
}

/// A manager connected to a server distlock refuses is refused like a URL would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_manager_to_a_cluster_node_is_refused() {
    let server = RedisServer::builder()
        .config("cluster-enabled", &["yes"])
        .start();
    let manager =
        redis::aio::ConnectionManager::new(redis::Client::open(server.url()).expect("client"))
            .await
            .expect("manager");
    match Client::builder().connect_manager(manager).await {
        Err(distlock::StoreError::Config { message }) => {
            assert!(message.contains("connect_cluster"), "{message}");
        }
        other => panic!("expected Config, got {:?}", other.map(|_| ())),
    }
}
