//! Cases that need more than one OS process: the test binary re-runs itself as a child (the
//! ignored `child_entry` test, selected with `--exact --ignored`) with a role in the
//! environment. Children talk to the parent in lines prefixed `CHILD `.

use std::time::{Duration, Instant};

use distlock::{Client, HierarchyMode, LockError, ReleaseOutcome};
use redis::Script;

use crate::support::RedisServer;
use crate::support::child::{self, ChildProcess, run_children_to_done, say};
use crate::support::fixture::connect;
use crate::support::hierarchy;
use crate::support::sections::{assert_sections_ran_alone, bump_counter_and_leave, enter_section};
use crate::support::server::{resource_conn, until_subscribed};

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
pub(crate) const ENTRY: &str = "processes::child_entry";

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
        "forced" => child_forced(client).await,
        "fenced" => child_fenced(client, &url).await,
        "permits" => child_permits(client, &url).await,
        "permits-hold" => child_permits_hold(client).await,
        "permits-late" => child_permits_late(client).await,
        "job" => child_job(client, &url).await,
        "job-crash" => child_job_crash(client, &url).await,
        "fair-one" => super::fair::child_fair_one(client).await,
        other if other.starts_with("fair-waiters-") => {
            super::fair::child_fair_waiters(client, &url, &other["fair-waiters-".len()..]).await;
        }
        "hierarchy" => child_hierarchy(client, &url).await,
        other => panic!("unknown child role {other}"),
    }
}

const PROCESS_TASKS: usize = 4;
const PROCESS_SECTIONS: usize = 500;

/// 4 tasks × 500 critical sections on a Redis counter, checking occupancy.
async fn child_exclusion(client: Client, url: &str) {
    let mut tasks = Vec::new();
    for _ in 0..PROCESS_TASKS {
        let client = client.clone();
        let mut conn = resource_conn(url).await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..PROCESS_SECTIONS {
                let lease = client
                    .lock("processes")
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("acquire");
                enter_section(&mut conn, "").await;
                bump_counter_and_leave(&mut conn, "", 1000).await;
                assert_eq!(
                    lease.release().await.expect("release"),
                    ReleaseOutcome::Released
                );
            }
        }));
    }
    child::finish_tasks(tasks).await;
}

/// Takes a lease and holds it until killed.
async fn child_hold(client: Client) {
    let lease = client
        .lock("held-by-child")
        .ttl(HELD_TTL)
        .acquire()
        .await
        .expect("acquire");
    say(&format!("ACQUIRED {}", lease.fence().await.expect("fence")));
    tokio::time::sleep(Duration::from_secs(60)).await;
}

/// The ttl of the lease a child holds until the parent forces it free: long, so that its
/// first renewal (a third of it) cannot be what tells it.
const FORCED_TTL: Duration = Duration::from_secs(30);

/// Takes a lease under an identity naming this process, then says when its lost signal fires.
async fn child_forced(client: Client) {
    let lease = client
        .lock("forced-child")
        .identity(format!("child-{}", std::process::id()))
        .ttl(FORCED_TTL)
        .acquire()
        .await
        .expect("acquire");
    say("ACQUIRED");
    lease.lost().await;
    say(&format!("LOST {:?}", lease.lost_reason()));
    tokio::time::sleep(Duration::from_secs(60)).await;
}

/// Issue 27 §4: a lock held by another process names it (`lock_state`), and when an operator
/// forces it free the holder's lost signal fires at once, through the revocation channel, not
/// at its next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_holder_in_another_process_is_named_and_told_at_once() {
    let server = RedisServer::start();
    let child = ChildProcess::spawn(ENTRY, "forced", &server.url());
    let acquired_at = Instant::now();
    child.expect_line("ACQUIRED", Duration::from_secs(30));
    let client = connect(&server.url()).await;
    match client.lock_state("forced-child").await.expect("lock_state") {
        distlock::LockState::Held {
            holder: Some(holder),
            ..
        } => assert_eq!(holder.identity, format!("child-{}", child.pid())),
        other => panic!("held by the child, and named: {other:?}"),
    }
    // The child listens on the revocation channel once its watchdog runs: wait until the
    // server has its subscription (a force announced before it would reach nobody).
    let mut conn = server.conn().await;
    let channel = format!("{}:revoked", distlock::DEFAULT_PREFIX);
    until_subscribed(&mut conn, &channel, 1, "children").await;
    let forced_at = Instant::now();
    assert!(
        client
            .force_unlock("forced-child")
            .await
            .expect("force_unlock")
    );
    let left = (acquired_at + FORCED_TTL / 3).saturating_duration_since(Instant::now());
    let line = child.expect_line("LOST", left);
    eprintln!(
        "holder in another process told {:?} after force_unlock was called",
        forced_at.elapsed()
    );
    assert_eq!(line, "LOST Some(NotHeld)");
}

/// The ttl of the leases children hold until the parent kills or freezes them: long enough
/// that a busy machine cannot make the child's renewals miss the deadline before the parent
/// acts (2/3 of it less the margin: ~1.3 s), so only the kill or the freeze ends them.
const HELD_TTL: Duration = Duration::from_secs(2);

/// Takes a lease, then writes to the fenced resource every 20 ms, checking the lease after each
/// write, until it finds the lease lost.
async fn child_fenced(client: Client, url: &str) {
    let mut conn = resource_conn(url).await;
    let lease = client
        .lock("fenced-resource")
        .ttl(HELD_TTL)
        .acquire()
        .await
        .expect("acquire");
    assert!(fenced_write(&mut conn, lease.fence().await.expect("fence")).await);
    say(&format!("ACQUIRED {}", lease.fence().await.expect("fence")));
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        // The write that was in flight when the process froze: only the fence can stop it.
        let accepted = fenced_write(&mut conn, lease.fence().await.expect("fence")).await;
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
    run_children_to_done(
        ENTRY,
        "exclusion",
        &server.url(),
        4,
        Duration::from_secs(240),
    );
    let mut conn = server.conn().await;
    let sections = 4 * PROCESS_TASKS * PROCESS_SECTIONS;
    assert_sections_ran_alone(&mut conn, &[String::new()], sections, false, "").await;
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
    let key = client.__inspect().lock_key("held-by-child").expect("key");
    let gone_by = expires_within_its_ttl(&client, &child, &key).await;
    let lease = client
        .lock("held-by-child")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the waiter gets the lock");
    assert!(
        Instant::now() + Duration::from_millis(1) >= gone_by,
        "the waiter got in before the dead holder's key expired"
    );
    lease.release().await.expect("release");
}

/// Once the holder process is dead (reaped) no renewal of its can come any more: the key's
/// remaining ttl, read then, is at most the ttl, so the key is gone within the ttl. Returns
/// the earliest instant it can expire (a waiter must not get in before).
async fn expires_within_its_ttl(client: &Client, child: &ChildProcess, key: &str) -> Instant {
    child.wait_exit(Duration::from_secs(10));
    let sent = Instant::now();
    let pttl = client
        .__inspect()
        .pttl(key)
        .await
        .expect("pttl")
        .unwrap_or_default();
    assert!(
        pttl <= HELD_TTL,
        "the dead holder's key has {pttl:?} left, more than its ttl"
    );
    // PTTL is in whole milliseconds.
    (sent + pttl)
        .checked_sub(Duration::from_millis(1))
        .unwrap_or(sent)
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
    // The frozen holder's key expires within its ttl; the wait only outlasts a busy machine.
    let lease = client
        .lock("fenced-resource")
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("a new holder gets in while the old one is frozen");
    assert!(lease.fence().await.expect("fence") > old_fence);
    let mut conn = server.conn().await;
    assert!(fenced_write(&mut conn, lease.fence().await.expect("fence")).await);
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

const SEMAPHORE_TASKS: usize = 8;
const SEMAPHORE_ROUNDS: usize = 40;

/// 8 tasks × 40 rounds on a semaphore of 5, counting holders in Redis.
async fn child_permits(client: Client, url: &str) {
    let mut tasks = Vec::new();
    for _ in 0..SEMAPHORE_TASKS {
        let client = client.clone();
        let mut conn = resource_conn(url).await;
        tasks.push(tokio::spawn(async move {
            use redis::AsyncCommands;
            for _ in 0..SEMAPHORE_ROUNDS {
                let lease = client
                    .semaphore("fleet-exports", 5)
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(120))
                    .acquire()
                    .await
                    .expect("acquire");
                let inside: i64 = conn.incr("sem:occupancy", 1).await.expect("incr");
                // The most seen inside at once.
                let _: i64 = redis::Script::new(
                    "local m = tonumber(redis.call('GET', KEYS[1]) or '0') \
                     if tonumber(ARGV[1]) > m then redis.call('SET', KEYS[1], ARGV[1]) end return 0",
                )
                .key("sem:max")
                .arg(inside)
                .invoke_async(&mut conn)
                .await
                .expect("max");
                tokio::time::sleep(Duration::from_micros(rand::random_range(0..4000))).await;
                let _: i64 = conn.decr("sem:occupancy", 1).await.expect("decr");
                assert_eq!(
                    lease.release().await.expect("release"),
                    ReleaseOutcome::Released
                );
            }
        }));
    }
    child::finish_tasks(tasks).await;
}

/// Takes 3 of 5 permits and holds them until killed.
async fn child_permits_hold(client: Client) {
    let lease = client
        .semaphore("killed-holder", 5)
        .ttl(HELD_TTL)
        .acquire_n(3)
        .await
        .expect("acquire");
    say(&format!("ACQUIRED {}", lease.fence().await.expect("fence")));
    tokio::time::sleep(Duration::from_secs(60)).await;
}

/// Takes the one permit, then checks it every 20 ms until it finds it lost (the parent froze
/// this process past its ttl), then releases it.
async fn child_permits_late(client: Client) {
    let lease = client
        .semaphore("frozen-holder", 1)
        .ttl(HELD_TTL)
        .acquire()
        .await
        .expect("acquire");
    say(&format!("ACQUIRED {}", lease.fence().await.expect("fence")));
    while !lease.is_lost() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    say("LOST");
    let outcome = lease.release().await.expect("release");
    say(&format!("RELEASE {outcome:?}"));
}

/// A replica of a job due every second (on the wall clock, with its own skew of up to 300
/// ms) with `at_least` 800 ms, for 6 periods. Each run records its start and end on the
/// server's clock, and counts concurrent runs.
async fn child_job(client: Client, url: &str) {
    use redis::AsyncCommands;
    let mut conn = resource_conn(url).await;
    let skew = Duration::from_millis(rand::random_range(0..300));
    for _ in 0..6 {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis();
        let to_next = 1000 - (now_ms % 1000) as u64;
        tokio::time::sleep(Duration::from_millis(to_next) + skew).await;
        let mut run_conn = conn.clone();
        client
            .job("fleet-job")
            .ttl(Duration::from_millis(300))
            .at_least(Duration::from_millis(800))
            .at_most(Duration::from_secs(5))
            .run(|lease| async move {
                let inside: i64 = run_conn.incr("job:inside", 1).await.expect("incr");
                if inside != 1 {
                    let _: i64 = run_conn.incr("job:overlaps", 1).await.expect("incr");
                }
                let start = server_ms(&mut run_conn).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
                let end = server_ms(&mut run_conn).await;
                let _: i64 = run_conn.decr("job:inside", 1).await.expect("decr");
                let _: i64 = run_conn
                    .rpush(
                        "job:runs",
                        format!("{start} {end} {}", lease.fence().await.expect("fence")),
                    )
                    .await
                    .expect("rpush");
            })
            .await
            .expect("run");
    }
    let _: i64 = conn.incr("job:replicas-done", 1).await.expect("incr");
    say("DONE");
}

/// Runs the job with `at_least` 2 s and a 300 ms ttl; says when the body is done (with the
/// server's time at the start of the run) and then waits to be killed.
async fn child_job_crash(client: Client, url: &str) {
    let mut conn = resource_conn(url).await;
    let start = server_ms(&mut conn).await;
    let _ = client
        .job("crashing-job")
        .ttl(Duration::from_millis(300))
        .at_least(Duration::from_secs(2))
        .run(|_| async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            say(&format!("BODY DONE {start}"));
            // Killed right after the body, before any release could be sent.
            tokio::time::sleep(Duration::from_secs(60)).await;
        })
        .await;
}

/// The server's clock in ms.
async fn server_ms(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.expect("TIME");
    secs * 1000 + micros / 1000
}

/// The issue's semaphore case across processes: 4 processes × 8 tasks on a semaphore of 5;
/// an occupancy counter in Redis never exceeds 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_of_5_across_4_processes() {
    let server = RedisServer::start();
    run_children_to_done(ENTRY, "permits", &server.url(), 4, Duration::from_secs(240));
    let mut conn = server.conn().await;
    use redis::AsyncCommands;
    let most: i64 = conn.get("sem:max").await.expect("max");
    let occupancy: i64 = conn.get("sem:occupancy").await.expect("occupancy");
    assert!(most <= 5, "{most} holders at once on a semaphore of 5");
    assert_eq!(most, 5, "the permits were never all in use");
    assert_eq!(occupancy, 0);
}

/// A holder process of 3 permits is SIGKILLed: its permits come back within its ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_permits_come_back_within_its_ttl() {
    let server = RedisServer::start();
    let child = ChildProcess::spawn(ENTRY, "permits-hold", &server.url());
    child.expect_line("ACQUIRED", Duration::from_secs(30));
    let client = connect(&server.url()).await;
    let two = client
        .semaphore("killed-holder", 5)
        .acquire_n(2)
        .await
        .expect("2 of the 5 are free");
    assert!(matches!(
        client.semaphore("killed-holder", 5).acquire().await,
        Err(LockError::Busy { .. })
    ));
    child.signal(libc::SIGKILL);
    // Once the holder is dead (reaped), none of its renewals can come any more: its three
    // entries (the earliest to expire; ours are 30 s) expire within its ttl of the read.
    child.wait_exit(Duration::from_secs(10));
    let key = client
        .__inspect()
        .semaphore_key("killed-holder")
        .expect("key");
    let mut conn = server.conn().await;
    let now = server_ms(&mut conn).await;
    let entries: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(&key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn)
        .await
        .expect("ZRANGE");
    assert_eq!(entries.len(), 5, "{entries:?}");
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let dead_expiry = entries[2].1 as u64;
    let ttl_ms = u64::try_from(HELD_TTL.as_millis()).expect("ms");
    assert!(
        dead_expiry <= now + ttl_ms,
        "the dead holder's permits live {} ms more, past its ttl",
        dead_expiry.saturating_sub(now)
    );
    let three = client
        .semaphore("killed-holder", 5)
        .wait(Duration::from_secs(10))
        .acquire_n(3)
        .await
        .expect("the killed holder's permits come back");
    assert!(
        server_ms(&mut conn).await >= dead_expiry,
        "the dead holder's permits were given away before they expired"
    );
    three.release().await.expect("release");
    two.release().await.expect("release");
}

/// A holder frozen past its ttl (SIGSTOP) sees its loss when it resumes, and its late release
/// frees nothing of the holder that took the permit meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_holder_sees_its_loss_and_frees_nothing_of_others() {
    let server = RedisServer::start();
    let child = ChildProcess::spawn(ENTRY, "permits-late", &server.url());
    let line = child.expect_line("ACQUIRED", Duration::from_secs(30));
    let old_fence: u64 = line.trim_start_matches("ACQUIRED ").parse().expect("fence");
    child.signal(libc::SIGSTOP);
    let client = connect(&server.url()).await;
    // The frozen holder's permit expires within its ttl; the wait only outlasts a busy
    // machine.
    let lease = client
        .semaphore("frozen-holder", 1)
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the permit comes back while the holder is frozen");
    assert!(lease.fence().await.expect("fence") > old_fence);
    child.signal(libc::SIGCONT);
    child.expect_line("LOST", Duration::from_secs(5));
    let release = child.expect_line("RELEASE", Duration::from_secs(5));
    assert_eq!(release, "RELEASE AlreadyExpired");
    child.wait_success(Duration::from_secs(5));
    let key = client
        .__inspect()
        .semaphore_key("frozen-holder")
        .expect("key");
    assert_eq!(
        client.__inspect().live_entries(&key).await.expect("count"),
        1,
        "the late release took the new holder's permit"
    );
    assert_eq!(
        lease.release().await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// The issue's job case: two processes, due every second with up to 300 ms of skew,
/// `at_least` 800 ms: the body ran once per period and never concurrently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_once_per_period_across_2_processes() {
    let server = RedisServer::start();
    run_children_to_done(ENTRY, "job", &server.url(), 2, Duration::from_secs(60));
    let mut conn = server.conn().await;
    use redis::AsyncCommands;
    let overlaps: Option<i64> = conn.get("job:overlaps").await.expect("overlaps");
    assert_eq!(overlaps.unwrap_or(0), 0, "two runs at once");
    let runs: Vec<String> = conn.lrange("job:runs", 0, -1).await.expect("runs");
    let starts: Vec<u64> = runs
        .iter()
        .map(|r| {
            r.split(' ')
                .next()
                .and_then(|s| s.parse().ok())
                .expect("start")
        })
        .collect();
    // Each replica ticked 6 times within the same seconds (give or take the skew), so each
    // second (period) saw exactly one run: 6 runs, each in its own second and at least
    // at_least apart.
    let periods: std::collections::BTreeSet<u64> = starts.iter().map(|s| s / 1000).collect();
    assert_eq!(
        runs.len(),
        periods.len(),
        "two runs in one period: {runs:?}"
    );
    assert!(
        (5..=7).contains(&runs.len()),
        "{} runs for 6 periods: {runs:?}",
        runs.len()
    );
    assert!(
        starts.windows(2).all(|w| w[1] >= w[0] + 800),
        "runs closer than at_least: {starts:?}"
    );
}

/// A job's process is killed right after its body: the job's key still expires no earlier
/// than `at_least` after the run started, and no other run gets in before then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_right_after_the_body_keeps_at_least() {
    let server = RedisServer::start();
    let child = ChildProcess::spawn(ENTRY, "job-crash", &server.url());
    let line = child.expect_line("BODY DONE", Duration::from_secs(30));
    child.signal(libc::SIGKILL);
    let started: u64 = line
        .trim_start_matches("BODY DONE ")
        .parse()
        .expect("start");
    let client = connect(&server.url()).await;
    let mut conn = server.conn().await;
    let key = client.__inspect().lock_key("crashing-job").expect("key");
    // The server's clock and the key's ttl read in one transaction, at one instant: read
    // in two round trips, the time passing between them made the expiry look earlier than
    // it was.
    let ((secs, micros), pttl): ((u64, u64), i64) = redis::pipe()
        .atomic()
        .cmd("TIME")
        .cmd("PTTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("TIME and PTTL");
    let pttl = u64::try_from(pttl).expect("the key outlives the crash, with an expiry");
    let expires = secs * 1000 + micros / 1000 + pttl;
    // Both ends are whole milliseconds, each truncated once: 1 ms of rounding.
    assert!(
        expires + 1 >= started + 2000,
        "the key expires at {expires}, before at_least ({} ms after the start at {started})",
        2000
    );
    // Another replica skips until then (unless this machine was so slow that the run came
    // after it), and runs after.
    let ran = client
        .job("crashing-job")
        .run(|_| async {})
        .await
        .expect("run");
    assert!(
        ran.is_none() || server_ms(&mut conn).await >= expires,
        "another replica ran the job before at_least had passed"
    );
    while server_ms(&mut conn).await < expires + 20 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        client
            .job("crashing-job")
            .run(|_| async { 1 })
            .await
            .expect("run"),
        Some(1)
    );
}

/// Who is inside the table `db/t` and its rows, kept on the server so that every process
/// sees every other: `enter` counts a violation when the entrant is incompatible with someone
/// inside (a table X with anyone, a table S with a table X or any row, a row X with a table
/// holder or an X on the same row).
static OCCUPANCY: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r"
        local h, op, kind, row = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
        local function get(f) return tonumber(redis.call('HGET', h, f) or '0') end
        if op == 'leave' then
          if kind == 'r' then
            redis.call('HINCRBY', h, 'row:' .. row, -1)
            redis.call('HINCRBY', h, 'rows', -1)
          else
            redis.call('HINCRBY', h, kind, -1)
          end
          return 1
        end
        local tx, ts, rows = get('tx'), get('ts'), get('rows')
        local clash
        if kind == 'tx' then clash = tx + ts + rows > 0
        elseif kind == 'ts' then clash = tx + rows > 0
        else clash = tx + ts + get('row:' .. row) > 0 end
        if clash then redis.call('HINCRBY', h, 'violations', 1) end
        redis.call('HINCRBY', h, 'sections', 1)
        if kind == 'r' then
          redis.call('HINCRBY', h, 'row:' .. row, 1)
          local n = redis.call('HINCRBY', h, 'rows', 1)
          if n > get('most_rows') then redis.call('HSET', h, 'most_rows', n) end
        else
          redis.call('HINCRBY', h, kind, 1)
          redis.call('HINCRBY', h, 'table_sections', 1)
        end
        return 1
        ",
    )
});

const HIERARCHY_ROW_TASKS: usize = 2;
const HIERARCHY_ROW_SECTIONS: usize = 300;
const HIERARCHY_TABLE_SECTIONS: usize = 100;

/// 2 tasks taking X on random rows of `db/t` (300 sections each) and one taking S or X on
/// the table (100 sections), each section recorded on the server.
async fn child_hierarchy(client: Client, url: &str) {
    let mut tasks = Vec::new();
    for task in 0..=HIERARCHY_ROW_TASKS {
        let client = client.clone();
        let mut conn = resource_conn(url).await;
        let table = task == HIERARCHY_ROW_TASKS;
        tasks.push(tokio::spawn(async move {
            let sections = if table {
                HIERARCHY_TABLE_SECTIONS
            } else {
                HIERARCHY_ROW_SECTIONS
            };
            for _ in 0..sections {
                let row = rand::random_range(0..8u32);
                let (path, mode, kind) = if !table {
                    (format!("db/t/{row}"), HierarchyMode::Exclusive, "r")
                } else if rand::random_bool(0.5) {
                    ("db/t".to_owned(), HierarchyMode::Shared, "ts")
                } else {
                    ("db/t".to_owned(), HierarchyMode::Exclusive, "tx")
                };
                let lease = hierarchy::take(&client, path, mode).await;
                for op in ["enter", "leave"] {
                    let _: i64 = OCCUPANCY
                        .key("hier-occupancy")
                        .arg(op)
                        .arg(kind)
                        .arg(row)
                        .invoke_async(&mut conn)
                        .await
                        .expect("record the section");
                    if op == "enter" {
                        tokio::time::sleep(Duration::from_micros(rand::random_range(0..1000)))
                            .await;
                    }
                }
                assert_eq!(
                    lease.release().await.expect("release"),
                    ReleaseOutcome::Released
                );
            }
        }));
    }
    child::finish_tasks(tasks).await;
}

/// TESTPLAN 62 (processes): 4 OS processes mix row holders (X on `db/t/<row>`) and table
/// holders (S and X on `db/t`) over 2,800 critical sections: no table holder overlaps a row
/// holder or a table writer, no two holders of one row overlap; rows do overlap each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hierarchy_rows_and_tables_across_4_processes() {
    let server = RedisServer::start();
    run_children_to_done(
        ENTRY,
        "hierarchy",
        &server.url(),
        4,
        Duration::from_secs(240),
    );
    let mut conn = resource_conn(&server.url()).await;
    let counts: std::collections::HashMap<String, i64> = redis::cmd("HGETALL")
        .arg("hier-occupancy")
        .query_async(&mut conn)
        .await
        .expect("occupancy");
    let count = |field: &str| counts.get(field).copied().unwrap_or(0);
    let rows = 4 * HIERARCHY_ROW_TASKS * HIERARCHY_ROW_SECTIONS;
    let tables = 4 * HIERARCHY_TABLE_SECTIONS;
    assert_eq!(
        count("sections"),
        i64::try_from(rows + tables).expect("small"),
        "{counts:?}"
    );
    assert_eq!(
        count("table_sections"),
        i64::try_from(tables).expect("small"),
        "{counts:?}"
    );
    assert_eq!(
        count("violations"),
        0,
        "incompatible holders overlapped: {counts:?}"
    );
    assert!(count("most_rows") > 1, "rows never overlapped: {counts:?}");
    eprintln!("hierarchy sections across 4 processes: {counts:?}");
}
