//! Over real HTTP, with two server processes that share one Redis: 200 concurrent duplicates
//! run the handler once and all get the same response; a handler that panics leaves "outcome
//! unknown" (not run again), unless the layer lets interrupted requests run again; a
//! concurrent duplicate without a wait gets `409`.

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
const ENTRY: &str = "processes::child_entry";

/// A server process: an axum app under `IdempotencyLayer` (global keys), whose handlers count
/// their runs in Redis (`idem:runs:<route>`). Role `server` waits up to 60 s for a running
/// duplicate; `server-nowait` answers `409` at once; `server-rerun` lets a request that was
/// cut short run again. Says `LISTENING <port>`, then serves until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as a child process of the tests in this module"]
async fn child_entry() {
    let Some((role, url)) = role() else {
        return;
    };
    let (wait, rerun) = match role.as_str() {
        "server" => (Duration::from_secs(60), false),
        "server-nowait" => (Duration::ZERO, false),
        "server-rerun" => (Duration::from_secs(60), true),
        other => panic!("unknown role {other}"),
    };
    let client = connect(&url).await;
    let conn = resource_conn(&url).await;
    let counted = |route: &'static str| {
        let conn = conn.clone();
        move || {
            let mut conn = conn.clone();
            async move {
                let n: u64 = conn
                    .incr(format!("idem:runs:{route}"), 1)
                    .await
                    .expect("incr");
                n
            }
        }
    };
    let order = counted("order");
    let panics = counted("panic");
    let app = Router::new()
        .route(
            "/order",
            post(move |body: String| {
                let order = order.clone();
                async move {
                    let n = order().await;
                    // Long enough for every duplicate to arrive while it runs.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    let unique: u64 = rand::random();
                    (
                        StatusCode::CREATED,
                        [("content-type", "application/json"), ("etag", "\"v1\"")],
                        format!(r#"{{"run":{n},"unique":{unique},"body":{body:?}}}"#),
                    )
                }
            }),
        )
        .route(
            "/panic",
            post(move || {
                let panics = panics.clone();
                async move {
                    assert!(panics().await != 1, "the first run panics (on purpose)");
                    "done"
                }
            }),
        )
        .layer({
            let builder = IdempotencyLayer::builder(client, "processes")
                .scope_global()
                .lease_ttl(Duration::from_secs(10))
                .wait(wait);
            let builder = if rerun {
                builder.rerun_interrupted()
            } else {
                builder
            };
            builder.build().expect("valid settings")
        });
    serve_and_say(app).await;
}

fn servers(url: &str, role: &str, count: usize) -> (Vec<ChildProcess>, Vec<u16>) {
    (0..count).map(|_| listening(ENTRY, role, url)).unzip()
}

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("HTTP client")
}

/// What the tests compare of a response: status, the stored headers, the marker, the body.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    status: u16,
    content_type: Option<String>,
    etag: Option<String>,
    replayed: bool,
    body: Vec<u8>,
}

async fn send(
    http: &reqwest::Client,
    port: u16,
    path: &str,
    key: Option<&str>,
    body: &str,
) -> Seen {
    let mut request = http
        .post(format!("http://127.0.0.1:{port}{path}"))
        .body(body.to_owned());
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let response = request.send().await.expect("request");
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().expect("ASCII").to_owned())
    };
    Seen {
        status: response.status().as_u16(),
        content_type: header("content-type"),
        etag: header("etag"),
        replayed: header("idempotent-replayed").as_deref() == Some("true"),
        body: response.bytes().await.expect("body").to_vec(),
    }
}

async fn runs(conn: &mut redis::aio::MultiplexedConnection, route: &str) -> u64 {
    let runs: Option<u64> = conn.get(format!("idem:runs:{route}")).await.expect("get");
    runs.unwrap_or(0)
}

/// Waits until the handler of `route` has started `count` times.
async fn started(conn: &mut redis::aio::MultiplexedConnection, route: &str, count: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while runs(conn, route).await < count {
        assert!(Instant::now() < deadline, "{route} did not start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// 200 duplicates at once, spread over two server processes: the handler runs once, and every
/// response is the first one byte for byte (status, stored headers, body), 199 of them marked
/// as replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_duplicates_over_two_processes_run_once() {
    let server = RedisServer::start();
    let (_children, ports) = servers(&server.url(), "server", 2);
    let http = http_client();
    let began = Instant::now();
    let requests: Vec<_> = (0..200)
        .map(|i| {
            let http = http.clone();
            let port = ports[i % 2];
            tokio::spawn(async move { send(&http, port, "/order", Some("dup-1"), "2 seats").await })
        })
        .collect();
    let mut seen = Vec::new();
    for request in requests {
        seen.push(request.await.expect("task"));
    }
    let elapsed = began.elapsed();
    let mut conn = server.conn().await;
    assert_eq!(
        runs(&mut conn, "order").await,
        1,
        "the handler ran more than once"
    );
    let (firsts, replays): (Vec<_>, Vec<_>) = seen.iter().partition(|s| !s.replayed);
    assert_eq!(firsts.len(), 1, "exactly one response is not a replay");
    let first = firsts[0];
    assert_eq!(first.status, 201);
    assert_eq!(first.content_type.as_deref(), Some("application/json"));
    assert_eq!(first.etag.as_deref(), Some("\"v1\""));
    for replay in &replays {
        let unmarked = Seen {
            replayed: false,
            ..(*replay).clone()
        };
        assert_eq!(&unmarked, first, "a replay differs from the first response");
    }
    eprintln!("200 duplicates over 2 processes: handler ran 1 time, all answered in {elapsed:?}");
}

/// A different body with the key is `422`; no key is `400`; a duplicate that comes while the
/// first runs, on a server that does not wait, is `409`, and the first still completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mismatch_missing_key_and_conflict() {
    let server = RedisServer::start();
    let (_children, ports) = servers(&server.url(), "server-nowait", 2);
    let http = http_client();
    let mut conn = server.conn().await;

    let first = {
        let http = http.clone();
        let port = ports[0];
        tokio::spawn(async move { send(&http, port, "/order", Some("c-1"), "a").await })
    };
    started(&mut conn, "order", 1).await;
    let duplicate = send(&http, ports[1], "/order", Some("c-1"), "a").await;
    assert_eq!(duplicate.status, 409, "{duplicate:?}");
    let first = first.await.expect("task");
    assert_eq!(first.status, 201);

    let mismatch = send(&http, ports[1], "/order", Some("c-1"), "b").await;
    assert_eq!(mismatch.status, 422);
    let missing = send(&http, ports[0], "/order", None, "a").await;
    assert_eq!(missing.status, 400);
    let replay = send(&http, ports[1], "/order", Some("c-1"), "a").await;
    assert!(replay.replayed);
    assert_eq!(replay.body, first.body);
    assert_eq!(runs(&mut conn, "order").await, 1);
}

/// A handler that panics leaves its key's outcome unknown: the request gets `409`, and so do
/// its retries on either server, which never run it again. A layer that lets interrupted
/// requests run again runs the retry, and stores that run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_leaves_outcome_unknown() {
    let server = RedisServer::start();
    let (_children, ports) = servers(&server.url(), "server", 2);
    let http = http_client();
    let mut conn = server.conn().await;

    let panicked = send_may_fail(&http, ports[0], "/panic", "p-1").await;
    assert_eq!(panicked, Some(409), "the layer answers for the handler");
    for port in [ports[1], ports[0]] {
        let retry = send(&http, port, "/panic", Some("p-1"), "").await;
        assert_eq!((retry.status, retry.replayed), (409, false), "{retry:?}");
        assert!(
            String::from_utf8_lossy(&retry.body).contains("outcome is unknown"),
            "{retry:?}"
        );
    }
    assert_eq!(runs(&mut conn, "panic").await, 1, "a retry ran it again");

    // Said by name: a request cut short may run again.
    let rerun_server = RedisServer::start();
    let (_children, ports) = servers(&rerun_server.url(), "server-rerun", 2);
    let mut conn = rerun_server.conn().await;
    let panicked = send_may_fail(&http, ports[0], "/panic", "p-2").await;
    assert_eq!(panicked, Some(409));
    let next = send(&http, ports[1], "/panic", Some("p-2"), "").await;
    assert_eq!((next.status, next.replayed), (200, false));
    assert_eq!(runs(&mut conn, "panic").await, 2);
    let replay = send(&http, ports[0], "/panic", Some("p-2"), "").await;
    assert!(replay.replayed);
    assert_eq!(runs(&mut conn, "panic").await, 2);
}

/// A request whose handler panics: the server closes the connection (`None`), or answers.
async fn send_may_fail(http: &reqwest::Client, port: u16, path: &str, key: &str) -> Option<u16> {
    http.post(format!("http://127.0.0.1:{port}{path}"))
        .header("idempotency-key", key)
        .send()
        .await
        .ok()
        .map(|r| r.status().as_u16())
}
