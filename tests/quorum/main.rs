//! Redlock on five real, independent `redis-server` processes (TESTPLAN 13 and 35–37): a
//! minority of nodes killed or frozen, a majority killed, a node that restarts empty while it
//! holds a grant, a paused holder, processes, and the faces of the library on a quorum.

/// `#[distributed_lock]` on a quorum client (shared with the Cluster suite).
#[path = "../support/macro_lock.rs"]
mod macro_lock;
#[path = "../support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use distlock::ratelimit::{Policy, Rate};
use distlock::{Client, Lease, LockError, RateLimitError, ReleaseOutcome, StoreError};
use redis::AsyncCommands as _;

use support::RedisServer;
use support::child::{self, ChildProcess, run_children_to_done, say};
use support::lateness::LatenessProbe;
use support::sections::{
    assert_sections_ran_alone, bump_counter_and_leave, enter_section, write_fenced,
};
use support::server::resource_conn;

mod capabilities;
mod clocks;
mod counting;
mod election;
mod healing;
mod health;
mod members;

const NODES: usize = 5;

/// Five independent primaries.
fn start_nodes() -> Vec<RedisServer> {
    (0..NODES).map(|_| RedisServer::start()).collect()
}

fn urls(nodes: &[RedisServer]) -> Vec<String> {
    nodes.iter().map(RedisServer::url).collect()
}

/// How long one node may take to answer, in the tests that are not about that timeout. The
/// library's default (ttl/10, at most 50 ms) is shorter than a busy machine makes a node's
/// answer: a node late past it counts as failed for that round, and with three late there is
/// no majority (the README's limits). `a_frozen_node_costs_at_most_the_per_node_timeout`
/// tests the timeout itself.
const NODE_TIMEOUT: Duration = Duration::from_secs(1);

/// A quorum client; `quarantine` is how long a node that lost its data sits out.
async fn quorum(nodes: &[RedisServer], quarantine: Duration) -> Client {
    Client::builder()
        // Above the node timeout: an acquire waits for a frozen node up to the node timeout,
        // and with both at 1 s one with two nodes frozen timed out as a whole.
        .response_timeout(NODE_TIMEOUT * 3)
        .quorum_node_timeout(NODE_TIMEOUT)
        .restart_quarantine(quarantine)
        .connect_quorum(urls(nodes))
        .await
        .unwrap_or_else(|e| panic!("connect_quorum: {e}"))
}

/// Lock `name` of `client`, acquired with `ttl` without waiting; panics with `what` if it is
/// not granted.
async fn held_for(client: &Client, name: &str, ttl: Duration, what: &str) -> Lease {
    client.lock(name).ttl(ttl).acquire().await.expect(what)
}

/// Lock `name` of `client`, waited for up to `wait`; panics with `what` if it is not granted.
async fn waited_for(client: &Client, name: &str, wait: Duration, what: &str) -> Lease {
    client.lock(name).wait(wait).acquire().await.expect(what)
}

/// How many nodes hold lock `name` right now (any holder).
async fn copies(nodes: &[RedisServer], client: &Client, name: &str) -> usize {
    let key = client.__inspect().lock_key(name).expect("name");
    let mut n = 0;
    for node in nodes.iter().filter(|n| n.is_running()) {
        let mut conn = node.conn().await;
        let exists: bool = conn.exists(&key).await.expect("EXISTS");
        n += usize::from(exists);
    }
    n
}

/// TESTPLAN 13 and 35: with two of five nodes killed, every acquisition succeeds, with its
/// validity within (0, ttl); with three killed, every acquisition fails within its wait with
/// an error that names the dead nodes, and leaves no copy on the live ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_down_is_fine_a_majority_down_fails_cleanly() {
    let mut nodes = start_nodes();
    let client = quorum(&nodes, Duration::from_secs(30)).await;
    let ttl = Duration::from_secs(2);
    nodes[3].kill();
    nodes[4].kill();
    for i in 0..50 {
        let name = format!("minority:{i}");
        let asked = Instant::now();
        let lease = client
            .lock(&name)
            .ttl(ttl)
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("acquire with two nodes down: {e}"));
        let validity = lease.valid_for();
        assert!(
            validity > Duration::ZERO && validity < ttl,
            "validity {validity:?} after {:?}",
            asked.elapsed()
        );
        assert_eq!(copies(&nodes, &client, &name).await, 3);
        assert_eq!(
            lease.release().await.expect("release"),
            ReleaseOutcome::Released
        );
        assert_eq!(copies(&nodes, &client, &name).await, 0);
    }
    nodes[2].kill();
    let dead: Vec<String> = nodes[2..].iter().map(|n| n.addr().to_string()).collect();
    let probe = LatenessProbe::start();
    for i in 0..10 {
        let name = format!("majority:{i}");
        let mark = probe.mark();
        let asked = Instant::now();
        let result = client
            .lock(&name)
            .ttl(ttl)
            .wait(Duration::from_millis(500))
            .acquire()
            .await;
        let took = asked.elapsed();
        match result {
            Err(LockError::Store(StoreError::NoQuorum {
                nodes: 5,
                needed: 3,
                failures,
            })) => {
                let named: Vec<&str> = failures.iter().map(|f| f.node.as_str()).collect();
                for node in &dead {
                    assert!(
                        named.contains(&node.as_str()),
                        "{node} not named in {named:?}"
                    );
                }
                let message = LockError::Store(StoreError::NoQuorum {
                    nodes: 5,
                    needed: 3,
                    failures: failures.clone(),
                })
                .to_string();
                assert!(message.contains(&dead[0]), "{message}");
            }
            other => panic!("acquire with three nodes down: expected NoQuorum, got {other:?}"),
        }
        // Within its 500 ms wait plus one 1 s response timeout, give or take how late this
        // runtime ran its timers meanwhile (they are timers: the README's limits).
        let late = probe.since(mark);
        assert!(
            took < Duration::from_millis(1500) + late,
            "took {took:?} (timers {late:?} late meanwhile)"
        );
        assert_eq!(
            copies(&nodes, &client, &name).await,
            0,
            "a partial grant was left"
        );
    }
    // Rate limits are refused on a quorum client when the limiter is built, whatever the
    // outage policy (TESTPLAN 44): never one error per request.
    let built = client
        .rate_limiter(Policy::gcra("api", Rate::per_second(5).expect("rate")).expect("policy"))
        .on_outage(distlock::ratelimit::Outage::FailOpen)
        .build();
    assert!(
        matches!(built, Err(RateLimitError::UnsupportedStore { .. })),
        "{built:?}"
    );
    // So are Bloom filters, when opened.
    assert!(matches!(
        client.bloom_filter("seen").expected_items(10).open().await,
        Err(distlock::BloomError::UnsupportedStore { .. })
    ));
}

/// TESTPLAN 35: one node frozen longer than the per-node timeout: acquires and releases still
/// take about that timeout at most (not the 3 s response timeout, or half of it), and the
/// watchdog keeps leases on the remaining majority.
///
/// The per-node timeout is 250 ms, not a few milliseconds: a live node of a busy machine can
/// take longer than that to answer, and it then (rightly) counts as failed for that round;
/// with four of five live, a majority needs three of them on time. Each acquire and release
/// is allowed the per-node timeout plus 150 ms of work plus how late this runtime ran its
/// timers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_node_costs_at_most_the_per_node_timeout() {
    const NODE_TIMEOUT: Duration = Duration::from_millis(250);
    let nodes = start_nodes();
    let client = Client::builder()
        .response_timeout(Duration::from_secs(3))
        .quorum_node_timeout(NODE_TIMEOUT)
        .connect_quorum(urls(&nodes))
        .await
        .expect("connect");
    let _frozen = nodes[0].stop_guard();
    let probe = LatenessProbe::start();
    let mut leases = Vec::new();
    for i in 0..20 {
        let mark = probe.mark();
        let asked = Instant::now();
        let lease = client
            .lock(format!("frozen:{i}"))
            // Renewals through the quorum every second; ~1.9 s of slack before a late one
            // loses the lease.
            .ttl(Duration::from_secs(3))
            .acquire()
            .await
            .expect("acquire with one node frozen");
        let (took, late) = (asked.elapsed(), probe.since(mark));
        assert!(
            took < NODE_TIMEOUT + Duration::from_millis(150) + late,
            "an acquire took {took:?} with a {NODE_TIMEOUT:?} per-node timeout (timers {late:?} \
             late meanwhile)"
        );
        leases.push(lease);
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for lease in &leases {
        assert!(!lease.is_lost(), "lost: {:?}", lease.lost_reason());
    }
    // A release waits for the frozen node the per-node timeout after the majority released,
    // not half the response timeout (1.5 s).
    for lease in leases {
        let mark = probe.mark();
        let asked = Instant::now();
        assert_eq!(
            lease.release().await.expect("release with one node frozen"),
            ReleaseOutcome::Released
        );
        let (took, late) = (asked.elapsed(), probe.since(mark));
        assert!(
            took < NODE_TIMEOUT + Duration::from_millis(150) + late,
            "a release took {took:?} with a {NODE_TIMEOUT:?} per-node timeout (timers {late:?} \
             late meanwhile)"
        );
    }
}

/// TESTPLAN 37: a lease is granted on nodes {1,2,3} (4 and 5 frozen); node 3 restarts empty
/// (no persistence: it forgot the grant). While the first lease is valid, no second holder is
/// granted through {3,4,5}: node 3 sits out for the quarantine, for the client that saw it
/// before and for a client that connects afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_restarts_empty_does_not_vote_for_a_second_holder() {
    // Renewed every 2 s: node 3 restarts right after a renewal, so the lease stays valid for
    // most of 2 s (until the next renewal finds too few copies), long enough for a few tries
    // on a busy machine. The quarantine outlasts the ttl, as it must.
    const TTL: Duration = Duration::from_secs(6);
    let mut nodes = start_nodes();
    let quarantine = Duration::from_secs(8);
    let a = quorum(&nodes, quarantine).await;
    let b = quorum(&nodes, quarantine).await;
    // Let the nodes' boot values age past the quarantine, as in a long-running deployment.
    tokio::time::sleep(quarantine + Duration::from_millis(200)).await;
    let lease = {
        let _four = nodes[3].stop_guard();
        let _five = nodes[4].stop_guard();
        a.lock("restart")
            .ttl(TTL)
            .acquire()
            .await
            .expect("granted on nodes 1-3")
    };
    // Minted at once, while the lease holds its copies.
    let first_fence = lease.fence().await.expect("fence");
    let renewals = a.__inspect().renewal_calls();
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.__inspect().renewal_calls() == renewals {
        assert!(Instant::now() < deadline, "the lease was never renewed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The frozen nodes ran the acquire's `SET NX` once they resumed (a straggler's grant),
    // and a renewal that finds a majority extends or heals the copies on them: take those
    // copies away right after a renewal, so that the lease holds exactly the three it was
    // granted on until its next renewal (which then finds too few to heal anything). The
    // renewal is counted when sent: let it and its healing (bounded by the 50 ms per-node
    // timeout) finish first, well before the next renewal 2 s on.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let key = a.__inspect().lock_key("restart").expect("name");
    for node in &nodes[3..] {
        let mut conn = node.conn().await;
        let _: i64 = conn.del(&key).await.expect("DEL");
    }
    assert_eq!(copies(&nodes, &a, "restart").await, 3);
    nodes[2].restart();
    // A client that connects now has never seen node 3; it finds its boot value new.
    let c = quorum(&nodes, quarantine).await;
    // As long as the first lease is valid, nobody else may be granted the lock. (Its next
    // renewal finds only two copies, on nodes 1 and 2: not a majority, so it is reported
    // lost, which is Redlock's rule.)
    let mut tries = 0;
    let lost_by = Instant::now() + TTL + Duration::from_secs(10);
    while !lease.is_lost() {
        assert!(
            Instant::now() < lost_by,
            "the first lease, down to two copies, was never reported lost"
        );
        tries += 1;
        for (who, client) in [("b", &b), ("c", &c)] {
            match client.lock("restart").ttl(TTL).acquire().await {
                Err(LockError::Busy { .. }) => {}
                Ok(second) => panic!(
                    "client {who} was granted the lock (fence {:?}) while the first lease \
                     (fence {first_fence}) is valid: node 3 voted after forgetting its grant",
                    second.fence().await,
                ),
                Err(other) => panic!("client {who}: {other}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        tries >= 2,
        "only {tries} tries while the first lease was valid"
    );
    assert_eq!(lease.lost_reason(), Some(distlock::LossReason::NotHeld));
    // While the first lease's copies live on nodes 1 and 2 and node 3 sits out, nodes 4 and 5
    // alone cannot grant the lock either.
    assert!(matches!(
        c.lock("restart").acquire().await,
        Err(LockError::Busy { .. })
    ));
    lease.release().await.expect("release");
    // Free on 1, 2, 4 and 5: a majority without node 3.
    let second = waited_for(
        &b,
        "restart",
        Duration::from_secs(5),
        "granted once the first is released",
    )
    .await;
    assert!(second.fence().await.expect("fence") > first_fence);
    second.release().await.expect("release");
}

/// The entry test of the child processes.
const ENTRY: &str = "child_entry";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as a child process of the tests in this binary"]
async fn child_entry() {
    let Some((role, urls)) = child::role() else {
        return;
    };
    let mut urls: Vec<&str> = urls.split(',').collect();
    // The last URL is the resource's server; the others are the quorum.
    let resource = urls.pop().expect("resource url");
    let client = Client::builder()
        .quorum_node_timeout(NODE_TIMEOUT)
        .connect_quorum(&urls)
        .await
        .expect("connect_quorum");
    match role.as_str() {
        "exclusion" => child_exclusion(client, resource).await,
        "fenced" => child_fenced(client, resource).await,
        other => panic!("unknown child role {other}"),
    }
}

/// A write accepted only with a fence above the last one.
const FENCED_WRITE: &str = r"
    local last = tonumber(redis.call('GET', KEYS[1]) or '0')
    if tonumber(ARGV[1]) <= last then return 0 end
    redis.call('SET', KEYS[1], ARGV[1])
    return 1
";

async fn child_exclusion(client: Client, resource: &str) {
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let client = client.clone();
        let mut conn = resource_conn(resource).await;
        tasks.push(tokio::spawn(async move {
            let fenced = redis::Script::new(FENCED_WRITE);
            for _ in 0..100 {
                let lease =
                    waited_for(&client, "processes", Duration::from_secs(60), "acquire").await;
                enter_section(&mut conn, "").await;
                write_fenced(
                    &mut conn,
                    &fenced,
                    "fence-seen",
                    lease.fence().await.expect("fence"),
                )
                .await;
                bump_counter_and_leave(&mut conn, "", 500).await;
                // A starved machine can leave every node without an answer within the node
                // timeout (seen at load 14): the release then fails, transiently, and the
                // lock frees at its ttl, within the others' wait. Exclusion is what is
                // checked; a release that reached the nodes must have found the lease.
                match lease.release().await {
                    Ok(outcome) => assert_eq!(outcome, ReleaseOutcome::Released),
                    Err(LockError::Store(err)) if err.is_transient() => {}
                    Err(err) => panic!("release: {err}"),
                }
            }
        }));
    }
    child::finish_tasks(tasks).await;
}

/// Takes a lease, writes to the fenced resource every 20 ms until it finds the lease lost.
async fn child_fenced(client: Client, resource: &str) {
    let mut conn = resource_conn(resource).await;
    let fenced = redis::Script::new(FENCED_WRITE);
    // The resource's answer to a write under the lease's fence (1: accepted).
    let write = async |conn: &mut redis::aio::MultiplexedConnection, lease: &Lease| -> i64 {
        fenced
            .key("paused-resource")
            .arg(lease.fence().await.expect("fence"))
            .invoke_async(conn)
            .await
            .expect("write")
    };
    // Renewed every 700 ms through the quorum; long enough that a busy machine does not lose
    // it before the parent freezes this process.
    let lease = held_for(&client, "paused", Duration::from_secs(2), "acquire").await;
    let accepted = write(&mut conn, &lease).await;
    assert_eq!(accepted, 1);
    say(&format!("ACQUIRED {}", lease.fence().await.expect("fence")));
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let accepted = write(&mut conn, &lease).await;
        if lease.is_lost() {
            say(&format!("LOST accepted={}", accepted == 1));
            break;
        }
        if accepted != 1 {
            say("REJECTED while the lease looked valid");
            break;
        }
    }
}

/// TESTPLAN 13 with processes: 4 OS processes × 4 tasks on one name through a 5-node quorum:
/// never two inside, no lost update, every fenced write accepted (fences strictly increase in
/// grant order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_across_4_processes() {
    let nodes = start_nodes();
    let resource = RedisServer::start();
    let mut all = urls(&nodes);
    all.push(resource.url());
    let all = all.join(",");
    run_children_to_done(ENTRY, "exclusion", &all, 4, Duration::from_secs(240));
    let mut conn = resource.conn().await;
    assert_sections_ran_alone(&mut conn, &[String::new()], 4 * 4 * 100, true, "").await;
}

/// A holder process paused past its ttl (SIGSTOP): a second holder gets the lock with a
/// greater fence, the resource refuses the paused one's late write, and it sees its loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_is_fenced_off() {
    let nodes = start_nodes();
    let resource = RedisServer::start();
    let mut all = urls(&nodes);
    all.push(resource.url());
    let child = ChildProcess::spawn(ENTRY, "fenced", &all.join(","));
    let line = child.expect_line("ACQUIRED", Duration::from_secs(30));
    let first: u64 = line.trim_start_matches("ACQUIRED ").parse().expect("fence");
    child.signal(libc::SIGSTOP);
    let client = quorum(&nodes, Duration::from_secs(30)).await;
    // The paused holder's 2 s ttl runs out; the wait only outlasts a busy machine.
    let second = waited_for(
        &client,
        "paused",
        Duration::from_secs(10),
        "granted once the paused holder's ttl ran out",
    )
    .await;
    assert!(
        second.fence().await.expect("fence") > first,
        "fence {} after {first}",
        second.fence().await.expect("fence")
    );
    let mut conn = resource.conn().await;
    let accepted: i64 = redis::Script::new(FENCED_WRITE)
        .key("paused-resource")
        .arg(second.fence().await.expect("fence"))
        .invoke_async(&mut conn)
        .await
        .expect("write");
    assert_eq!(accepted, 1);
    child.signal(libc::SIGCONT);
    let line = child.expect_line("LOST", Duration::from_secs(10));
    assert!(
        line.contains("accepted=false"),
        "the paused holder's write got in: {line}"
    );
    second.release().await.expect("release");
}

/// Waiting with wake-ups, the macro and the lock layer on a quorum client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_through_every_node() {
    let nodes = start_nodes();
    let a = quorum(&nodes, Duration::from_secs(30)).await;
    let b = quorum(&nodes, Duration::from_secs(30)).await;
    // A waiter that missed the release sleeps until the holder's key would expire: with a
    // 60 s ttl renewed every 20 s, tens of seconds. Woken by the release message, it takes a
    // round trip or two; 5 s tells the two apart with room for a busy machine.
    const HOLDER_TTL: Duration = Duration::from_secs(60);
    const WOKEN_WITHIN: Duration = Duration::from_secs(5);
    let holder = held_for(&a, "woken", HOLDER_TTL, "acquire").await;
    let done = Arc::new(AtomicBool::new(false));
    let waiter = tokio::spawn({
        let done = done.clone();
        async move {
            let lease = waited_for(&b, "woken", HOLDER_TTL, "waiter").await;
            done.store(true, Ordering::SeqCst);
            (Instant::now(), lease)
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!done.load(Ordering::SeqCst));
    let released = Instant::now();
    holder.release().await.expect("release");
    let (got, lease) = waiter.await.expect("waiter task");
    assert!(
        got - released < WOKEN_WITHIN,
        "the waiter got the lock {:?} after the release, not at once",
        got - released
    );
    lease.release().await.expect("release");
}

/// The macro and the lock layer run unchanged on a quorum client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_macro_and_the_lock_layer_run_on_a_quorum() {
    use axum::Router;
    use axum::body::Body;
    use distlock_tower::extract::{PathSegment, Prefixed};
    use distlock_tower::lock::LockLayer;
    use http::{Request, StatusCode};
    use tower::ServiceExt as _;

    let nodes = start_nodes();
    let client = quorum(&nodes, Duration::from_secs(30)).await;
    macro_lock::the_macro_serialises_calls(&client, 4, 15).await;

    let app = Router::new()
        .route("/orders/{id}", axum::routing::post(|| async { "settled" }))
        .route_layer(LockLayer::new(
            client.clone(),
            Prefixed::new("order:", PathSegment(1)),
        ));
    let request = || {
        Request::post("/orders/7")
            .body(Body::empty())
            .expect("request")
    };
    let ok = app.clone().oneshot(request()).await.expect("infallible");
    assert_eq!(ok.status(), StatusCode::OK);
    axum::body::to_bytes(ok.into_body(), 1024)
        .await
        .expect("body");
    let held = client
        .lock("http/order:7")
        .acquire()
        .await
        .expect("acquire");
    let busy = app.oneshot(request()).await.expect("infallible");
    assert_eq!(busy.status(), StatusCode::LOCKED);
    held.release().await.expect("release");
}

/// Semaphores, read-write and hierarchical locks are refused on a quorum with a typed error (majorities do
/// not bound how many hold at once), without a round trip; a multi-lock takes its locks one
/// Redlock acquire at a time, all or nothing; a job keeps `at_least` on a majority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primitives_on_a_quorum() {
    let nodes = start_nodes();
    let client = quorum(&nodes, Duration::from_secs(30)).await;
    let err = client
        .semaphore("exports", 3)
        .acquire()
        .await
        .expect_err("no semaphores on a quorum");
    assert!(
        matches!(err, LockError::UnsupportedStore { .. }) && err.to_string().contains("quorum"),
        "{err}"
    );
    let err = client.rw_lock("doc").read().await.expect_err("no rw locks");
    assert!(matches!(err, LockError::UnsupportedStore { .. }), "{err}");
    let err = client
        .rw_lock("doc")
        .write()
        .await
        .expect_err("no rw locks");
    assert!(matches!(err, LockError::UnsupportedStore { .. }), "{err}");
    let err = client
        .hierarchy_lock("db/orders/42")
        .exclusive()
        .await
        .expect_err("no hierarchical locks");
    assert!(matches!(err, LockError::UnsupportedStore { .. }), "{err}");
    let keys = client.__inspect().keys().await.expect("keys");
    assert!(
        keys.iter().all(|k| k.ends_with(":boot")),
        "a refused primitive wrote {keys:?}"
    );

    let held = client.lock("b").acquire().await.expect("b");
    let err = client
        .multi_lock(["a", "b", "c"])
        .acquire()
        .await
        .expect_err("b is held");
    assert!(
        matches!(err, LockError::Busy { ref name, .. } if name == "b"),
        "{err}"
    );
    assert_eq!(copies(&nodes, &client, "a").await, 0, "a was left taken");
    assert_eq!(copies(&nodes, &client, "c").await, 0, "c was left taken");
    held.release().await.expect("release");
    let multi = client
        .multi_lock(["a", "b", "c"])
        .acquire()
        .await
        .expect("all three");
    for name in ["a", "b", "c"] {
        assert_eq!(copies(&nodes, &client, name).await, NODES);
    }
    for outcome in multi.release().await.expect("release") {
        assert_eq!(outcome, ReleaseOutcome::Released);
    }

    const AT_LEAST: Duration = Duration::from_millis(600);
    let job = || {
        client
            .job("nightly")
            .ttl(Duration::from_secs(2))
            .at_least(AT_LEAST)
    };
    let started = Instant::now();
    assert_eq!(job().run(|_| async { 1 }).await.expect("run"), Some(1));
    // Skipped within at_least (counted against the library only if the answer came before
    // at_least had passed: a busy machine may get there later), and run again after it.
    let second = job().run(|_| async { 2 }).await.expect("run");
    assert!(
        second.is_none() || Instant::now() >= started + AT_LEAST,
        "ran twice within at_least"
    );
    tokio::time::sleep_until((started + AT_LEAST).into()).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while job().run(|_| async { 3 }).await.expect("run") != Some(3) {
        assert!(Instant::now() < deadline, "the job never ran again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The operators' view on a quorum: held while a majority holds it, free once forced (on
/// every node), and an answer only from a majority of nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_state_and_force_unlock_on_a_quorum() {
    let mut nodes = start_nodes();
    let client = quorum(&nodes, Duration::from_secs(30)).await;
    let lease = held_for(&client, "operated", Duration::from_secs(5), "acquire").await;
    match client.lock_state("operated").await.expect("lock_state") {
        distlock::LockState::Held {
            remaining_ttl,
            holder,
            ..
        } => {
            assert!(
                remaining_ttl > Duration::from_secs(3) && remaining_ttl <= Duration::from_secs(5)
            );
            assert_eq!(
                holder
                    .expect("a majority's token names its holder")
                    .identity,
                client.identity()
            );
        }
        other => panic!("held on every node: {other:?}"),
    }
    // Listed once, though every node has it.
    let listing = client.held_locks(10).await.expect("held_locks");
    assert!(listing.complete);
    assert_eq!(listing.locks.len(), 1, "{listing:?}");
    assert_eq!(listing.locks[0].name, "operated");
    assert!(client.force_unlock("operated").await.expect("force_unlock"));
    assert_eq!(copies(&nodes, &client, "operated").await, 0);
    assert!(
        client
            .held_locks(10)
            .await
            .expect("held_locks")
            .locks
            .is_empty()
    );
    assert_eq!(
        client.lock_state("operated").await.expect("lock_state"),
        distlock::LockState::Free
    );
    tokio::time::timeout(Duration::from_secs(5), lease.handle().lost())
        .await
        .expect("the forced holder learns within its ttl");
    // Three of five down: no majority to answer.
    for node in &mut nodes[..3] {
        node.kill();
    }
    match client.lock_state("operated").await {
        Err(distlock::LockError::Store(distlock::StoreError::NoQuorum { needed: 3, .. })) => {}
        other => panic!("with three of five nodes down: {other:?}"),
    }
    match client.held_locks(10).await {
        Err(distlock::LockError::Store(distlock::StoreError::NoQuorum { needed: 3, .. })) => {}
        other => panic!("a listing with three of five nodes down: {other:?}"),
    }
}
