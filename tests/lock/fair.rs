//! Fair locks (TESTPLAN 61): granted in the order their waiters arrived, within one process and
//! across processes; a waiter that gives up leaves its place at once, and one that was killed
//! is skipped once its place runs out, never holding the queue up for good.

use std::time::{Duration, Instant};

use distlock::{Client, LockError};
use redis::AsyncCommands;

use crate::support::RedisServer;
use crate::support::child::{self, ChildProcess, say};
use crate::support::fixture::{Fixture, connect, on_both_stores};
use crate::support::server::resource_conn;

/// How long a vanished waiter can keep its place (the library's documented bound).
const CLAIM: Duration = Duration::from_secs(3);
/// How often a queued waiter asks again, at least.
const KEEP_PLACE: Duration = Duration::from_secs(1);

/// Waits until `count` waiters queue for fair lock `name`.
async fn until_queued(client: &Client, name: &str, count: u64) {
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let queued = client.fair_queue_len(name).await.expect("fair_queue_len");
        if queued >= count {
            assert_eq!(queued, count, "more waiters queue than were started");
            return;
        }
        assert!(
            Instant::now() < give_up,
            "{queued} of {count} waiters queued after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A fair lease on `name`, taken without waiting.
async fn fair_holder(client: &Client, name: &str) -> distlock::Lease {
    client
        .lock(name)
        .fair()
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("a fair holder of {name}: {e}"))
}

/// A task that waits up to `wait` for fair lock `name`.
fn fair_waiter(
    client: &Client,
    name: &'static str,
    wait: Duration,
) -> tokio::task::JoinHandle<Result<distlock::Lease, LockError>> {
    let client = client.clone();
    tokio::spawn(async move { client.lock(name).fair().wait(wait).acquire().await })
}

/// Waits until nobody queues for `name`, which must happen before the place of a waiter that
/// left at `left` (and asked last at most KEEP_PLACE before) would have run out.
async fn until_left(client: &Client, name: &str, left: Instant) {
    let by_claim = left + CLAIM - KEEP_PLACE;
    while client.fair_queue_len(name).await.expect("len") > 0 {
        assert!(
            Instant::now() < by_claim,
            "a waiter of {name} kept its place after it left"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Ten waiters of one process, started one after the other while the lock is held, get it in
/// the order they started.
async fn granted_in_arrival_order(f: Fixture) {
    let client = &f.client;
    let held = fair_holder(client, "fair:order").await;
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..10u64 {
        let (waiting, order) = (client.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let lease = waiting
                .lock("fair:order")
                .fair()
                .wait(Duration::from_secs(60))
                .acquire()
                .await
                .expect("a waiter is granted in its turn");
            order.lock().expect("order").push(i);
            lease.release().await.expect("release");
        }));
        until_queued(client, "fair:order", i + 1).await;
    }
    held.release().await.expect("release");
    for waiter in waiters {
        waiter.await.expect("waiter");
    }
    assert_eq!(*order.lock().expect("order"), (0..10).collect::<Vec<_>>());
    assert_eq!(client.fair_queue_len("fair:order").await.expect("len"), 0);
}

/// While anyone queues, an acquire that does not wait is refused, free lock or not; with
/// nobody queueing it takes the lock as a plain acquire would.
async fn a_newcomer_never_jumps_the_queue(f: Fixture) {
    let client = &f.client;
    let held = fair_holder(client, "fair:jump").await;
    let waiter = fair_waiter(client, "fair:jump", Duration::from_secs(30));
    until_queued(client, "fair:jump", 1).await;
    assert!(matches!(
        client.lock("fair:jump").fair().acquire().await,
        Err(LockError::Busy { .. })
    ));
    held.release().await.expect("release");
    // Free, or already the waiter's: either way not the newcomer's.
    assert!(matches!(
        client.lock("fair:jump").fair().acquire().await,
        Err(LockError::Busy { .. })
    ));
    let lease = waiter.await.expect("task").expect("the waiter is granted");
    lease.release().await.expect("release");
    let again = client
        .lock("fair:jump")
        .fair()
        .acquire()
        .await
        .expect("nobody queues");
    again.release().await.expect("release");
}

/// A waiter whose wait runs out leaves its place at once (not when its claim runs out), so
/// the lock is free for the next acquire.
async fn a_waiter_that_gives_up_leaves_at_once(f: Fixture) {
    let client = &f.client;
    let held = fair_holder(client, "fair:leave").await;
    let gave_up = client
        .lock("fair:leave")
        .fair()
        .wait(Duration::from_millis(200))
        .acquire()
        .await;
    assert!(
        matches!(gave_up, Err(LockError::Timeout { .. })),
        "{gave_up:?}"
    );
    until_left(client, "fair:leave", Instant::now()).await;
    held.release().await.expect("release");
    let next = client
        .lock("fair:leave")
        .fair()
        .acquire()
        .await
        .expect("nobody queues");
    next.release().await.expect("release");
}

/// A dropped acquire future leaves its place too.
async fn a_dropped_waiter_leaves_its_place(f: Fixture) {
    let client = &f.client;
    let held = fair_holder(client, "fair:drop").await;
    let waiter = fair_waiter(client, "fair:drop", Duration::MAX);
    until_queued(client, "fair:drop", 1).await;
    waiter.abort();
    until_left(client, "fair:drop", Instant::now()).await;
    held.release().await.expect("release");
}

on_both_stores!(
    a_newcomer_never_jumps_the_queue,
    a_waiter_that_gives_up_leaves_at_once,
    a_dropped_waiter_leaves_its_place,
);

// On a Cluster too: the queue sits in the lock's slot, and the order holds.
on_both_stores!(on_a_cluster_too: granted_in_arrival_order);

/// A Redlock quorum refuses fair locks with a typed error, at the acquire and the read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_refuses_fair_locks() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let client = Client::connect_quorum(urls).await.expect("quorum");
    assert!(matches!(
        client.lock("fair:quorum").fair().acquire().await,
        Err(LockError::UnsupportedStore { .. })
    ));
    assert!(matches!(
        client.fair_queue_len("fair:quorum").await,
        Err(LockError::UnsupportedStore { .. })
    ));
    // A plain lock of the same name still runs there.
    let plain = client.lock("fair:quorum").acquire().await;
    plain.expect("plain lock").release().await.expect("release");
}

const CHILDREN: u64 = 3;
const PER_CHILD: u64 = 20;

/// A child's waiters: it takes turn numbers from its list (`fair:turns:<n>`) as the parent
/// hands them out, starts one waiter per turn, and each waiter, once granted, appends its
/// turn to `fair:granted`.
pub(crate) async fn child_fair_waiters(client: Client, url: &str, index: &str) {
    let mut conn = resource_conn(url).await;
    let turns = format!("fair:turns:{index}");
    let mut tasks = Vec::new();
    while tasks.len() < PER_CHILD as usize {
        let turn: Option<u64> = conn.lpop(&turns, None).await.expect("lpop");
        let Some(turn) = turn else {
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        };
        let (client, mut conn) = (client.clone(), conn.clone());
        tasks.push(tokio::spawn(async move {
            let lease = client
                .lock("fair:processes")
                .fair()
                .wait(Duration::from_secs(120))
                .acquire()
                .await
                .expect("granted in its turn");
            let _: u64 = conn.rpush("fair:granted", turn).await.expect("rpush");
            tokio::time::sleep(Duration::from_millis(2)).await;
            lease.release().await.expect("release");
        }));
    }
    child::finish_tasks(tasks).await;
}

/// TESTPLAN 61: waiters of 3 processes, 20 each, arrive in an order the test records (each
/// one queued before the next starts, its process picked at random); they are granted in
/// exactly that order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_three_processes_are_granted_in_arrival_order() {
    let server = RedisServer::start();
    let url = server.url();
    let children: Vec<ChildProcess> = (0..CHILDREN)
        .map(|i| ChildProcess::spawn(super::processes::ENTRY, &format!("fair-waiters-{i}"), &url))
        .collect();
    let client = connect(&url).await;
    let mut conn = server.conn().await;
    let held = fair_holder(&client, "fair:processes").await;
    let mut left = [PER_CHILD; CHILDREN as usize];
    for turn in 0..CHILDREN * PER_CHILD {
        let mut pick = rand::random_range(0..CHILDREN as usize);
        while left[pick] == 0 {
            pick = (pick + 1) % CHILDREN as usize;
        }
        left[pick] -= 1;
        let _: u64 = conn
            .rpush(format!("fair:turns:{pick}"), turn)
            .await
            .expect("rpush");
        until_queued(&client, "fair:processes", turn + 1).await;
    }
    held.release().await.expect("release");
    for child in &children {
        child.expect_line("DONE", Duration::from_secs(180));
    }
    for child in children {
        child.wait_success(Duration::from_secs(10));
    }
    let granted: Vec<u64> = conn.lrange("fair:granted", 0, -1).await.expect("lrange");
    assert_eq!(granted, (0..CHILDREN * PER_CHILD).collect::<Vec<_>>());
}

/// A child that queues one waiter for `fair:killed`, says so, and waits to be killed.
pub(crate) async fn child_fair_one(client: Client) {
    let waiter = tokio::spawn(async move {
        client
            .lock("fair:killed")
            .fair()
            .wait_forever()
            .acquire()
            .await
    });
    say("STARTED");
    let _ = waiter.await;
}

/// TESTPLAN 61: a waiter killed while first in line holds the queue up only until its place
/// runs out: the next waiter gets the lock after that (never before: its place was real) and
/// within the documented bound of the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_is_skipped_within_its_claim() {
    let server = RedisServer::start();
    let client = connect(&server.url()).await;
    let held = fair_holder(&client, "fair:killed").await;
    let child = ChildProcess::spawn(super::processes::ENTRY, "fair-one", &server.url());
    child.expect_line("STARTED", Duration::from_secs(30));
    until_queued(&client, "fair:killed", 1).await;
    let next = tokio::spawn({
        let client = client.clone();
        async move {
            let lease = client
                .lock("fair:killed")
                .fair()
                .wait(Duration::from_secs(60))
                .acquire()
                .await;
            (lease, Instant::now())
        }
    });
    until_queued(&client, "fair:killed", 2).await;
    child.signal(libc::SIGKILL);
    let killed = Instant::now();
    child.wait_exit(Duration::from_secs(10));
    // The dead waiter's place, as the store keeps it: when it runs out (server ms).
    let mut conn = server.conn().await;
    let prefix = distlock::DEFAULT_PREFIX;
    let first: Vec<String> = conn
        .zrange(format!("{prefix}:fair-queue:{{fair:killed}}"), 0, 0)
        .await
        .expect("zrange");
    let dead = first.first().expect("the dead waiter is first").clone();
    let runs_out: f64 = conn
        .zscore(format!("{prefix}:fair-claims:{{fair:killed}}"), &dead)
        .await
        .expect("zscore");
    held.release().await.expect("release");
    let (lease, granted_at) = next.await.expect("task");
    let lease = lease.expect("the next waiter is granted once the dead one's place runs out");
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut conn)
        .await
        .expect("time");
    let server_ms = (secs * 1000 + micros / 1000) as f64;
    assert!(
        server_ms >= runs_out,
        "granted at {server_ms} ms, before the dead waiter's place ran out at {runs_out} ms"
    );
    let waited = granted_at.duration_since(killed);
    eprintln!("the next waiter got the lock {waited:?} after the first one was killed");
    // Its place runs out at most CLAIM after its last ask; the next waiter asks at least
    // every KEEP_PLACE (and is woken by nothing here); one more second for a busy machine.
    assert!(
        waited <= CLAIM + KEEP_PLACE + Duration::from_secs(1),
        "the dead waiter held the queue up {waited:?}"
    );
    lease.release().await.expect("release");
}

#[distlock::distributed_lock(key = "fair:macro", fair = true, wait = "30s", client = client)]
async fn fairly_locked(client: &Client) -> Result<(), LockError> {
    Ok(())
}

/// `#[distributed_lock(fair = true)]` and `LockLayer::builder(..).fair(true)` wait in the
/// queue (a plain waiter would not be counted there).
async fn the_macro_and_the_layer_queue_fairly(f: Fixture) {
    use distlock_tower::extract::Constant;
    use distlock_tower::lock::LockLayer;
    use tower::{Layer as _, ServiceExt as _};

    let client = &f.client;
    let held = fair_holder(client, "fair:macro").await;
    let call = tokio::spawn({
        let client = client.clone();
        async move { fairly_locked(&client).await }
    });
    until_queued(client, "fair:macro", 1).await;
    held.release().await.expect("release");
    call.await
        .expect("task")
        .expect("the macro's call runs in its turn");

    let layer = LockLayer::builder(client.clone(), Constant::from_static("fair-route"))
        .namespace("fairhttp")
        .fair(true)
        .wait(Duration::from_secs(30))
        .build()
        .expect("a fair lock layer");
    let held = fair_holder(client, "fairhttp/fair-route").await;
    let service = layer.layer(tower::service_fn(|_req: http::Request<String>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
    }));
    let request = tokio::spawn(service.oneshot(http::Request::new(String::new())));
    until_queued(client, "fairhttp/fair-route", 1).await;
    held.release().await.expect("release");
    let response = request.await.expect("task").expect("infallible");
    assert_eq!(response.status(), http::StatusCode::OK);
}

on_both_stores!(the_macro_and_the_layer_queue_fairly);
