//! TESTPLAN 42: a quorum's members are distinct servers. A server named twice (the same
//! address, an alias of it, another database on it, or a second route to it) would vote twice,
//! and two clients configured `[a, a, b]` and `[b, b, a]` would both hold one lock.

use std::time::Duration;

use distlock::{Client, LockError, StoreError};

use super::support::{Proxy, RedisServer};
use super::urls;

/// Connects a quorum client to `urls` and returns the configuration error it must give.
async fn refused(urls: &[String]) -> String {
    match Client::builder()
        .response_timeout(Duration::from_secs(1))
        .connect_quorum(urls)
        .await
    {
        Err(StoreError::Config { message }) => message,
        Err(other) => panic!("{urls:?}: expected a configuration error, got {other}"),
        Ok(_) => panic!("{urls:?}: a quorum that names one server twice was accepted"),
    }
}

/// `url` with its host replaced by `host` (same port, credentials and path).
fn with_host(url: &str, host: &str) -> String {
    url.replacen("127.0.0.1", host, 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_named_twice_is_refused_at_connect() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let [a, b, c] = [0, 1, 2].map(|i| urls(&nodes)[i].clone());

    // The same address twice, in every arrangement the issue met.
    for set in [
        vec![a.clone(), b.clone(), a.clone()],
        vec![a.clone(), a.clone(), a.clone()],
        vec![a.clone(), b.clone(), c.clone(), a.clone(), b.clone()],
    ] {
        let message = refused(&set).await;
        assert!(
            message.contains(&nodes[0].addr().to_string()),
            "the message names the repeated server: {message}"
        );
    }

    // An alias: `localhost` resolves to the address of `127.0.0.1`.
    let message = refused(&[a.clone(), b.clone(), with_host(&a, "localhost")]).await;
    assert!(message.contains("same server"), "{message}");

    // Another database of the same server is the same server: a restart loses both.
    let db1 = format!("{}1", a.trim_end_matches('/').to_owned() + "/");
    refused(&[a.clone(), b.clone(), db1]).await;

    // A second route to the same server (a TCP proxy: another address, one server): told
    // apart only by what the server reports about itself.
    let proxy = Proxy::start(nodes[0].addr()).await;
    let message = refused(&[a.clone(), b.clone(), nodes[0].url_via(proxy.addr())]).await;
    assert!(message.contains("same server"), "{message}");

    // The two clients of the issue can no longer both be built, let alone both hold a lock.
    refused(&[a.clone(), a.clone(), b.clone()]).await;
    refused(&[b.clone(), b.clone(), a.clone()]).await;

    // Distinct servers still make a quorum.
    let client = Client::connect_quorum([&a, &b, &c])
        .await
        .unwrap_or_else(|e| panic!("three distinct servers: {e}"));
    let lease = client.lock("members").acquire().await.expect("acquire");
    lease.release().await.expect("release");
}

/// A second route to a server that could not be reached at connect is found out when it
/// first answers, and never votes: with the real server's other vote it would make a majority
/// of one server. Through the same database (one boot value) and through another database
/// (told apart by `run_id`, asked in the background).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_found_to_be_a_member_twice_after_connect_never_votes() {
    for database in ["", "1"] {
        let granted = late_member(Late::TwinOfFirst, database).await;
        assert_eq!(
            granted, 0,
            "database {database:?}: granted by one server counted twice"
        );
    }
}

/// The same check lets a member that is a server of its own vote once it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_distinct_member_that_answers_late_votes() {
    let granted = late_member(Late::ThirdServer, "").await;
    assert_eq!(granted, ROUNDS, "a late but distinct member must vote");
}

const ROUNDS: usize = 20;

enum Late {
    /// The late member is a second route to the first member's server.
    TwinOfFirst,
    /// The late member is a third server.
    ThirdServer,
}

/// A quorum of three whose third member is unreachable at connect and then answers; then the
/// first member's server is killed (or, for a twin, the second's: one server remains, named
/// twice). Returns how many of [`ROUNDS`] acquisitions were granted afterwards.
async fn late_member(late: Late, database: &str) -> usize {
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let target = match late {
        Late::TwinOfFirst => 0,
        Late::ThirdServer => 2,
    };
    let proxy = Proxy::start(nodes[target].addr()).await;
    proxy.refuse();
    let set = [
        nodes[0].url(),
        nodes[1].url(),
        format!("{}{database}", nodes[target].url_via(proxy.addr())),
    ];
    // Two of three answer: the client starts, the third member joins when it answers.
    // Nodes that answer at all answer within the per-node timeout, even on a busy machine
    // (the killed node below refuses at once).
    let client = Client::builder()
        .response_timeout(Duration::from_secs(2))
        .quorum_node_timeout(Duration::from_secs(1))
        .restart_quarantine(Duration::from_millis(1))
        .connect_quorum(&set)
        .await
        .unwrap_or_else(|e| panic!("connect with one member unreachable: {e}"));
    proxy.pass();
    // Let the third member answer (its first answer only introduces it, and a member that
    // answers for the first time sits out for the longest ttl in use: keep that short).
    let ttl = Duration::from_millis(300);
    for i in 0..20 {
        if let Ok(lease) = client.lock(format!("warm:{i}")).ttl(ttl).acquire().await {
            lease.release().await.expect("release");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(2 * ttl).await;
    match late {
        // One server remains, reachable twice. It must not grant anything.
        Late::TwinOfFirst => nodes[1].kill(),
        // Two distinct servers remain: a majority.
        Late::ThirdServer => nodes[0].kill(),
    }
    // A twin must be refused at once; a distinct member gets time to answer, however busy the
    // machine (a long ttl, so the validity left after a slow answer stays positive).
    let wait = match late {
        Late::TwinOfFirst => Duration::ZERO,
        Late::ThirdServer => Duration::from_secs(10),
    };
    let mut granted = 0;
    for i in 0..ROUNDS {
        match client
            .lock(format!("after:{i}"))
            .ttl(Duration::from_secs(10))
            .wait(wait)
            .acquire()
            .await
        {
            Ok(lease) => {
                granted += 1;
                lease.release().await.expect("release");
            }
            Err(LockError::Store(StoreError::NoQuorum { .. })) => {}
            Err(other) => panic!("expected a grant or NoQuorum, got {other}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    granted
}
