//! TESTPLAN 1 across OS processes: this test binary runs itself twice as a child (the ignored
//! `child_entry` test, selected with `--exact --ignored`), and both children call the same
//! locked function against one Redis. The counter and the occupancy gauge live in Redis, so
//! an overlap in either process shows up.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use distlock::{Client, LockError, distributed_lock};
use redis::AsyncCommands as _;
use redis::aio::MultiplexedConnection;

use crate::fixture::connect;
use crate::support::RedisServer;

/// Tells a child what to do; a test run without it (the normal case) makes `child_entry` a
/// no-op.
const ROLE_VAR: &str = "DISTLOCK_MACRO_TEST_ROLE";
const URL_VAR: &str = "DISTLOCK_MACRO_TEST_URL";
/// Prefix of the lines a child reports on.
const REPORT: &str = "MACRO-CHILD ";

const PROCESSES: usize = 2;
const TASKS: usize = 4;
const SECTIONS: usize = 250;

/// One critical section: occupancy goes 0 → 1 → 0 around a non-atomic GET / SET of the counter.
#[distributed_lock(key = "processes", client = client, ttl = "5s", wait = "60s")]
async fn section(client: &Client, conn: &mut MultiplexedConnection) -> Result<(), LockError> {
    let inside: i64 = conn.incr("occupancy", 1).await.expect("incr");
    if inside != 1 {
        let _: i64 = conn.incr("violations", 1).await.expect("incr");
    }
    let seen: i64 = conn
        .get::<_, Option<i64>>("counter")
        .await
        .expect("get")
        .unwrap_or(0);
    tokio::time::sleep(Duration::from_micros(rand::random_range(0..1000))).await;
    let () = conn.set("counter", seen + 1).await.expect("set");
    let _: i64 = conn.decr("occupancy", 1).await.expect("decr");
    Ok(())
}

/// What a child runs: `TASKS` tasks × `SECTIONS` calls of [`section`].
async fn run_sections(url: &str) {
    let redis = redis::Client::open(url).expect("url");
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let client = connect(url).await;
        let mut conn = redis
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
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
    let (Ok(role), Ok(url)) = (std::env::var(ROLE_VAR), std::env::var(URL_VAR)) else {
        return;
    };
    assert_eq!(role, "sections", "unknown role");
    run_sections(&url).await;
    println!("{REPORT}DONE");
}

/// A child process and the report lines it prints.
struct ChildProcess {
    child: Child,
    reports: mpsc::Receiver<String>,
}

impl ChildProcess {
    fn spawn(role: &str, url: &str) -> Self {
        let exe = std::env::current_exe().expect("path of this test binary");
        let mut child = Command::new(exe)
            .args([
                "--exact",
                "processes::child_entry",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE_VAR, role)
            .env(URL_VAR, url)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn a child test process");
        let stdout = child.stdout.take().expect("child stdout");
        let (tx, reports) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest may print `test processes::child_entry ... ` before our text.
                if let Some(at) = line.find(REPORT)
                    && tx.send(line[at + REPORT.len()..].to_owned()).is_err()
                {
                    return;
                }
            }
        });
        Self { child, reports }
    }

    /// Waits for the child to report `line` and exit successfully.
    fn expect_done(mut self, line: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.reports.recv_timeout(left) {
                Ok(report) if report == line => break,
                Ok(_) => {}
                Err(err) => panic!("the child did not report `{line}` within {within:?}: {err}"),
            }
        }
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the child") {
                assert!(status.success(), "the child failed: {status}");
                return;
            }
            assert!(Instant::now() < deadline, "the child did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locked_fn_never_overlaps_across_processes() {
    let server = RedisServer::start();
    let children: Vec<ChildProcess> = (0..PROCESSES)
        .map(|_| ChildProcess::spawn("sections", &server.url()))
        .collect();
    for child in children {
        child.expect_done("DONE", Duration::from_secs(240));
    }
    let mut conn = server.conn().await;
    let counter: i64 = conn.get("counter").await.expect("counter");
    let violations: Option<i64> = conn.get("violations").await.expect("violations");
    assert_eq!(
        violations.unwrap_or(0),
        0,
        "two holders were inside at once\n{}",
        server.log()
    );
    assert_eq!(
        counter,
        (PROCESSES * TASKS * SECTIONS) as i64,
        "lost updates\n{}",
        server.log()
    );
}
