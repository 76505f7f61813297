//! Self-tests of the test harness (`tests/support`) against real
//! `redis-server` processes and real sockets.

#[path = "../support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisResult};
use support::{Proxy, RedisServer};

/// Short bound used to prove that something hangs.
const HANG: Duration = Duration::from_millis(300);

/// Connects to `url` with explicit timeouts (redis-rs defaults to 500 ms
/// response timeout, which would interfere with the delay tests).
async fn connect(url: &str) -> RedisResult<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(5)));
    redis::Client::open(url)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

async fn ping(conn: &mut MultiplexedConnection) -> RedisResult<String> {
    redis::cmd("PING").query_async(conn).await
}

/// Generous bound for things that must complete (or fail) promptly, so a
/// loaded machine does not cause false failures.
const PROMPT: Duration = Duration::from_secs(5);

/// PING through a fresh connection to `url`, bounded by `bound`.
async fn fresh_ping(
    url: &str,
    bound: Duration,
) -> Result<RedisResult<String>, tokio::time::error::Elapsed> {
    tokio::time::timeout(bound, async {
        let mut conn = connect(url).await?;
        ping(&mut conn).await
    })
    .await
}

fn pid_alive(pid: u32) -> bool {
    let pid = libc::pid_t::try_from(pid).expect("pid fits in pid_t");
    // SAFETY: signal 0 only checks for existence/permission.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[tokio::test]
async fn server_starts_and_answers_ping() {
    let server = RedisServer::start();
    assert_eq!(
        server.url(),
        format!("redis://127.0.0.1:{}/", server.port())
    );
    assert_eq!(
        server.addr(),
        SocketAddr::from(([127, 0, 0, 1], server.port()))
    );
    assert!(pid_alive(server.pid()));
    let mut conn = server.conn().await;
    assert_eq!(ping(&mut conn).await.expect("PING"), "PONG");
    // The fixed configuration is in effect.
    let save: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .query_async(&mut conn)
        .await
        .expect("CONFIG GET save");
    assert_eq!(save, ["save", ""]);
    let debug: String = redis::cmd("DEBUG")
        .arg("SLEEP")
        .arg("0")
        .query_async(&mut conn)
        .await
        .expect("DEBUG command must be enabled");
    assert_eq!(debug, "OK");
}

#[tokio::test]
async fn two_servers_get_different_ports_and_dirs() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.url(), b.url());
    assert_ne!(a.pid(), b.pid());
    assert_ne!(a.dir(), b.dir());
    let mut ca = a.conn().await;
    let mut cb = b.conn().await;
    let () = redis::cmd("SET")
        .arg("k")
        .arg("a")
        .query_async(&mut ca)
        .await
        .expect("SET on a");
    let on_b: Option<String> = redis::cmd("GET")
        .arg("k")
        .query_async(&mut cb)
        .await
        .expect("GET on b");
    assert_eq!(on_b, None, "servers must not share data");
}

#[tokio::test]
async fn sigstop_makes_ping_hang_and_sigcont_resumes() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    assert_eq!(ping(&mut conn).await.expect("PING"), "PONG");

    server.stop_process();
    let started = Instant::now();
    let frozen = tokio::time::timeout(HANG, ping(&mut conn)).await;
    assert!(
        frozen.is_err(),
        "PING must hang while SIGSTOPped: {frozen:?}"
    );
    assert!(started.elapsed() >= HANG);

    server.cont_process();
    let resumed = tokio::time::timeout(Duration::from_secs(2), ping(&mut conn))
        .await
        .expect("PING after SIGCONT must not hang")
        .expect("PING after SIGCONT");
    assert_eq!(resumed, "PONG");
    let fresh = fresh_ping(&server.url(), PROMPT).await;
    assert_eq!(fresh.expect("no hang").expect("fresh PING"), "PONG");
}

#[tokio::test]
async fn stop_guard_resumes_on_drop_and_drop_kills_stopped_server() {
    let server = RedisServer::start();
    {
        let _frozen = server.stop_guard();
        assert!(
            fresh_ping(&server.url(), HANG).await.is_err(),
            "frozen server"
        );
    }
    assert_eq!(
        fresh_ping(&server.url(), PROMPT)
            .await
            .expect("no hang")
            .expect("PING"),
        "PONG"
    );

    // Dropping a server that is still SIGSTOPped kills and reaps it.
    server.stop_process();
    let (pid, dir) = (server.pid(), server.dir().to_path_buf());
    drop(server);
    assert!(!pid_alive(pid), "process {pid} must be gone (reaped)");
    assert!(!dir.exists(), "temp dir {} must be removed", dir.display());
}

#[tokio::test]
async fn kill_then_restart_keeps_port_and_url_but_not_data() {
    let mut server = RedisServer::start();
    let (url, port, old_pid) = (server.url(), server.port(), server.pid());
    let mut conn = server.conn().await;
    let () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query_async(&mut conn)
        .await
        .expect("SET");

    server.kill();
    assert!(!server.is_running());
    assert!(!pid_alive(old_pid), "killed process must be reaped");
    let down = fresh_ping(&url, PROMPT).await.expect("refused, not hung");
    assert!(down.is_err(), "PING to a killed server must fail: {down:?}");
    assert!(
        ping(&mut conn).await.is_err(),
        "old connection must fail after kill"
    );

    server.restart();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    assert_eq!(server.url(), url);
    assert_ne!(server.pid(), old_pid);
    let mut conn = server.conn().await;
    assert_eq!(ping(&mut conn).await.expect("PING"), "PONG");
    let value: Option<String> = redis::cmd("GET")
        .arg("k")
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(value, None, "no persistence: data is gone after restart");
    // Both runs are in the log.
    assert_eq!(
        server.log().matches("Ready to accept connections").count(),
        2
    );
}

#[tokio::test]
async fn log_contains_server_output() {
    let server = RedisServer::start();
    let log = server.log();
    assert!(log.contains("Ready to accept connections"), "log:\n{log}");
    assert!(log.contains(&server.pid().to_string()), "log:\n{log}");
}

#[tokio::test]
async fn builder_applies_password_acl_users_and_options() {
    let server = RedisServer::builder()
        .password("p@ss word")
        .acl_user("alice", &["on", ">s3cret", "~*", "&*", "+@all"])
        .arg("--maxmemory", "1mb")
        .config("maxmemory-policy", &["noeviction"])
        .start();
    assert_eq!(
        server.url(),
        format!("redis://:p%40ss%20word@127.0.0.1:{}/", server.port())
    );

    let mut conn = server.conn().await;
    let maxmemory: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory")
        .query_async(&mut conn)
        .await
        .expect("CONFIG GET");
    assert_eq!(maxmemory, ["maxmemory", "1048576"]);

    let unauthenticated = fresh_ping(&format!("redis://{}/", server.addr()), PROMPT)
        .await
        .expect("no hang");
    let err = unauthenticated.expect_err("PING without password must fail");
    assert!(err.to_string().contains("NOAUTH"), "{err}");

    let mut alice = connect(&server.url_for_user("alice", "s3cret"))
        .await
        .expect("connect as alice");
    let whoami: String = redis::cmd("ACL")
        .arg("WHOAMI")
        .query_async(&mut alice)
        .await
        .expect("ACL WHOAMI");
    assert_eq!(whoami, "alice");
}

#[test]
#[should_panic(expected = "exited during startup")]
fn bad_config_panics_with_log() {
    let _server = RedisServer::builder()
        .arg("--no-such-directive", "1")
        .start();
}

#[test]
#[should_panic(expected = "set by the harness")]
fn reserved_options_are_rejected() {
    let _builder = RedisServer::builder().arg("--port", "6379");
}

#[tokio::test]
async fn quiet_log_level_still_starts() {
    let server = RedisServer::builder().arg("loglevel", "warning").start();
    let mut conn = server.conn().await;
    assert_eq!(ping(&mut conn).await.expect("PING"), "PONG");
}

#[tokio::test]
async fn proxy_pass_forwards_ping() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr()).await;
    assert_eq!(proxy.url(), format!("redis://{}/", proxy.addr()));
    assert_eq!(proxy.connections(), 0);
    let mut conn = connect(&proxy.url()).await.expect("connect via proxy");
    assert_eq!(ping(&mut conn).await.expect("PING"), "PONG");
    assert_eq!(proxy.connections(), 1);
    assert_eq!(proxy.active(), 1);
}

#[tokio::test]
async fn proxy_delay_slows_round_trips() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr()).await;
    let mut conn = connect(&proxy.url()).await.expect("connect via proxy");
    assert_eq!(ping(&mut conn).await.expect("PING"), "PONG");

    proxy.delay(Duration::from_millis(200));
    let started = Instant::now();
    assert_eq!(ping(&mut conn).await.expect("delayed PING"), "PONG");
    let took = started.elapsed();
    // Held once on the way in and once on the way out.
    assert!(took >= Duration::from_millis(400), "took {took:?}");

    proxy.pass();
    let started = Instant::now();
    assert_eq!(ping(&mut conn).await.expect("PING"), "PONG");
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(400),
        "pass() must end the delay: {took:?}"
    );
}

#[tokio::test]
async fn proxy_blackhole_hangs_and_pass_recovers_new_connections() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr()).await;
    let mut conn = connect(&proxy.url()).await.expect("connect via proxy");
    assert_eq!(ping(&mut conn).await.expect("PING"), "PONG");

    proxy.blackhole();
    let hung = tokio::time::timeout(HANG, ping(&mut conn)).await;
    assert!(hung.is_err(), "PING must hang when blackholed: {hung:?}");
    assert!(
        fresh_ping(&proxy.url(), HANG).await.is_err(),
        "a new connection must hang too"
    );
    assert_eq!(proxy.active(), 2, "blackholed connections stay open");

    proxy.pass();
    let fresh = fresh_ping(&proxy.url(), PROMPT).await;
    assert_eq!(fresh.expect("no hang").expect("PING after pass"), "PONG");
}

#[tokio::test]
async fn proxy_reset_all_breaks_connections_with_io_error() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr()).await;
    let mut conn = connect(&proxy.url()).await.expect("connect via proxy");
    assert_eq!(ping(&mut conn).await.expect("PING"), "PONG");

    proxy.reset_all().await;
    assert_eq!(proxy.active(), 0);
    let err = ping(&mut conn)
        .await
        .expect_err("command on a reset connection must fail");
    assert!(err.is_io_error(), "expected an I/O error, got {err:?}");

    // The proxy keeps accepting: a reconnect works and is counted.
    let fresh = fresh_ping(&proxy.url(), PROMPT).await;
    assert_eq!(fresh.expect("no hang").expect("PING after reset"), "PONG");
    assert_eq!(proxy.connections(), 2);
}

#[tokio::test]
async fn proxy_refuse_fails_new_connections_until_pass() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr()).await;
    let mut existing = connect(&proxy.url()).await.expect("connect via proxy");

    proxy.refuse();
    let refused = fresh_ping(&proxy.url(), PROMPT)
        .await
        .expect("fails fast, no hang");
    assert!(refused.is_err(), "new connection must fail: {refused:?}");
    assert!(proxy.refused() >= 1);
    assert_eq!(proxy.connections(), 1);
    assert_eq!(
        ping(&mut existing).await.expect("existing connection"),
        "PONG"
    );

    proxy.pass();
    let fresh = fresh_ping(&proxy.url(), PROMPT).await;
    assert_eq!(fresh.expect("no hang").expect("PING after pass"), "PONG");
}

#[tokio::test]
async fn proxy_survives_server_restart() {
    let mut server = RedisServer::start();
    let proxy = Proxy::start(server.addr()).await;
    let mut conn = connect(&proxy.url()).await.expect("connect via proxy");
    assert_eq!(ping(&mut conn).await.expect("PING"), "PONG");

    server.kill();
    assert!(ping(&mut conn).await.is_err(), "server is gone");
    let down = fresh_ping(&proxy.url(), PROMPT)
        .await
        .expect("fails fast, no hang");
    assert!(down.is_err(), "target down: {down:?}");

    server.restart();
    let fresh = fresh_ping(&proxy.url(), PROMPT).await;
    assert_eq!(fresh.expect("no hang").expect("PING after restart"), "PONG");
}
