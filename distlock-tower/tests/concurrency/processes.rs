//! Over real HTTP, with two server processes that share one Redis: the limit holds across
//! both, and a client that disconnects frees its place at once, not at the permit's ttl.

use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Path;
use axum::routing::get;
use distlock_tower::concurrency::ConcurrencyLimitLayer;
use distlock_tower::extract::Constant;
use redis::AsyncCommands as _;

use crate::support::RedisServer;
use crate::support::child::{self, ChildProcess, listening, serve_and_say};
use crate::support::fixture::connect;
use crate::support::server::resource_conn;

/// This binary's entry test for child processes.
const ENTRY: &str = "processes::child_entry";
/// The limit both servers share.
const LIMIT: u32 = 3;

/// A server process: an axum app under `ConcurrencyLimitLayer(LIMIT)` on the semaphore
/// `work`, whose handlers count themselves in Redis. Says `LISTENING <port>`, then serves
/// until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as a child process of the tests in this module"]
async fn child_entry() {
    let Some((role, url)) = child::role() else {
        return;
    };
    assert_eq!(role, "server");
    let client = connect(&url).await;
    let conn = resource_conn(&url).await;
    let work_conn = conn.clone();
    let app = Router::new()
        .route(
            "/work/{ms}",
            get(move |Path(ms): Path<u64>| {
                let mut conn = work_conn.clone();
                async move {
                    let inside: i64 = conn.incr("cl:inside", 1).await.expect("incr");
                    let _: i64 = redis::Script::new(
                        "local m = tonumber(redis.call('GET', KEYS[1]) or '0') \
                         if tonumber(ARGV[1]) > m then redis.call('SET', KEYS[1], ARGV[1]) end \
                         return 0",
                    )
                    .key("cl:max")
                    .arg(inside)
                    .invoke_async(&mut conn)
                    .await
                    .expect("max");
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    let _: i64 = conn.decr("cl:inside", 1).await.expect("decr");
                    "done"
                }
            }),
        )
        .route(
            "/hang",
            get(move || {
                let mut conn = conn.clone();
                async move {
                    let _: i64 = conn.incr("cl:hanging", 1).await.expect("incr");
                    // Until the client goes away (the server then drops this future).
                    tokio::time::sleep(Duration::from_secs(120)).await;
                    "never"
                }
            }),
        )
        .route_layer(
            ConcurrencyLimitLayer::builder(client, Constant::from_static("work"), LIMIT)
                .ttl(Duration::from_secs(10))
                .wait(Duration::from_secs(30))
                .build()
                .expect("valid settings"),
        );
    serve_and_say(app).await;
}

fn servers(url: &str) -> (Vec<ChildProcess>, Vec<u16>) {
    (0..2).map(|_| listening(ENTRY, "server", url)).unzip()
}

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("HTTP client")
}

/// 40 requests at once, spread over the two servers: every one is served (they wait for a
/// place), never more than `LIMIT` handlers run at once in total, and the limit is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_n_handlers_at_once_across_two_server_processes() {
    let server = RedisServer::start();
    let (_children, ports) = servers(&server.url());
    let http = http_client();
    let requests = (0..40).map(|i| {
        let http = http.clone();
        let port = ports[i % 2];
        let ms = rand::random_range(20..80);
        tokio::spawn(async move {
            http.get(format!("http://127.0.0.1:{port}/work/{ms}"))
                .send()
                .await
                .expect("request")
                .status()
        })
    });
    let requests: Vec<_> = requests.collect();
    for request in requests {
        assert_eq!(request.await.expect("task"), http::StatusCode::OK);
    }
    let mut conn = server.conn().await;
    let most: i64 = conn.get("cl:max").await.expect("max");
    assert!(
        most <= i64::from(LIMIT),
        "{most} handlers at once, limit {LIMIT}"
    );
    assert_eq!(most, i64::from(LIMIT), "the limit was never reached");
}

/// Three clients fill the limit with requests that hang, then disconnect: their permits come
/// back at once (the servers drop the requests), long before the 10 s ttl, and the next
/// request is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_frees_its_place() {
    let server = RedisServer::start();
    let (_children, ports) = servers(&server.url());
    let http = http_client();
    let hanging: Vec<_> = (0..LIMIT as usize)
        .map(|i| {
            let http = http.clone();
            let port = ports[i % 2];
            tokio::spawn(async move {
                let _ = http
                    .get(format!("http://127.0.0.1:{port}/hang"))
                    .send()
                    .await;
            })
        })
        .collect();
    let mut conn = server.conn().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let hanging: Option<i64> = conn.get("cl:hanging").await.expect("get");
        if hanging == Some(i64::from(LIMIT)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the hanging requests did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let client = connect(&server.url()).await;
    let key = client.__inspect().semaphore_key("http/work").expect("key");
    assert_eq!(
        client.__inspect().live_entries(&key).await.expect("count"),
        u64::from(LIMIT)
    );
    // The clients go away.
    for request in hanging {
        request.abort();
    }
    let gone = Instant::now();
    while client.__inspect().live_entries(&key).await.expect("count") > 0 {
        assert!(
            gone.elapsed() < Duration::from_secs(2),
            "disconnected clients still hold their places after {:?}",
            gone.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let freed_in = gone.elapsed();
    eprintln!("permits of disconnected clients freed in {freed_in:?}");
    let status = http
        .get(format!("http://127.0.0.1:{}/work/1", ports[0]))
        .send()
        .await
        .expect("request")
        .status();
    assert_eq!(status, http::StatusCode::OK);
}
