//! Cases that need more than one OS process: the test binary re-runs itself as a child (the
//! ignored `child_entry` test, selected with `--exact --ignored`) with a role in the
//! environment. Children talk to the parent in lines prefixed `CHILD `.

use std::time::{Duration, Instant};

use distlock::{Client, LockError, ReleaseOutcome};
use redis::Script;

use crate::support::RedisServer;
use crate::support::child::{self, ChildProcess, say};
use crate::support::fixture::connect;

/// A fenced resource: a Redis key that accepts a write only with a fence above the last one.
static FENCED_WRITE: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r"
        local last = tonumber(redis.call('GET', KEYS[1]) or '0')
        if tonumber(ARGV[1]) <= last then return 0 end
        redis.call('SET', KEYS[1], ARGV[1])
        return 1
        ",
    )
});

async fn fenced_write(conn: &mut redis::aio::MultiplexedConnection, fence: u64) -> bool {
    let ok: i64 = FENCED_WRITE
        .key("resource:last-fence")
        .arg(fence)
        .invoke_async(conn)
        .await
        .expect("fenced write");
    ok == 1
}

/// This binary's entry test for child processes.
const ENTRY: &str = "processes::child_entry";

/// Entry point of the child processes; does nothing unless the parent set a role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as a child process of the tests in this module"]
async fn child_entry() {
    let Some((role, url)) = child::role() else {
        return;
    };
    let client = connect(&url).await;
    match role.as_str() {
        "exclusion" => child_exclusion(client, &url).await,
        "hold" => child_hold(client).await,
        "fenced" => child_fenced(client, &url).await,
        other => panic!("unknown child role {other}"),
    }
}

const PROCESS_TASKS: usize = 4;
const PROCESS_SECTIONS: usize = 500;

/// 4 tasks × 500 critical sections on a Redis counter, checking occupancy.
async fn child_exclusion(client: Client, url: &str) {
    let redis = redis::Client::open(url).expect("url");
    let mut tasks = Vec::new();
    for _ in 0..PROCESS_TASKS {
        let client = client.clone();
        let mut conn = redis
            .get_multiplexed_async_connection()
            .await
            .expect("conn");
        tasks.push(tokio::spawn(async move {
            use redis::AsyncCommands;
            for _ in 0..PROCESS_SECTIONS {
                let lease = client
                    .lock("processes")
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("acquire");
                let inside: i64 = conn.incr("occupancy", 1).await.expect("incr");
                if inside != 1 {
                    let _: i64 = conn.incr("violations", 1).await.expect("incr");
                }
                let seen: i64 = conn.get("counter").await.unwrap_or(0);
                tokio::time::sleep(Duration::from_micros(rand::random_range(0..1000))).await;
                let _: () = conn.set("counter", seen + 1).await.expect("set");
                let _: i64 = conn.decr("occupancy", 1).await.expect("decr");
                assert_eq!(
                    lease.release().await.expect("release"),
                    ReleaseOutcome::Released
                );
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    say("DONE");
}

/// Takes a lease and holds it until killed.
async fn child_hold(client: Client) {
    let lease = client
        .lock("held-by-child")
        .ttl(Duration::from_millis(800))
        .acquire()
        .await
        .expect("acquire");
    say(&format!("ACQUIRED {}", lease.fence()));
    tokio::time::sleep(Duration::from_secs(60)).await;
}

/// Takes a lease, then writes to the fenced resource every 20 ms, checking the lease after each
/// write, until it finds the lease lost.
async fn child_fenced(client: Client, url: &str) {
    let mut conn = redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("conn");
    let lease = client
        .lock("fenced-resource")
        .ttl(Duration::from_millis(500))
        .acquire()
        .await
        .expect("acquire");
    assert!(fenced_write(&mut conn, lease.fence()).await);
    say(&format!("ACQUIRED {}", lease.fence()));
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        // The write that was in flight when the process froze: only the fence can stop it.
        let accepted = fenced_write(&mut conn, lease.fence()).await;
        if lease.is_lost() {
            say(&format!("LOST accepted={accepted}"));
            break;
        }
        if !accepted {
            say("REJECTED while the lease looked valid");
            break;
        }
    }
    // The pause must not resurrect the key: our release finds it held by another.
    let outcome = lease.release().await.expect("release");
    say(&format!("RELEASE {outcome:?}"));
}

/// TESTPLAN 1 (processes): 4 OS processes × 4 tasks × 500 critical sections on one key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_across_4_processes() {
    let server = RedisServer::start();
    let children: Vec<ChildProcess> = (0..4)
        .map(|_| ChildProcess::spawn(ENTRY, "exclusion", &server.url()))
        .collect();
    for child in &children {
        child.expect_line("DONE", Duration::from_secs(240));
    }
    for child in children {
        child.wait_success(Duration::from_secs(10));
    }
    let mut conn = server.conn().await;
    use redis::AsyncCommands;
    let counter: i64 = conn.get("counter").await.expect("counter");
    let violations: Option<i64> = conn.get("violations").await.expect("violations");
    assert_eq!(
        violations.unwrap_or(0),
        0,
        "two holders were inside at once"
    );
    assert_eq!(
        counter,
        (4 * PROCESS_TASKS * PROCESS_SECTIONS) as i64,
        "lost updates"
    );
}

/// TESTPLAN 8: the holder process is SIGKILLed: its key is gone within the ttl and a waiter
/// gets the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_frees_the_lock_within_its_ttl() {
    let server = RedisServer::start();
    let child = ChildProcess::spawn(ENTRY, "hold", &server.url());
    child.expect_line("ACQUIRED", Duration::from_secs(30));
    let client = connect(&server.url()).await;
    assert!(matches!(
        client.lock("held-by-child").acquire().await,
        Err(LockError::Busy { .. })
    ));
    child.signal(libc::SIGKILL);
    let killed_at = Instant::now();
    let lease = client
        .lock("held-by-child")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("the waiter gets the lock");
    let waited = killed_at.elapsed();
    assert!(
        waited <= Duration::from_millis(800) + Duration::from_millis(150),
        "waited {waited:?} for a ttl of 800 ms"
    );
    lease.release().await.expect("release");
}

/// TESTPLAN 3 and 9: a holder frozen past its ttl (SIGSTOP) resumes: its write with the old
/// fence is rejected by the fenced resource, it sees the loss before its next guarded step,
/// and its renewal and release never touch the new holder's key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_is_fenced_off_and_sees_the_loss() {
    let server = RedisServer::start();
    let child = ChildProcess::spawn(ENTRY, "fenced", &server.url());
    let line = child.expect_line("ACQUIRED", Duration::from_secs(30));
    let old_fence: u64 = line.trim_start_matches("ACQUIRED ").parse().expect("fence");
    child.signal(libc::SIGSTOP);
    let client = connect(&server.url()).await;
    let lease = client
        .lock("fenced-resource")
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(3))
        .acquire()
        .await
        .expect("a new holder gets in while the old one is frozen");
    assert!(lease.fence() > old_fence);
    let mut conn = server.conn().await;
    assert!(fenced_write(&mut conn, lease.fence()).await);
    child.signal(libc::SIGCONT);
    let lost = child.expect_line("LOST", Duration::from_secs(5));
    assert_eq!(
        lost, "LOST accepted=false",
        "the frozen holder's write went through"
    );
    let release = child.expect_line("RELEASE", Duration::from_secs(5));
    assert_eq!(release, "RELEASE HeldByOther");
    child.wait_success(Duration::from_secs(5));
    // The new holder's key is intact.
    let pttl = client
        .__inspect()
        .pttl(&client.__inspect().lock_key("fenced-resource").expect("key"))
        .await
        .expect("pttl");
    assert!(pttl.is_some_and(|p| p > Duration::from_secs(5)), "{pttl:?}");
    assert_eq!(
        lease.release().await.expect("release"),
        ReleaseOutcome::Released
    );
}
