//! Case 25 (part): passwords.

use std::time::Duration;

use distlock::{Client, ReleaseOutcome, StoreError};

use redis::aio::MultiplexedConnection;

use crate::common::{command_stats, info, timed};
use crate::support::RedisServer;

/// Failed authentications the server has counted: failed `AUTH` and `HELLO ... AUTH` calls
/// (`INFO commandstats`; Redis 7.0 has no `acl_access_denied_auth` yet).
async fn auth_failures(conn: &mut MultiplexedConnection) -> u64 {
    let mut failed = 0;
    for command in ["auth", "hello"] {
        failed += command_stats(conn, command).await.1;
    }
    failed
}

/// Connections the server has accepted.
async fn connections(conn: &mut MultiplexedConnection) -> u64 {
    info(conn, "stats")
        .await
        .get("total_connections_received")
        .and_then(|v| v.parse().ok())
        .expect("total_connections_received in INFO stats")
}

/// A wrong password fails `connect` with `StoreError::Auth`, after a single attempt (the
/// server sees exactly one connection and one failed authentication) and quickly (under 1 s, with the default
/// client settings); the right password connects and locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_fails_once_and_fast() {
    let server = RedisServer::builder().password("right-password").start();
    let wrong = format!("redis://:wrong-password@{}/", server.addr());

    let mut conn = server.conn().await;
    let (failures_before, connections_before) =
        (auth_failures(&mut conn).await, connections(&mut conn).await);
    let (result, took, late) = timed(Client::connect(&wrong)).await;
    let (failures, connections) = (
        auth_failures(&mut conn).await - failures_before,
        connections(&mut conn).await - connections_before,
    );
    match &result {
        Err(StoreError::Auth { .. }) => {}
        other => panic!(
            "connect with a wrong password: expected Auth, got {other:?} after {took:?}; the \
             server saw {connections} connection(s) and {failures} failed authentication(s)"
        ),
    }
    assert_eq!(
        (failures, connections),
        (1, 1),
        "(failed authentications, connections) seen by the server in {took:?}: more than one \
         attempt is a retry loop"
    );
    // One attempt, not a loop (the counts above); and no backoff sleep before the error
    // (besides how late this runtime ran its timers).
    assert!(
        took < Duration::from_secs(1) + late,
        "connect with a wrong password took {took:?} (timers {late:?} late meanwhile)"
    );

    let client = Client::connect(&server.url())
        .await
        .unwrap_or_else(|e| panic!("connect with the right password: {e}"));
    let lease = client.lock("authed").acquire().await.expect("acquire");
    assert_eq!(
        lease.release().await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// The version check at connect reads `INFO server`; an ACL user that may not run `INFO`
/// still connects (the check is skipped), and locks work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_info_still_connects() {
    let server = RedisServer::builder()
        .acl_user("locker", &["on", ">pw", "~*", "&*", "+@all", "-info"])
        .start();
    let client = Client::connect(&server.url_for_user("locker", "pw"))
        .await
        .expect("connect without INFO");
    let lease = client.lock("no-info").acquire().await.expect("acquire");
    assert_eq!(
        lease.release().await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// TESTPLAN 41: a URL without the password the server requires is `Auth` at connect, like a
/// wrong one, not a `Refused(NOAUTH)` at the first lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_password_is_auth_at_connect() {
    let server = RedisServer::builder().password("right-password").start();
    let bare = format!("redis://{}/", server.addr());
    let (result, took, late) = timed(Client::connect(&bare)).await;
    match &result {
        Err(StoreError::Auth { message }) => assert!(message.contains("NOAUTH"), "{message}"),
        other => panic!("connect without a password: expected Auth, got {other:?} after {took:?}"),
    }
    assert!(
        took < Duration::from_secs(1) + late,
        "took {took:?} (timers {late:?} late meanwhile)"
    );
}
