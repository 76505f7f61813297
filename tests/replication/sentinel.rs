//! The Sentinel topology (tests/support/sentinel.rs): it forms, a killed primary is replaced
//! (timed), a forced failover swaps the roles, a restarted old primary rejoins as a replica,
//! a frozen replica makes `WAIT` time out, and redis-rs's own sentinel client finds the
//! promoted replica.

use std::time::{Duration, Instant};

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelServerType};

use crate::support::sentinel::{NodeRole, SentinelSetup};

async fn set(conn: &mut MultiplexedConnection, key: &str, value: &str) {
    let () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(conn)
        .await
        .unwrap_or_else(|e| panic!("SET {key}: {e}"));
}

async fn get(conn: &mut MultiplexedConnection, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap_or_else(|e| panic!("GET {key}: {e}"))
}

/// `WAIT replicas timeout_ms` on `conn`: how many replicas acknowledged.
async fn wait(conn: &mut MultiplexedConnection, replicas: u32, timeout_ms: u64) -> u32 {
    redis::cmd("WAIT")
        .arg(replicas)
        .arg(timeout_ms)
        .query_async(conn)
        .await
        .expect("WAIT")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_topology_forms_and_a_killed_primary_is_replaced() {
    let setup = SentinelSetup::start();
    eprintln!("sentinel setup started in {:?}", setup.startup_time());
    let [first, second] = setup.nodes() else {
        panic!("two data nodes")
    };
    assert_eq!(setup.primary_addr().await, first.addr());
    for (sentinel, addr) in setup.primary_addrs().await {
        assert_eq!(addr, Ok(first.addr()), "sentinel {sentinel}");
    }
    assert_eq!(
        second.role().await,
        NodeRole::Replica {
            primary_port: first.port(),
            state: "connected".into()
        }
    );
    assert!(matches!(
        setup.sentinels()[0].role().await,
        NodeRole::Sentinel
    ));
    for url in setup.sentinel_urls() {
        assert!(
            url.starts_with("redis://127.0.0.1:") && url.ends_with('/'),
            "{url}"
        );
    }

    let mut conn = first.conn().await;
    for i in 0..100 {
        set(&mut conn, &format!("k{i}"), &i.to_string()).await;
    }
    setup.wait_replication_synced().await;

    let promotion = setup.kill_primary().await;
    eprintln!(
        "SIGKILL of the primary (down-after 1 s): replica promoted after {:?}, named by every \
         sentinel after {:?}, settled after {:?}",
        promotion.promoted_after, promotion.announced_after, promotion.settled_after
    );
    assert!(std::ptr::eq(promotion.old_primary, first));
    assert!(std::ptr::eq(promotion.new_primary, second));
    assert!(!first.is_running());
    assert_eq!(setup.primary_addr().await, second.addr());
    assert_eq!(second.role().await, NodeRole::Primary);
    let mut conn = second.conn().await;
    for i in 0..100 {
        assert_eq!(get(&mut conn, &format!("k{i}")).await, Some(i.to_string()));
    }

    // The old primary comes back empty, as a primary; the sentinels make it a replica.
    let took = setup.restart_node(first).await;
    eprintln!("restarted old primary: a replica of the new one after {took:?}");
    assert_eq!(
        first.role().await,
        NodeRole::Replica {
            primary_port: second.port(),
            state: "connected".into()
        }
    );
    let mut conn = first.conn().await;
    assert_eq!(get(&mut conn, "k7").await.as_deref(), Some("7"), "resynced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_swaps_the_roles_and_back() {
    let setup = SentinelSetup::start();
    let [first, second] = setup.nodes() else {
        panic!("two data nodes")
    };
    let mut conn = first.conn().await;
    set(&mut conn, "before", "1").await;

    let promotion = setup.failover().await;
    eprintln!(
        "SENTINEL FAILOVER: promoted after {:?}, named after {:?}, settled after {:?}",
        promotion.promoted_after, promotion.announced_after, promotion.settled_after
    );
    assert!(std::ptr::eq(promotion.new_primary, second));
    assert_eq!(
        first.role().await,
        NodeRole::Replica {
            primary_port: second.port(),
            state: "connected".into()
        }
    );
    // The sentinels closed the old primary's client connections when they reconfigured it
    // (`CLIENT KILL TYPE normal`); a new connection to it gets READONLY on writes.
    let err = redis::cmd("SET")
        .arg("after")
        .arg("1")
        .query_async::<()>(&mut conn)
        .await
        .expect_err("the old connection to the demoted primary");
    eprintln!(
        "old connection to the demoted primary: {:?}: {err}",
        err.kind()
    );
    assert!(err.is_io_error() || err.is_connection_dropped(), "{err}");
    let mut fresh = first.conn().await;
    let err = redis::cmd("SET")
        .arg("after")
        .arg("1")
        .query_async::<()>(&mut fresh)
        .await
        .expect_err("a write on the demoted primary");
    assert_eq!(err.code(), Some("READONLY"), "{err}");
    let mut conn = second.conn().await;
    assert_eq!(get(&mut conn, "before").await.as_deref(), Some("1"));

    let back = setup.failover().await;
    eprintln!(
        "SENTINEL FAILOVER back: promoted after {:?}",
        back.promoted_after
    );
    assert!(std::ptr::eq(back.new_primary, first));
    assert_eq!(setup.primary().await.addr(), first.addr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_makes_wait_time_out() {
    let setup = SentinelSetup::start();
    let mut conn = setup.primary().await.conn().await;
    set(&mut conn, "acked", "1").await;
    assert_eq!(
        wait(&mut conn, 1, 2000).await,
        1,
        "a live replica acknowledges"
    );

    {
        let frozen = setup.freeze_replica().await;
        assert!(!frozen.node().is_serving());
        set(&mut conn, "unacked", "1").await;
        let began = Instant::now();
        assert_eq!(wait(&mut conn, 1, 200).await, 0, "a frozen replica cannot");
        let took = began.elapsed();
        assert!(
            took >= Duration::from_millis(190) && took < Duration::from_secs(2),
            "WAIT 1 200 took {took:?}"
        );
        // Past down-after, the primary is still the primary (nothing to fail over).
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(setup.primary().await.addr(), setup.nodes()[0].addr());
    }
    // Resumed: it catches up and acknowledges again.
    assert_eq!(wait(&mut conn, 1, 5000).await, 1);
    setup.wait_settled().await;
}

/// How a redis-rs client reaches the primary through the sentinels, and what it takes to
/// reach the promoted replica after a SIGKILL: a new `get_async_connection()` (the old
/// connection stays broken; redis-rs does not move it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_rs_sentinel_client_reaches_the_promoted_replica() {
    let setup = SentinelSetup::start();
    let [first, second] = setup.nodes() else {
        panic!("two data nodes")
    };
    // `redis+sentinel://` URLs are not a thing in redis-rs 1.8: sentinels are plain
    // `redis://host:port/` URLs, and the master name a separate argument.
    assert!(redis::Client::open("redis+sentinel://127.0.0.1:26379/mymaster").is_err());

    // `String` without redis-rs's TLS features, `impl AsRef<str>` with them.
    let master_name: String = setup.master_name().to_owned();
    let mut client = SentinelClient::build(
        setup.sentinel_urls(),
        master_name,
        None,
        SentinelServerType::Master,
    )
    .expect("sentinel client");
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(500)))
        .set_response_timeout(Some(Duration::from_millis(500)));
    let mut conn = client
        .get_async_connection_with_config(&config)
        .await
        .expect("connection to the primary through the sentinels");
    set(&mut conn, "k", "1").await;
    let port: u16 = info_port(&mut conn).await;
    assert_eq!(port, first.port());
    setup.wait_replication_synced().await;

    let began = Instant::now();
    let follow = async {
        let mut attempts = 0;
        let mut last_error = String::new();
        loop {
            attempts += 1;
            match client.get_async_connection_with_config(&config).await {
                Ok(mut conn) => {
                    // Until the sentinels notice the kill, the lookup still finds the old
                    // primary.
                    let written = async {
                        let port = try_info_port(&mut conn).await?;
                        if port != second.port() {
                            return Err(format!("reached port {port}"));
                        }
                        redis::cmd("SET")
                            .arg("k")
                            .arg("2")
                            .query_async::<()>(&mut conn)
                            .await
                            .map_err(|e| format!("SET: {e}"))
                    };
                    match written.await {
                        Ok(()) => return (began.elapsed(), attempts, last_error),
                        Err(e) => last_error = e,
                    }
                }
                Err(e) => last_error = format!("{:?}: {e}", e.kind()),
            }
            assert!(began.elapsed() < Duration::from_secs(30), "{last_error}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let (promotion, (reached_after, attempts, last_error)) =
        tokio::join!(setup.kill_primary(), follow);
    eprintln!(
        "redis-rs SentinelClient: a new connection reached the promoted replica {reached_after:?} \
         after the SIGKILL ({attempts} attempts; last error before: {last_error}); the sentinels \
         named it after {:?}",
        promotion.announced_after
    );
    let err = redis::cmd("GET")
        .arg("k")
        .query_async::<Option<String>>(&mut conn)
        .await
        .expect_err("the connection to the dead primary");
    eprintln!("the old connection: {:?}: {err}", err.kind());
}

/// `tcp_port` from `INFO server`: which node a connection reached.
async fn info_port(conn: &mut MultiplexedConnection) -> u16 {
    try_info_port(conn).await.expect("INFO server")
}

async fn try_info_port(conn: &mut MultiplexedConnection) -> Result<u16, String> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(conn)
        .await
        .map_err(|e| format!("INFO: {e}"))?;
    info.lines()
        .find_map(|l| l.strip_prefix("tcp_port:"))
        .and_then(|p| p.trim().parse().ok())
        .ok_or_else(|| "no tcp_port in INFO server".to_owned())
}
