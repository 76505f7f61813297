//! Locks on a real Redis Cluster (TESTPLAN 12): every script is single-slot whatever the name,
//! mutual exclusion and fences across processes with names on every master, the watchdog,
//! waiting with sharded wake-ups, hand-off and fairness, all through the public API.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use distlock::{Client, LockError, ReleaseOutcome};
use rand::Rng as _;

use crate::support::child::{self, run_children_to_done};
use crate::support::cluster::{RedisCluster, slot_of};
use crate::support::sections::{
    assert_sections_ran_alone, bump_counter_and_leave, enter_section, write_fenced,
};

/// A distlock client on `cluster` under its own key prefix (tests share one cluster).
pub async fn client(cluster: &RedisCluster, prefix: &str) -> Client {
    Client::builder()
        .prefix(prefix)
        .response_timeout(Duration::from_secs(3))
        .connect_cluster(cluster.seed_urls())
        .await
        .unwrap_or_else(|e| panic!("connect_cluster: {e}\n{}", cluster.logs()))
}

/// Seeds only tell a cluster client where to ask for the topology; unlike a quorum's members
/// (TESTPLAN 42) they never vote, so a seed named twice is harmless and accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_named_twice_is_accepted() {
    let cluster = RedisCluster::shared();
    let seeds = cluster.seed_urls();
    let twice: Vec<&String> = seeds.iter().chain(&seeds).collect();
    let client = Client::builder()
        .prefix("seeds")
        .connect_cluster(&twice)
        .await
        .unwrap_or_else(|e| panic!("connect_cluster with every seed twice: {e}"));
    let lease = client.lock("seeded").acquire().await.expect("acquire");
    assert_eq!(
        lease.release().await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// Lock names whose keys land on every master of `cluster`, `per_master` of each.
pub async fn names_on_every_master(
    cluster: &RedisCluster,
    client: &Client,
    per_master: usize,
) -> Vec<String> {
    let masters = cluster.masters().await;
    let mut by_master: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut i = 0u32;
    while by_master.len() < masters.len()
        || by_master.values().any(|names| names.len() < per_master)
    {
        let name = format!("spread:{i}");
        i += 1;
        let key = client.__inspect().lock_key(&name).expect("valid name");
        let owner = cluster.master_of_slot(slot_of(&key)).await.id().to_owned();
        let names = by_master.entry(owner).or_default();
        if names.len() < per_master {
            names.push(name);
        }
    }
    by_master.into_values().flatten().collect()
}

/// TESTPLAN 12: 1000 random names, braces, colons and percent signs included: each one's lock
/// key, fence key and channel share one slot (the lock's tag, never one the user text picked),
/// every acquire and release succeeds on the first call (no MOVED, ASK or CROSSSLOT reaches
/// the caller), and fences of one name strictly increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_names_each_stay_in_one_slot() {
    let cluster = RedisCluster::shared();
    let client = client(cluster, "slots").await;
    let alphabet: Vec<char> = "ab{}:%x7 {{}}".chars().collect();
    let mut rng = rand::rng();
    let mut slots = HashSet::new();
    let mut fence_keys = HashSet::new();
    let mut last_fence: BTreeMap<String, u64> = BTreeMap::new();
    for i in 0..1000 {
        let len = rng.random_range(1..12);
        let mut name: String = (0..len)
            .map(|_| alphabet[rng.random_range(0..alphabet.len())])
            .collect();
        // A few repeats, to check that one name's fences increase.
        if i % 10 == 0 {
            name = "repeat{me}".to_owned();
        }
        let inspect = client.__inspect();
        let key = inspect.lock_key(&name).expect("valid name");
        let fence_key = inspect.fence_key(&name).expect("valid name");
        let channel = inspect.release_channel(&name).expect("valid name");
        let slot = slot_of(&key);
        assert_eq!(slot_of(&fence_key), slot, "{name:?}: fence key {fence_key}");
        assert_eq!(slot_of(&channel), slot, "{name:?}: channel {channel}");
        // The tag is the library's: the whole encoded name, never a piece the user chose.
        assert!(key.ends_with('}') && key.matches('{').count() == 1, "{key}");
        slots.insert(slot);
        fence_keys.insert(fence_key);
        let lease = client
            .lock(&name)
            .ttl(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("acquire {name:?}: {e}"));
        if let Some(last) = last_fence.insert(name.clone(), lease.fence().await.expect("fence")) {
            assert!(
                lease.fence().await.expect("fence") > last,
                "{name:?}: fence {} after {last}",
                lease.fence().await.expect("fence")
            );
        }
        assert_eq!(
            lease.release().await.expect("release"),
            ReleaseOutcome::Released
        );
    }
    assert!(
        slots.len() > 100,
        "names spread over only {} slots",
        slots.len()
    );
    assert!(
        fence_keys.len() <= slots.len(),
        "more fence keys than slots"
    );
    // No key is left per name: only the (bounded) fence keys.
    let left = client.__inspect().keys().await.expect("KEYS");
    assert!(
        left.iter().all(|k| k.starts_with("slots:fence:{")),
        "left behind: {:?}",
        left.iter()
            .filter(|k| !k.starts_with("slots:fence:"))
            .collect::<Vec<_>>()
    );
}

/// The watchdog renews leases of names on every master (one renewal call per slot, sent at
/// once); waiters of two clients are woken through sharded pub/sub on each lock's slot, at
/// once, not at the holder's ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_and_wake_ups_work_on_every_master() {
    let cluster = RedisCluster::shared();
    let a = client(cluster, "wake").await;
    let b = client(cluster, "wake").await;
    let names = names_on_every_master(cluster, &a, 3).await;
    let mut leases = Vec::new();
    for name in &names {
        leases.push(
            a.lock(name)
                .ttl(Duration::from_millis(900))
                .acquire()
                .await
                .expect("acquire"),
        );
    }
    // Four ttls: kept only if renewed (every 300 ms), with room for a loaded machine.
    tokio::time::sleep(Duration::from_millis(3600)).await;
    for lease in &leases {
        assert!(
            !lease.is_lost(),
            "{} lost: {:?}",
            lease.name(),
            lease.lost_reason()
        );
    }
    // Long holds: a waiter that missed the release would sleep up to 10 s.
    for lease in leases {
        lease.extend(Duration::from_secs(10)).await.expect("extend");
        let name = lease.name().to_owned();
        let waiter = tokio::spawn({
            let b = b.clone();
            let name = name.clone();
            async move {
                let lease = b
                    .lock(&name)
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await
                    .expect("waiter");
                (Instant::now(), lease)
            }
        });
        // Let the waiter subscribe and mark the lock.
        let key = a.__inspect().lock_key(&name).expect("name");
        // Bounded by the waiter's own wait, not by how fast a busy machine runs it.
        let deadline = Instant::now() + Duration::from_secs(15);
        while !a
            .__inspect()
            .get(&key)
            .await
            .expect("GET")
            // `*`, or `!` from a waiter that has already waited 20 ms (a busy machine).
            .is_some_and(|v| v.ends_with(['*', '!']))
        {
            assert!(Instant::now() < deadline, "{name}: nobody waited");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let released = Instant::now();
        lease.release().await.expect("release");
        let (got, next) = waiter.await.expect("waiter task");
        let took = got - released;
        assert!(
            took < Duration::from_millis(500),
            "{name}: the waiter got the lock {took:?} after the release"
        );
        next.release().await.expect("release");
    }
    assert_eq!(b.__inspect().waiting_channels(), 0);
}

/// Hand-off between tasks of one client and fairness across clients hold on a cluster too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_names_stay_exclusive_and_fair() {
    const TASKS: usize = 6;
    const SECTIONS: u64 = 100;
    let cluster = RedisCluster::shared();
    let names = names_on_every_master(cluster, &client(cluster, "busy").await, 1).await;
    let counters: Arc<BTreeMap<String, AtomicU64>> = Arc::new(
        names
            .iter()
            .map(|n| (n.clone(), AtomicU64::new(0)))
            .collect(),
    );
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        // Two clients, so hand-offs and releases to the other client's waiters both happen.
        let client = client(cluster, "busy").await;
        let names = names.clone();
        let counters = counters.clone();
        tasks.push(tokio::spawn(async move {
            let mut longest = Duration::ZERO;
            for i in 0..SECTIONS {
                let name = &names[(t + i as usize) % names.len()];
                let asked = Instant::now();
                let lease = client
                    .lock(name)
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                    .expect("acquire");
                longest = longest.max(asked.elapsed());
                let counter = &counters[name];
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                assert_eq!(
                    lease.release().await.expect("release"),
                    ReleaseOutcome::Released
                );
            }
            longest
        }));
    }
    let mut longest = Duration::ZERO;
    for task in tasks {
        longest = longest.max(task.await.expect("task"));
    }
    let total: u64 = counters.values().map(|c| c.load(Ordering::SeqCst)).sum();
    assert_eq!(total, TASKS as u64 * SECTIONS, "lost updates");
    assert!(
        longest < Duration::from_secs(5),
        "a waiter waited {longest:?}"
    );
}

/// The entry test of the child processes of [`mutual_exclusion_across_4_processes`].
const ENTRY: &str = "locks::child_entry";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as a child process of the tests in this module"]
async fn child_entry() {
    let Some((role, urls)) = child::role() else {
        return;
    };
    let nodes: Vec<&str> = urls.split(',').collect();
    let client = Client::builder()
        .prefix("procs")
        .connect_cluster(&nodes)
        .await
        .expect("connect_cluster");
    match role.as_str() {
        "exclusion" => child_exclusion(client, &nodes).await,
        other => panic!("unknown child role {other}"),
    }
}

const PROCESS_TASKS: usize = 4;
const PROCESS_SECTIONS: usize = 150;

/// A fenced resource per name: a write is accepted only with a fence above the last one, and
/// an occupancy count catches two holders inside at once.
const FENCED_WRITE: &str = r"
    local last = tonumber(redis.call('GET', KEYS[1]) or '0')
    if tonumber(ARGV[1]) <= last then return 0 end
    redis.call('SET', KEYS[1], ARGV[1])
    return 1
";

/// 4 tasks × 150 sections over names on every master: in each, occupancy must be 1, the
/// fenced write must be accepted, and the counter is a read-modify-write.
async fn child_exclusion(client: Client, nodes: &[&str]) {
    let names: Vec<String> = (0..6).map(|i| format!("proc:{i}")).collect();
    let redis = redis::cluster::ClusterClient::new(nodes.to_vec()).expect("cluster client");
    let mut tasks = Vec::new();
    for t in 0..PROCESS_TASKS {
        let client = client.clone();
        let names = names.clone();
        let mut conn = redis.get_async_connection().await.expect("conn");
        tasks.push(tokio::spawn(async move {
            let fenced = redis::Script::new(FENCED_WRITE);
            for i in 0..PROCESS_SECTIONS {
                let name = &names[(t * 7 + i) % names.len()];
                let lease = client
                    .lock(name)
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("acquire");
                let tag = format!("{{{name}}}");
                enter_section(&mut conn, &tag).await;
                let fence_key = format!("fence-seen{tag}");
                write_fenced(
                    &mut conn,
                    &fenced,
                    &fence_key,
                    lease.fence().await.expect("fence"),
                )
                .await;
                bump_counter_and_leave(&mut conn, &tag, 500).await;
                assert_eq!(
                    lease.release().await.expect("release"),
                    ReleaseOutcome::Released
                );
            }
        }));
    }
    child::finish_tasks(tasks).await;
}

/// TESTPLAN 12 with processes: 4 OS processes × 4 tasks on names spread over every master:
/// no two holders inside at once, no lost update, and every fenced write accepted (fences of
/// a name strictly increase in grant order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_across_4_processes() {
    let cluster = RedisCluster::shared();
    let urls = cluster.seed_urls().join(",");
    run_children_to_done(ENTRY, "exclusion", &urls, 4, Duration::from_secs(240));
    let redis = redis::cluster::ClusterClient::new(cluster.seed_urls()).expect("client");
    let mut conn = redis.get_async_connection().await.expect("conn");
    let tags: Vec<String> = (0..6).map(|i| format!("{{proc:{i}}}")).collect();
    let sections = 4 * PROCESS_TASKS * PROCESS_SECTIONS;
    assert_sections_ran_alone(&mut conn, &tags, sections, true, "").await;
}

/// Busy answers, timeouts and invalid input behave as on a single primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_and_timeouts_are_typed() {
    let cluster = RedisCluster::shared();
    let client = client(cluster, "typed").await;
    let lease = client
        .lock("held")
        .ttl(Duration::from_secs(5))
        .acquire()
        .await
        .expect("acquire");
    match client.lock("held").acquire().await {
        Err(LockError::Busy { retry_after, .. }) => {
            assert!(retry_after <= Duration::from_secs(5));
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    match client
        .lock("held")
        .wait(Duration::from_millis(200))
        .acquire()
        .await
    {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(matches!(
        client.lock("").acquire().await,
        Err(LockError::InvalidName(_))
    ));
    lease.release().await.expect("release");
}

/// `held_locks` on a cluster: a scan of every master finds a lock on each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_locks_lists_the_locks_of_every_master() {
    let cluster = RedisCluster::shared();
    let a = client(cluster, "listed").await;
    let b = client(cluster, "listed").await;
    let mut names = names_on_every_master(cluster, &a, 2).await;
    names.sort();
    let mut leases = Vec::new();
    for name in &names {
        leases.push(
            a.lock(name)
                .identity("cluster-lister")
                .acquire()
                .await
                .expect("acquire"),
        );
    }
    let listing = b.held_locks(1000).await.expect("held_locks");
    assert!(listing.complete);
    let listed: Vec<&str> = listing.locks.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(listed, names.iter().map(String::as_str).collect::<Vec<_>>());
    for lock in &listing.locks {
        assert!(
            matches!(&lock.state, distlock::LockState::Held { holder: Some(h), .. } if h.identity == "cluster-lister"),
            "{lock:?}"
        );
    }
    for lease in leases {
        lease.release().await.expect("release");
    }
    assert!(
        b.held_locks(1000)
            .await
            .expect("held_locks")
            .locks
            .is_empty()
    );
}

/// The operators' view on a cluster: `lock_state` reads each name on its own master, and
/// `force_unlock` frees it there and wakes its waiter through the lock's sharded channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_state_and_force_unlock_on_every_master() {
    let cluster = RedisCluster::shared();
    let a = client(cluster, "operated").await;
    let b = client(cluster, "operated").await;
    // Long, so that the holder's first renewal (a third of it) is not what tells it.
    const TTL: Duration = Duration::from_secs(30);
    for name in names_on_every_master(cluster, &a, 1).await {
        let asked_at = tokio::time::Instant::now();
        let lease = a
            .lock(&name)
            .identity("cluster-holder")
            .ttl(TTL)
            .acquire()
            .await
            .expect("acquire");
        match b.lock_state(&name).await.expect("lock_state") {
            distlock::LockState::Held {
                holder: Some(holder),
                ..
            } => assert_eq!(holder.identity, "cluster-holder"),
            other => panic!("held, and named: {other:?}"),
        }
        let waiter = {
            let b = b.clone();
            let name = name.clone();
            tokio::spawn(async move { b.lock(&name).wait(Duration::from_secs(30)).acquire().await })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(b.force_unlock(&name).await.expect("force_unlock"));
        let taken = tokio::time::timeout_at(asked_at + TTL, waiter)
            .await
            .expect("the waiter is woken before the holder's ttl")
            .expect("waiter task")
            .expect("waiter acquires");
        // Told through the prefix's sharded revocation channel, before any renewal.
        tokio::time::timeout_at(asked_at + TTL / 3, lease.handle().lost())
            .await
            .expect("the forced holder is told before its first renewal");
        taken.release().await.expect("release");
        assert_eq!(
            a.lock_state(&name).await.expect("lock_state"),
            distlock::LockState::Free
        );
    }
}
