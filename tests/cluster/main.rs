//! Smoke tests of the Redis Cluster test harness (tests/support/cluster.rs) against real
//! `redis-server` processes: the cluster forms and serves keys on every master, the harness's
//! slot function is Redis's, slots migrate with their keys while a client writes, graceful and
//! SIGKILL failovers promote the replica without losing (replicated) keys, and no
//! `redis-server` outlives the test process, however it ends.

/// `#[distributed_lock]` on a cluster client (shared with the quorum suite).
#[path = "../support/macro_lock.rs"]
mod macro_lock;
#[path = "../support/mod.rs"]
mod support;

// The library on the cluster.
mod election;
mod faces;
mod health;
mod hierarchy;
mod locks;
mod primitives;
mod topology;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rand::Rng as _;
use redis::AsyncCommands as _;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

use support::child::spawn_self;
use support::cluster::{
    ClusterNode, RedisCluster, Role, SLOTS, hash_tag_for_slot, key_in_slot, slot_of,
    temp_dir_prefix,
};
use support::files::{live_processes_in_dirs, wait_until_none_left};

/// A redis-rs async cluster connection (follows `MOVED`/`ASK`) seeded with every node.
async fn cluster_conn(cluster: &RedisCluster) -> ClusterConnection {
    let client =
        ClusterClient::new(cluster.seed_urls()).expect("cluster client from the seed urls");
    match client.get_async_connection().await {
        Ok(conn) => conn,
        Err(e) => panic!(
            "cannot open a cluster connection: {e}\n{}",
            cluster.describe().await
        ),
    }
}

/// A live master other than `not`.
async fn other_master<'a>(cluster: &'a RedisCluster, not: &ClusterNode) -> &'a ClusterNode {
    cluster
        .masters()
        .await
        .into_iter()
        .find(|m| m.id() != not.id())
        .expect("another master")
}

/// The error code (`MOVED`, `ASK`, ...) of a raw node reply, or `None` if it succeeded.
fn error_code<T>(result: &redis::RedisResult<T>) -> Option<String> {
    result
        .as_ref()
        .err()
        .map(|e| e.code().unwrap_or("?").to_owned())
}

/// The port a `MOVED`/`ASK` reply redirects to.
fn redirect_port<T>(result: &redis::RedisResult<T>) -> Option<u16> {
    let (addr, _slot) = result.as_ref().err()?.redirect_node()?;
    addr.rsplit(':').next()?.parse().ok()
}

#[tokio::test]
async fn shared_cluster_forms_and_serves_keys_on_every_master() {
    let cluster = RedisCluster::shared();
    eprintln!("shared cluster started in {:?}", cluster.startup_time());

    assert_eq!(cluster.nodes().len(), 6);
    for (node, url) in cluster.nodes().iter().zip(cluster.seed_urls()) {
        assert_eq!(url, format!("redis://127.0.0.1:{}/", node.port()));
        assert_eq!(node.id().len(), 40);
        assert!(node.is_running());
    }
    for (port, info) in cluster.cluster_info().await {
        assert!(info.is_ok(), "node {port}:\n{info}");
        assert_eq!(info.number("cluster_slots_assigned"), Some(16384), "{info}");
        assert_eq!(info.number("cluster_slots_ok"), Some(16384), "{info}");
        assert_eq!(info.number("cluster_known_nodes"), Some(6), "{info}");
        assert_eq!(info.number("cluster_size"), Some(3), "{info}");
    }

    let shards = cluster.shards().await;
    assert_eq!(shards.len(), 3, "{shards:?}");
    let slot_total: usize = shards
        .iter()
        .flat_map(|s| &s.slots)
        .map(|r| usize::from(r.end() - r.start()) + 1)
        .sum();
    assert_eq!(slot_total, usize::from(SLOTS));
    assert_eq!(cluster.replicas().await.len(), 3);
    for shard in &shards {
        assert_eq!(shard.master.role().await, Role::Master);
        assert_eq!(shard.replicas.len(), 1, "{shard:?}");
        let replica = shard.replicas[0];
        assert_eq!(replica.role().await, Role::Replica);
        let me = replica.view().await;
        let me = me.myself().expect("myself line");
        assert_eq!(me.master_id.as_deref(), Some(shard.master.id()));
        assert_eq!(
            cluster.master_of_slot(*shard.slots[0].start()).await.id(),
            shard.master.id()
        );
    }

    // Through a cluster client: keys on each master, checked on the node itself.
    let mut conn = cluster_conn(cluster).await;
    for shard in &shards {
        let slot = *shard.slots[0].start() + 7;
        let mut raw = shard.master.conn().await;
        let mut elsewhere = other_master(cluster, shard.master).await.conn().await;
        for i in 0..10 {
            let key = format!("smoke:{}:{i}", key_in_slot(slot, "k"));
            let value = format!("value-{i}-{}", shard.master.port());
            let () = conn.set(&key, &value).await.expect("cluster SET");
            let got: String = conn.get(&key).await.expect("cluster GET");
            assert_eq!(got, value);
            let on_node: String = raw.get(&key).await.expect("GET on the owning master");
            assert_eq!(on_node, value);
            let misrouted: redis::RedisResult<Option<String>> = elsewhere.get(&key).await;
            assert_eq!(error_code(&misrouted).as_deref(), Some("MOVED"));
            assert_eq!(redirect_port(&misrouted), Some(shard.master.port()));
            assert_eq!(cluster.master_of_key(&key).await.id(), shard.master.id());
        }
    }

    // Random keys: the client spreads them over all three masters.
    let mut per_master = std::collections::BTreeMap::new();
    for i in 0..300 {
        let key = format!("smoke:random:{i}:{}", rand::rng().random::<u64>());
        let () = conn.set(&key, i).await.expect("cluster SET");
        let got: i64 = conn.get(&key).await.expect("cluster GET");
        assert_eq!(got, i);
        *per_master
            .entry(cluster.master_of_key(&key).await.port())
            .or_insert(0) += 1;
    }
    assert_eq!(per_master.len(), 3, "{per_master:?}");
}

#[tokio::test]
async fn slot_of_matches_cluster_keyslot() {
    let cluster = RedisCluster::shared();
    let mut conn = cluster.nodes()[0].conn().await;

    let mut keys: Vec<Vec<u8>> = [
        "",
        "{",
        "}",
        "{}",
        "}{",
        "{}{a}",
        "{a}{b}",
        "a{b}c",
        "a{}b{c}",
        "{{a}}",
        "{a",
        "a}",
        "foo{bar",
        "foo}bar{baz}",
        "user:{42}:profile",
        "::",
        "{:}",
        "{ }",
        "é{ü}",
        "{user1000}.following",
        "{user1000}.followers",
        "123456789",
    ]
    .iter()
    .map(|k| k.as_bytes().to_vec())
    .collect();
    keys.push(vec![0xff, b'{', 0x00, b'}', 0x80]);
    let alphabet = b"{}{}::ab_-.{}x9\xc3\xa9 ";
    let mut rng = rand::rng();
    while keys.len() < 1000 {
        let len = rng.random_range(0..24);
        keys.push(
            (0..len)
                .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                .collect(),
        );
    }
    let mut pipe = redis::pipe();
    for key in &keys {
        pipe.cmd("CLUSTER").arg("KEYSLOT").arg(key.as_slice());
    }
    let redis_slots: Vec<u16> = pipe.query_async(&mut conn).await.expect("CLUSTER KEYSLOT");
    let mut with_tag = 0;
    for (key, redis_slot) in keys.iter().zip(redis_slots) {
        assert_eq!(
            slot_of(key),
            redis_slot,
            "slot of {:?}",
            String::from_utf8_lossy(key)
        );
        with_tag += usize::from(key.contains(&b'{') && key.contains(&b'}'));
    }
    assert!(with_tag > 300, "only {with_tag} keys with braces");

    // The hash-tag table covers every slot, as Redis sees it.
    let sample: Vec<u16> = (0..SLOTS).step_by(97).chain([SLOTS - 1]).collect();
    let mut pipe = redis::pipe();
    for &slot in &sample {
        pipe.cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key_in_slot(slot, "x:y"));
    }
    let redis_slots: Vec<u16> = pipe.query_async(&mut conn).await.expect("CLUSTER KEYSLOT");
    assert_eq!(sample, redis_slots);
    for slot in 0..SLOTS {
        assert_eq!(slot_of(format!("{{{}}}", hash_tag_for_slot(slot))), slot);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_migration_moves_keys_while_a_client_writes() {
    let cluster = RedisCluster::start();
    eprintln!("cluster started in {:?}", cluster.startup_time());

    // --- migrate_slot under a writing client -----------------------------------------------
    let tag = "{migrating}";
    let slot = slot_of(tag);
    let source = cluster.master_of_slot(slot).await;
    let target = other_master(&cluster, source).await;
    let mut conn = cluster_conn(&cluster).await;
    // Enough keys for MIGRATE to take a while (20 batches), so the writer runs meanwhile.
    let keys: Vec<String> = (0..2000).map(|i| format!("{tag}:key:{i}")).collect();
    let pairs: Vec<(&String, usize)> = keys.iter().zip(0..).collect();
    for chunk in pairs.chunks(500) {
        let () = conn.mset(chunk).await.expect("MSET before the migration");
    }

    let stop = Arc::new(AtomicBool::new(false));
    let incrs = Arc::new(AtomicU64::new(0));
    let writer = tokio::spawn({
        let (stop, incrs) = (stop.clone(), incrs.clone());
        let mut conn = cluster_conn(&cluster).await;
        async move {
            let mut errors = Vec::new();
            let mut created = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let counter: redis::RedisResult<u64> = conn.incr(format!("{tag}:counter"), 1).await;
                match counter {
                    Ok(v) => assert_eq!(v, incrs.fetch_add(1, Ordering::SeqCst) + 1),
                    Err(e) => errors.push(format!("INCR: {e}")),
                }
                let set: redis::RedisResult<()> =
                    conn.set(format!("{tag}:new:{created}"), created).await;
                match set {
                    Ok(()) => created += 1,
                    Err(e) => errors.push(format!("SET: {e}")),
                }
            }
            (created, errors)
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = incrs.load(Ordering::SeqCst);
    let began = Instant::now();
    let moved = cluster.migrate_slot(slot, target).await;
    let took = began.elapsed();
    let during = incrs.load(Ordering::SeqCst) - before;
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.store(true, Ordering::SeqCst);
    let (created, errors) = writer.await.expect("writer task");
    eprintln!(
        "migrate_slot({slot}): {moved} keys moved in {took:?}; {during} INCRs and \
         the writer's new keys went on meanwhile"
    );
    assert!(
        errors.is_empty(),
        "the cluster client saw errors: {errors:?}"
    );
    assert!(
        during > 0,
        "the writer made no progress during the migration"
    );
    assert!(moved >= keys.len(), "moved {moved}");

    assert_eq!(cluster.master_of_slot(slot).await.id(), target.id());
    for node in cluster.nodes() {
        let view = node.view().await;
        assert_eq!(
            view.owner_of(slot).map(|o| o.id.as_str()),
            Some(target.id())
        );
    }
    let count = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("COUNTKEYSINSLOT").arg(slot);
        let mut conn = conn.clone();
        async move {
            cmd.query_async::<u64>(&mut conn)
                .await
                .expect("COUNTKEYSINSLOT")
        }
    };
    let (mut src, mut dst) = (source.conn().await, target.conn().await);
    assert_eq!(count(&mut src).await, 0);
    assert_eq!(count(&mut dst).await, keys.len() as u64 + 1 + created);
    // The first connection still has the old slot map: MOVED, refresh, read.
    for (i, key) in keys.iter().enumerate() {
        let got: usize = conn.get(key).await.expect("GET after the migration");
        assert_eq!(got, i);
    }
    let counter: u64 = conn
        .get(format!("{tag}:counter"))
        .await
        .expect("GET counter");
    assert_eq!(
        counter,
        incrs.load(Ordering::SeqCst),
        "lost or doubled INCRs"
    );
    for n in 0..created {
        let got: u64 = conn
            .get(format!("{tag}:new:{n}"))
            .await
            .expect("GET new key");
        assert_eq!(got, n);
    }
    let stale: redis::RedisResult<Option<String>> = src.get(&keys[0]).await;
    assert_eq!(error_code(&stale).as_deref(), Some("MOVED"));
    assert_eq!(redirect_port(&stale), Some(target.port()));

    // --- two phases: ASK while the slot is migrating ----------------------------------------
    let tag = "{two-phase}";
    let slot = slot_of(tag);
    let source = cluster.master_of_slot(slot).await;
    let target = other_master(&cluster, source).await;
    let keys: Vec<String> = (0..50).map(|i| format!("{tag}:key:{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        let () = conn.set(key, i).await.expect("SET before the migration");
    }
    let mut migration = cluster.begin_migration(slot, target).await;
    assert_eq!(migration.source().id(), source.id());
    assert_eq!(migration.move_keys(10).await, 10);
    let mut src = source.conn().await;
    let mut asked = 0;
    for (i, key) in keys.iter().enumerate() {
        let raw: redis::RedisResult<Option<usize>> = src.get(key).await;
        match error_code(&raw).as_deref() {
            None => assert_eq!(raw.unwrap(), Some(i)),
            Some("ASK") => {
                asked += 1;
                assert_eq!(redirect_port(&raw), Some(target.port()));
            }
            other => panic!("unexpected reply {other:?} for {key}"),
        }
        // The cluster client follows ASK.
        let got: usize = conn.get(key).await.expect("GET during the migration");
        assert_eq!(got, i);
    }
    assert_eq!(
        asked, 10,
        "keys moved by move_keys(10) answer ASK on the source"
    );
    let fresh: redis::RedisResult<()> = src.set(format!("{tag}:fresh"), 1).await;
    assert_eq!(
        error_code(&fresh).as_deref(),
        Some("ASK"),
        "a new key goes to the target"
    );
    let () = conn
        .set(format!("{tag}:fresh"), 1)
        .await
        .expect("cluster SET during the migration");
    assert_eq!(migration.finish().await, keys.len());
    assert_eq!(cluster.master_of_slot(slot).await.id(), target.id());
    let mut dst = target.conn().await;
    let on_target: u64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query_async(&mut dst)
        .await
        .expect("COUNTKEYSINSLOT");
    assert_eq!(on_target, keys.len() as u64 + 1);
    for (i, key) in keys.iter().enumerate() {
        let got: usize = conn.get(key).await.expect("GET after the migration");
        assert_eq!(got, i);
    }
}

/// Writes `n` keys into `slot` through the cluster client; returns them.
async fn write_keys(cluster: &RedisCluster, slot: u16, n: usize) -> Vec<String> {
    let mut conn = cluster_conn(cluster).await;
    let keys: Vec<String> = (0..n)
        .map(|i| key_in_slot(slot, &format!("k{i}")))
        .collect();
    for (i, key) in keys.iter().enumerate() {
        let () = conn.set(key, i).await.expect("SET");
    }
    keys
}

/// Asserts that every key reads back (through `conn`) as its index.
async fn assert_keys(conn: &mut impl redis::aio::ConnectionLike, keys: &[String]) {
    for (i, key) in keys.iter().enumerate() {
        let got: Option<usize> = redis::cmd("GET")
            .arg(key)
            .query_async(conn)
            .await
            .unwrap_or_else(|e| panic!("GET {key}: {e}"));
        assert_eq!(got, Some(i), "{key}");
    }
}

/// Shard `index` of the shared cluster (by slot order) with 100 keys written to the slot
/// `offset` past its first and checked through a cluster connection: its master, that
/// master's replica, the slot, the keys and the connection.
async fn keyed_shard(
    cluster: &RedisCluster,
    index: usize,
    offset: u16,
) -> (
    &ClusterNode,
    &ClusterNode,
    u16,
    Vec<String>,
    ClusterConnection,
) {
    let master = cluster.masters().await[index];
    let replica = cluster.replicas_of(master).await[0];
    let slot = *cluster.shards().await[index].slots[0].start() + offset;
    let keys = write_keys(cluster, slot, 100).await;
    let mut conn = cluster_conn(cluster).await;
    assert_keys(&mut conn, &keys).await;
    (master, replica, slot, keys, conn)
}

/// The ids of the replicas of `node`.
async fn follower_ids<'a>(cluster: &'a RedisCluster, node: &ClusterNode) -> Vec<&'a str> {
    cluster
        .replicas_of(node)
        .await
        .into_iter()
        .map(|n| n.id())
        .collect()
}

#[tokio::test]
async fn graceful_failover_promotes_the_replica_and_keeps_keys() {
    let cluster = RedisCluster::start();
    let (master, replica, slot, keys, mut conn) = keyed_shard(&cluster, 1, 3).await;

    let promotion = cluster.failover(master).await;
    eprintln!(
        "graceful failover: replica promoted after {:?}, cluster settled after {:?}",
        promotion.promoted_after, promotion.settled_after
    );
    assert_eq!(promotion.old_master.id(), master.id());
    assert_eq!(promotion.new_master.id(), replica.id());
    assert_eq!(replica.role().await, Role::Master);
    assert_eq!(master.role().await, Role::Replica);
    assert_eq!(cluster.master_of_slot(slot).await.id(), replica.id());
    assert_eq!(follower_ids(&cluster, replica).await, [master.id()]);
    assert_eq!(cluster.masters().await.len(), 3);
    for (port, info) in cluster.cluster_info().await {
        assert!(info.is_ok(), "node {port}:\n{info}");
    }
    // The old connection (MOVED, refresh) and the new master itself.
    assert_keys(&mut conn, &keys).await;
    assert_keys(&mut replica.conn().await, &keys).await;
}

#[tokio::test]
async fn sigkill_failover_promotes_the_replica_and_keeps_replicated_keys() {
    let cluster = RedisCluster::start();
    let (master, replica, slot, keys, mut conn) = keyed_shard(&cluster, 2, 11).await;
    cluster.wait_replication_synced().await;

    let promotion = cluster.kill_master(master).await;
    eprintln!(
        "SIGKILL failover (node timeout 1 s): replica promoted after {:?}, cluster settled after {:?}",
        promotion.promoted_after, promotion.settled_after
    );
    assert!(!master.is_running());
    assert_eq!(promotion.new_master.id(), replica.id());
    assert!(
        promotion.promoted_after < Duration::from_secs(10),
        "promotion took {:?}",
        promotion.promoted_after
    );
    assert_eq!(replica.role().await, Role::Master);
    assert_eq!(cluster.master_of_slot(slot).await.id(), replica.id());
    assert_eq!(cluster.masters().await.len(), 3);
    assert!(cluster.replicas_of(replica).await.is_empty());
    assert!(cluster.nodes().iter().any(|n| n.id() == master.id()));
    // The old connection (its node is gone: refresh) and a new one.
    assert_keys(&mut conn, &keys).await;
    assert_keys(&mut cluster_conn(&cluster).await, &keys).await;

    // The killed master comes back (empty) as the new master's replica and resyncs.
    let began = Instant::now();
    cluster.restart_node(master).await;
    eprintln!(
        "restart_node: rejoined as a replica in {:?}",
        began.elapsed()
    );
    assert!(master.is_running());
    assert_eq!(master.role().await, Role::Replica);
    assert_eq!(follower_ids(&cluster, replica).await, [master.id()]);
    cluster.wait_replication_synced().await;
    let mut on_replica = master.conn().await;
    let () = redis::cmd("READONLY")
        .query_async(&mut on_replica)
        .await
        .expect("READONLY");
    assert_keys(&mut on_replica, &keys).await;
}

// ---------------------------------------------------------------------------------------------
// No redis-server outlives the test process: child processes of this test binary start the
// shared cluster and end in various ways.
// ---------------------------------------------------------------------------------------------

const CHILD_MODE_VAR: &str = "DISTLOCK_CLUSTER_CHILD_MODE";
const CHILD_ENTRY: &str = "child_entry";
const MARK: &str = "CLUSTER-CHILD ";

/// Entry point of the child processes (does nothing in a normal run).
#[test]
#[ignore = "entry point of child processes of the leak tests; does nothing on its own"]
fn child_entry() {
    let Ok(mode) = std::env::var(CHILD_MODE_VAR) else {
        return;
    };
    let say = |line: String| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{MARK}{line}");
        let _ = out.flush();
    };
    if mode == "start" {
        let _cluster = RedisCluster::start();
        say("STARTED".into());
        return;
    }
    let cluster = RedisCluster::shared();
    let pids: Vec<String> = cluster.pids().iter().map(u32::to_string).collect();
    say(format!("PIDS {}", pids.join(" ")));
    say(format!("DIR {}", cluster.dir().display()));
    match mode.as_str() {
        "exit" => {}
        "panic" => panic!("deliberate panic while the shared cluster runs"),
        "sigkill" => {
            say("READY".into());
            std::thread::sleep(Duration::from_secs(120));
        }
        other => panic!("unknown child mode {other}"),
    }
}

/// A child process of this test binary running [`child_entry`]; killed on drop.
struct SelfChild {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl SelfChild {
    fn spawn(mode: &str, path: Option<&OsString>) -> Self {
        let mut env = vec![(CHILD_MODE_VAR, mode.as_ref())];
        if let Some(path) = path {
            env.push(("PATH", path.as_os_str()));
        }
        let (mut child, lines) = spawn_self(CHILD_ENTRY, &env, MARK);
        let mut stderr = child.stderr.take().expect("child stderr");
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Self {
            child,
            lines,
            stderr: Some(stderr),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn expect_line(&self, prefix: &str) -> String {
        let within = Duration::from_secs(90);
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => {
                    return line[prefix.len()..].trim().to_owned();
                }
                Ok(_) => {}
                Err(e) => panic!("no `{prefix}` line from the child within {within:?}: {e}"),
            }
        }
    }

    /// Waits (bounded) for the exit; returns the status and everything on stderr.
    fn wait(&mut self) -> (ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(90);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for the child") {
                break status;
            }
            assert!(Instant::now() < deadline, "the child did not exit in time");
            std::thread::sleep(Duration::from_millis(20));
        };
        let stderr = self
            .stderr
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        (status, stderr)
    }

    fn sigkill(&self) {
        let pid = i32::try_from(self.child.id()).expect("pid");
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own child.
        let rc = unsafe { libc::kill(pid, libc::SIGKILL) };
        assert_eq!(rc, 0, "kill({pid}, SIGKILL)");
    }
}

impl Drop for SelfChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Live (not zombie) `redis-server` processes started by the harness in test process `owner`:
/// their working directory is a node dir under `distlock-cluster-<owner>-...` (redis-server
/// rewrites its command line, so the cwd is what identifies them).
fn redis_servers_of(owner: u32) -> BTreeSet<u32> {
    live_processes_in_dirs(
        &["redis-server"],
        &[format!("/{}{owner}-", temp_dir_prefix())],
    )
}

/// Cluster temp dirs of test process `owner` that still exist.
fn cluster_dirs_of(owner: u32) -> Vec<PathBuf> {
    let prefix = format!("{}{owner}-", temp_dir_prefix());
    std::fs::read_dir(std::env::temp_dir())
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Polls (up to 10 s) until test process `owner` has no live redis-server; returns how long.
fn wait_no_servers(owner: u32) -> Duration {
    wait_until_none_left("redis-server processes", owner, || redis_servers_of(owner))
}

fn parse_pids(line: &str) -> BTreeSet<u32> {
    line.split_whitespace()
        .map(|p| p.parse().expect("pid"))
        .collect()
}

/// Runs a child that starts the shared cluster and then ends in `mode`; checks that its
/// servers and temp dirs are gone afterwards.
fn check_no_leak_after(mode: &str, expect_success: bool) {
    let mut child = SelfChild::spawn(mode, None);
    let pids = parse_pids(&child.expect_line("PIDS"));
    let dir = PathBuf::from(child.expect_line("DIR"));
    assert_eq!(pids.len(), 6, "{pids:?}");
    let (status, stderr) = child.wait();
    assert_eq!(
        status.success(),
        expect_success,
        "child ({mode}) ended with {status}; stderr:\n{stderr}"
    );
    let took = wait_no_servers(child.pid());
    eprintln!("{mode}: the child's 6 redis-servers were gone {took:?} after it exited");
    assert!(!dir.exists(), "{} was not removed", dir.display());
    assert!(cluster_dirs_of(child.pid()).is_empty());
}

#[test]
fn no_redis_server_outlives_a_test_binary_that_exits() {
    check_no_leak_after("exit", true);
}

#[test]
fn no_redis_server_outlives_a_test_binary_that_fails() {
    check_no_leak_after("panic", false);
}

#[test]
fn no_redis_server_outlives_a_sigkilled_test_binary() {
    let mut child = SelfChild::spawn("sigkill", None);
    let pids = parse_pids(&child.expect_line("PIDS"));
    let dir = PathBuf::from(child.expect_line("DIR"));
    child.expect_line("READY");
    // The detection works: it sees exactly the child's six servers.
    assert_eq!(redis_servers_of(child.pid()), pids);
    child.sigkill();
    let (status, _) = child.wait();
    assert!(!status.success());
    let took = wait_no_servers(child.pid());
    eprintln!("sigkill: the child's 6 redis-servers were gone {took:?} after its SIGKILL");
    // Nothing could remove the dir of a SIGKILLed process: do it here.
    let _ = std::fs::remove_dir_all(&dir);
}

/// A PATH holding only a link to the real `redis-server` (no `redis-cli`).
fn path_with_only_redis_server(dir: &Path) -> OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let server = std::env::split_paths(&path)
        .map(|d| d.join("redis-server"))
        .find(|p| p.is_file())
        .expect("redis-server on PATH");
    std::os::unix::fs::symlink(server, dir.join("redis-server")).expect("symlink redis-server");
    dir.as_os_str().to_owned()
}

#[test]
fn missing_binaries_fail_loudly() {
    let empty = std::env::temp_dir().join(format!("distlock-nobin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&empty);
    std::fs::create_dir_all(&empty).expect("create an empty dir");
    let run = |path: &OsString| {
        let mut child = SelfChild::spawn("start", Some(path));
        let (status, stderr) = child.wait();
        assert!(!status.success(), "start() succeeded without binaries");
        assert!(
            child.lines.try_iter().all(|l| l != "STARTED"),
            "start() reported success"
        );
        let owner = child.pid();
        wait_no_servers(owner);
        assert!(cluster_dirs_of(owner).is_empty(), "temp dirs left behind");
        stderr
    };

    let stderr = run(&empty.as_os_str().to_owned());
    assert!(
        stderr.contains("redis-server not found on PATH") && stderr.contains("apt-get install"),
        "stderr:\n{stderr}"
    );

    let only_server = path_with_only_redis_server(&empty);
    let stderr = run(&only_server);
    assert!(
        stderr.contains("redis-cli not found on PATH"),
        "stderr:\n{stderr}"
    );
    let _ = std::fs::remove_dir_all(&empty);
}

#[test]
fn a_node_that_cannot_start_fails_loudly_with_its_log() {
    let failure = std::panic::catch_unwind(|| {
        RedisCluster::builder()
            .config("--no-such-directive", &["1"])
            .start()
    })
    .expect_err("a cluster with a bad directive started");
    let message = failure
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("failed to start") && message.contains("no-such-directive"),
        "{message}"
    );
}

#[test]
fn the_shared_cluster_refuses_topology_changes() {
    let cluster = RedisCluster::shared();
    let node = &cluster.nodes()[0];
    let attempts: [(&str, &dyn Fn()); 3] = [
        ("kill", &|| node.kill()),
        ("stop_process", &|| node.stop_process()),
        ("kill_node", &|| cluster.kill_node(node)),
    ];
    for (what, attempt) in attempts {
        let refused =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(attempt)).expect_err(what);
        let message = refused
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(
            message.contains("not allowed on RedisCluster::shared()"),
            "{what}: {message}"
        );
    }
    assert!(node.is_serving());
}
