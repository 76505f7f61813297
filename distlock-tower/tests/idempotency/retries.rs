//! A request whose handler has begun is never run again by a retry (TESTPLAN 53), over real
//! HTTP with two server processes that share one Redis: a client that leaves while the
//! handler runs, and one cut off by an outer `TimeoutLayer`, retry with the same key (on the
//! same server and on the other) and get the stored answer; the handler ran once, counted in
//! Redis.

use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use distlock_tower::IdempotencyLayer;
use http::StatusCode;
use redis::AsyncCommands as _;

use crate::support::RedisServer;
use crate::support::child::{ChildProcess, listening, role, serve_and_say};
use crate::support::fixture::connect;
use crate::support::server::resource_conn;

/// This binary's entry test for child processes.
const ENTRY: &str = "retries::child_entry";

/// How long the handler of `/charge` runs.
const HANDLER_TIME: Duration = Duration::from_millis(1500);

/// A server process: `/charge` under `IdempotencyLayer` (scoped by the `x-account` header),
/// whose handler counts its runs in Redis (`retries:runs`), takes 1.5 s, and answers the run's
/// number. Role `server` lets a duplicate wait for a running request; `server-timeout` puts a
/// 300 ms `TimeoutLayer` outside the idempotency layer, as the guide's layer order does, and
/// does not wait. Says `LISTENING <port>`, then serves until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as a child process of the tests in this module"]
async fn child_entry() {
    let Some((role, url)) = role() else {
        return;
    };
    let client = connect(&url).await;
    let conn = resource_conn(&url).await;
    let charge = move |body: String| {
        let mut conn = conn.clone();
        async move {
            let n: u64 = conn.incr("retries:runs", 1).await.expect("incr");
            tokio::time::sleep(HANDLER_TIME).await;
            let done: u64 = conn.incr("retries:finished", 1).await.expect("incr");
            (
                StatusCode::CREATED,
                [("content-type", "application/json")],
                format!(r#"{{"run":{n},"finished":{done},"body":{body:?}}}"#),
            )
        }
    };
    let layer = |wait: Duration, lease: Duration| {
        IdempotencyLayer::builder(client.clone(), "retries")
            .scope(distlock_tower::extract::Header::from_static("x-account"))
            .wait(wait)
            .lease_ttl(lease)
            .build()
            .expect("valid settings")
    };
    let app = match role.as_str() {
        "server" => Router::new()
            .route("/charge", post(charge))
            .layer(layer(Duration::from_secs(60), Duration::from_secs(1))),
        "server-timeout" => Router::new()
            .route("/charge", post(charge))
            .layer(layer(Duration::ZERO, Duration::from_secs(1)))
            .layer(tower_http::timeout::TimeoutLayer::with_status_code(
                StatusCode::REQUEST_TIMEOUT,
                Duration::from_millis(300),
            )),
        other => panic!("unknown role {other}"),
    };
    serve_and_say(app).await;
}

fn server(url: &str, role: &str) -> (ChildProcess, u16) {
    listening(ENTRY, role, url)
}

fn http_client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(timeout)
        .build()
        .expect("HTTP client")
}

/// A response as the tests compare it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    status: u16,
    replayed: bool,
    body: String,
}

async fn charge(
    http: &reqwest::Client,
    port: u16,
    account: &str,
    key: &str,
) -> Result<Seen, reqwest::Error> {
    let response = http
        .post(format!("http://127.0.0.1:{port}/charge"))
        .header("idempotency-key", key)
        .header("x-account", account)
        .body("10 EUR")
        .send()
        .await?;
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    Ok(Seen {
        status: response.status().as_u16(),
        replayed,
        body: response.text().await?,
    })
}

async fn counter(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> u64 {
    let n: Option<u64> = conn.get(format!("retries:{name}")).await.expect("get");
    n.unwrap_or(0)
}

/// Waits until the handler has started `count` times.
async fn started(conn: &mut redis::aio::MultiplexedConnection, count: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while counter(conn, "runs").await < count {
        assert!(Instant::now() < deadline, "the handler did not start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The client gives up 300 ms into the 1.5 s handler (its connection closes), then retries
/// with the same key on the other server and on the same one: both retries get the stored
/// answer, and the handler ran (and finished) once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_mid_request_gets_the_stored_answer_on_retry() {
    let redis = RedisServer::start();
    let (_a, port_a) = server(&redis.url(), "server");
    let (_b, port_b) = server(&redis.url(), "server");
    let mut conn = redis.conn().await;

    let impatient = http_client(Duration::from_millis(300));
    let gave_up = charge(&impatient, port_a, "acct-1", "pay-1").await;
    assert!(
        gave_up.as_ref().is_err_and(reqwest::Error::is_timeout),
        "the first attempt should time out on the client: {gave_up:?}"
    );
    started(&mut conn, 1).await;

    let patient = http_client(Duration::from_secs(30));
    // On the other server: it waits for the running request, then replays its answer.
    let other = charge(&patient, port_b, "acct-1", "pay-1")
        .await
        .expect("retry on the other server");
    assert_eq!(other.status, 201, "{other:?}");
    assert!(other.replayed, "the retry ran the handler again: {other:?}");
    // On the same server, once stored: the same answer.
    let same = charge(&patient, port_a, "acct-1", "pay-1")
        .await
        .expect("retry on the same server");
    assert_eq!(same, other);
    assert!(same.body.contains(r#""run":1"#), "{same:?}");
    assert_eq!(counter(&mut conn, "runs").await, 1, "the handler ran twice");
    assert_eq!(counter(&mut conn, "finished").await, 1);
}

/// An outer 300 ms `TimeoutLayer` answers `408` while the 1.5 s handler runs; the handler
/// goes on to its end and its answer is stored, so the retry (after the handler's time, on
/// either server) replays it instead of running it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outer_timeout_does_not_make_the_retry_run_again() {
    let redis = RedisServer::start();
    let (_a, port_a) = server(&redis.url(), "server-timeout");
    let (_b, port_b) = server(&redis.url(), "server");
    let mut conn = redis.conn().await;
    let http = http_client(Duration::from_secs(30));

    let cut = charge(&http, port_a, "acct-1", "pay-2")
        .await
        .expect("first attempt");
    assert_eq!(cut.status, 408, "the outer timeout answers first: {cut:?}");
    started(&mut conn, 1).await;

    // The other server waits for the running request and replays its answer.
    let other = charge(&http, port_b, "acct-1", "pay-2")
        .await
        .expect("retry on the other server");
    assert_eq!((other.status, other.replayed), (201, true), "{other:?}");
    // The timed-out server now has the answer stored: it replays within its 300 ms.
    let same = charge(&http, port_a, "acct-1", "pay-2")
        .await
        .expect("retry on the same server");
    assert_eq!(same, other);
    assert_eq!(counter(&mut conn, "runs").await, 1, "the handler ran twice");
    assert_eq!(counter(&mut conn, "finished").await, 1);
}

/// The server running the handler dies mid-handler (`SIGKILL`): the retry on the other server
/// waits out the dead claim (its 1 s ttl), then gets `409` "outcome unknown", and the handler,
/// which never finished, is not run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_mid_request_leaves_outcome_unknown() {
    let redis = RedisServer::start();
    let (a, port_a) = server(&redis.url(), "server");
    let (_b, port_b) = server(&redis.url(), "server");
    let mut conn = redis.conn().await;
    let http = http_client(Duration::from_secs(30));

    let first = {
        let http = http.clone();
        tokio::spawn(async move { charge(&http, port_a, "acct-1", "pay-3").await })
    };
    started(&mut conn, 1).await;
    a.signal(libc::SIGKILL);
    assert!(
        first.await.expect("task").is_err(),
        "the dead server answers nothing"
    );

    let retry = charge(&http, port_b, "acct-1", "pay-3")
        .await
        .expect("retry on the other server");
    assert_eq!(retry.status, 409, "{retry:?}");
    assert!(retry.body.contains("outcome is unknown"), "{retry:?}");
    assert_eq!(counter(&mut conn, "runs").await, 1, "the handler ran again");
    assert_eq!(
        counter(&mut conn, "finished").await,
        0,
        "it died mid-handler"
    );
    // And again, later: the same answer, not a run.
    let again = charge(&http, port_b, "acct-1", "pay-3")
        .await
        .expect("again");
    assert_eq!(again.status, 409);
    assert_eq!(counter(&mut conn, "runs").await, 1);
}

/// Two callers (accounts) send the same key and the same body, on two servers: each gets its
/// own run, and neither sees the other's answer (TESTPLAN 54).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_callers_with_the_same_key_and_body_each_run() {
    let redis = RedisServer::start();
    let (_a, port_a) = server(&redis.url(), "server");
    let (_b, port_b) = server(&redis.url(), "server");
    let mut conn = redis.conn().await;
    let http = http_client(Duration::from_secs(30));

    let first = charge(&http, port_a, "acct-1", "shared-key")
        .await
        .expect("first caller");
    let second = charge(&http, port_b, "acct-2", "shared-key")
        .await
        .expect("second caller");
    assert_eq!((first.status, first.replayed), (201, false), "{first:?}");
    assert_eq!(
        (second.status, second.replayed),
        (201, false),
        "the second caller got the first one's answer: {second:?}"
    );
    assert_ne!(first.body, second.body);
    assert_eq!(counter(&mut conn, "runs").await, 2);
    // Each one's retry gets its own answer back.
    let again = charge(&http, port_b, "acct-1", "shared-key")
        .await
        .expect("first caller again");
    assert_eq!((again.replayed, &again.body), (true, &first.body));
    let again = charge(&http, port_a, "acct-2", "shared-key")
        .await
        .expect("second caller again");
    assert_eq!((again.replayed, &again.body), (true, &second.body));
    assert_eq!(counter(&mut conn, "runs").await, 2);
}
