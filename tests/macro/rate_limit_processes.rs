//! `#[rate_limit]` across OS processes: this test binary runs itself twice as a child (the
//! ignored `child_entry` test), and both children call the same rate-limited functions against
//! one Redis. What ran is recorded in Redis, so the budget is checked across both processes:
//!
//! * `on_limit = error`: 800 calls against a burst of 100 that refills one unit every 36 s;
//!   exactly 100 run, 700 fail with `Limited`.
//! * `on_limit = wait`: 40 calls at 20 per second with a burst of 1, all of which wait for
//!   their turn; the turns are shared, so the calls span about 2 s (each process pacing itself
//!   would take 1 s).

use std::time::Duration;

use distlock::{Client, RateLimitError, rate_limit};
use redis::AsyncCommands as _;
use redis::aio::MultiplexedConnection;

use crate::support::RedisServer;
use crate::support::child::{self, ChildProcess};
use crate::support::fixture::connect;

const PROCESSES: usize = 2;
const TASKS: usize = 4;
const CALLS: usize = 100;
const BURST: usize = 100;
const PACED_TASKS: usize = 2;
const PACED_CALLS: usize = 10;

#[rate_limit(policy = "procs: 100/h", client = client)]
async fn limited(client: &Client, conn: &mut MultiplexedConnection) -> Result<(), RateLimitError> {
    let _: i64 = conn.incr("ran", 1).await.expect("incr");
    Ok(())
}

#[rate_limit(
    policy = "paced-procs: 20/s burst 1",
    client = client,
    on_limit = wait,
    max_wait = "30s"
)]
async fn paced(client: &Client, conn: &mut MultiplexedConnection) -> Result<(), RateLimitError> {
    // The server's clock, so both processes' calls are on one time line.
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.expect("time");
    let _: i64 = conn
        .rpush("paced", secs * 1_000_000 + micros)
        .await
        .expect("rpush");
    Ok(())
}

/// `n` connections to `redis`, one per task.
async fn connections(redis: &redis::Client, n: usize) -> Vec<MultiplexedConnection> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        conns.push(
            redis
                .get_multiplexed_async_connection()
                .await
                .expect("connection"),
        );
    }
    conns
}

/// What a child runs: `TASKS` tasks × `CALLS` calls of [`limited`], then `PACED_TASKS` tasks
/// × `PACED_CALLS` calls of [`paced`]. Reports how many calls were limited.
async fn run_calls(url: &str) -> usize {
    let redis = redis::Client::open(url).expect("url");
    let client = connect(url).await;
    let mut tasks = Vec::new();
    for mut conn in connections(&redis, TASKS).await {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut denied = 0;
            for _ in 0..CALLS {
                match limited(&client, &mut conn).await {
                    Ok(()) => {}
                    Err(RateLimitError::Limited { .. }) => denied += 1,
                    Err(err) => panic!("{err}"),
                }
            }
            denied
        }));
    }
    let mut denied = 0;
    for task in tasks {
        denied += task.await.expect("task");
    }
    let mut tasks = Vec::new();
    for mut conn in connections(&redis, PACED_TASKS).await {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..PACED_CALLS {
                paced(&client, &mut conn).await.expect("waits for its turn");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    denied
}

/// Entry point of the child processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as a child process of `rate_limited_fn_is_exact_across_processes`"]
async fn child_entry() {
    let Some((role, url)) = child::role() else {
        return;
    };
    assert_eq!(role, "calls", "unknown role");
    let denied = run_calls(&url).await;
    child::say(&format!("DONE {denied}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_fn_is_exact_across_processes() {
    let server = RedisServer::start();
    let children: Vec<ChildProcess> = (0..PROCESSES)
        .map(|_| ChildProcess::spawn("rate_limit_processes::child_entry", "calls", &server.url()))
        .collect();
    let mut denied = 0;
    for child in &children {
        let line = child.expect_line("DONE", Duration::from_secs(240));
        denied += line["DONE ".len()..]
            .parse::<usize>()
            .expect("a count of limited calls");
    }
    for child in children {
        child.wait_success(Duration::from_secs(10));
    }
    let mut conn = server.conn().await;
    let ran: usize = conn.get("ran").await.expect("ran");
    let total = PROCESSES * TASKS * CALLS;
    assert_eq!(
        ran,
        BURST,
        "calls that ran across both processes\n{}",
        server.log()
    );
    assert_eq!(denied, total - BURST, "calls refused with Limited");

    let mut paced: Vec<u64> = conn.lrange("paced", 0, -1).await.expect("paced");
    assert_eq!(
        paced.len(),
        PROCESSES * PACED_TASKS * PACED_CALLS,
        "every call ran"
    );
    paced.sort_unstable();
    let span = Duration::from_micros(paced[paced.len() - 1] - paced[0]);
    // 40 turns 50 ms apart: 1.95 s between the first and the last, less what the first call's
    // latency hides. One limiter per process, each pacing itself, would take about 1 s.
    assert!(
        span >= Duration::from_millis(1800),
        "40 paced calls in {span:?}\n{}",
        server.log()
    );
}
