//! TESTPLAN 1 across OS processes: this test binary runs itself twice as a child (the ignored
//! `child_entry` test, selected with `--exact --ignored`), and both children call the same
//! locked function against one Redis. The counter and the occupancy gauge live in Redis, so
//! an overlap in either process shows up.

use std::time::Duration;

use distlock::{Client, LockError, distributed_lock};
use redis::aio::MultiplexedConnection;

use crate::support::RedisServer;
use crate::support::child::{self, run_children_to_done};
use crate::support::fixture::connect;
use crate::support::sections::{assert_sections_ran_alone, bump_counter_and_leave, enter_section};
use crate::support::server::resource_conn;

const PROCESSES: usize = 2;
const TASKS: usize = 4;
const SECTIONS: usize = 250;

/// One critical section: occupancy goes 0 → 1 → 0 around a non-atomic GET / SET of the counter.
#[distributed_lock(key = "processes", client = client, ttl = "5s", wait = "60s")]
async fn section(client: &Client, conn: &mut MultiplexedConnection) -> Result<(), LockError> {
    enter_section(conn, "").await;
    bump_counter_and_leave(conn, "", 1000).await;
    Ok(())
}

/// What a child runs: `TASKS` tasks × `SECTIONS` calls of [`section`].
async fn run_sections(url: &str) {
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let client = connect(url).await;
        let mut conn = resource_conn(url).await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..SECTIONS {
                section(&client, &mut conn).await.expect("section");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
}

/// Entry point of the child processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as a child process of `locked_fn_never_overlaps_across_processes`"]
async fn child_entry() {
    let Some((role, url)) = child::role() else {
        return;
    };
    assert_eq!(role, "sections", "unknown role");
    run_sections(&url).await;
    child::say("DONE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locked_fn_never_overlaps_across_processes() {
    let server = RedisServer::start();
    run_children_to_done(
        "processes::child_entry",
        "sections",
        &server.url(),
        PROCESSES,
        Duration::from_secs(240),
    );
    let mut conn = server.conn().await;
    let sections = PROCESSES * TASKS * SECTIONS;
    let log = format!("\n{}", server.log());
    assert_sections_ran_alone(&mut conn, &[String::new()], sections, false, &log).await;
}
