//! Locks that say who holds them (issue 27 §4): the holder identity and grant time in
//! `lock_state` and its semaphore and read-write twins, the identity a hand-off carries, bad
//! identities refused, and the forces that free semaphores and read-write locks and tell
//! their holders at once.

use std::time::{Duration, SystemTime};

use distlock::{
    Client, Holder, Lease, LeaseHandle, LockError, LockState, RwLockBuilder, StoreError,
};
use tokio::time::Instant;

use crate::support::fixture::{Fixture, on_both_stores};
use crate::support::server::until_subscribed;

on_both_stores!(
    lock_state_names_the_builder_identity_and_the_grant_time,
    a_waiter_that_waited_is_named_from_its_granted_attempt,
    semaphore_state_lists_each_lease_and_the_force_frees_and_tells_them,
    rw_lock_state_shows_writer_and_readers_and_the_force_frees_and_tells_them,
);

/// Who `client.lock_state(name)` says holds lock `name` (it must be held, and named).
async fn holder_of(client: &Client, name: &str) -> Holder {
    match client.lock_state(name).await.expect("lock_state") {
        LockState::Held {
            holder: Some(holder),
            ..
        } => holder,
        other => panic!("{name}: a held lock names its holder, got {other:?}"),
    }
}

/// Whether `since` is within `[before, after]`, to the millisecond the token keeps.
fn within(since: SystemTime, before: SystemTime, after: SystemTime) -> bool {
    let ms = Duration::from_millis(1);
    since + ms >= before && since <= after + ms
}

/// A task in which `client` waits up to `wait` for lock `name` as `identity`.
fn spawn_waiter(
    client: Client,
    name: &'static str,
    identity: &'static str,
    wait: Duration,
) -> tokio::task::JoinHandle<Result<Lease, LockError>> {
    tokio::spawn(async move {
        client
            .lock(name)
            .identity(identity)
            .wait(wait)
            .acquire()
            .await
    })
}

/// Releases `first` and returns the lease its `waiter` then gets.
async fn release_to(
    first: Lease,
    waiter: tokio::task::JoinHandle<Result<Lease, LockError>>,
) -> Lease {
    first.release().await.expect("release");
    waiter
        .await
        .expect("waiter task")
        .expect("the waiter gets it")
}

/// Waits until every one of `handles` is told its lease is lost, each by `deadline`
/// (panicking with `what` otherwise).
async fn told_before_first_renewal(
    handles: impl IntoIterator<Item = LeaseHandle>,
    deadline: Instant,
    what: &str,
) {
    for handle in handles {
        tokio::time::timeout_at(deadline, handle.lost())
            .await
            .expect(what);
    }
}

/// Read-write lock `doc` as `identity`, with `ttl`.
fn doc_as(fx: &Fixture, identity: &str, ttl: Duration) -> RwLockBuilder {
    fx.client.rw_lock("doc").identity(identity).ttl(ttl)
}

async fn lock_state_names_the_builder_identity_and_the_grant_time(fx: Fixture) {
    let before = SystemTime::now();
    let lease = fx
        .client
        .lock("named")
        .identity("billing-worker-3")
        .acquire()
        .await
        .expect("acquire");
    let after = SystemTime::now();
    let holder = holder_of(&fx.client, "named").await;
    assert_eq!(holder.identity, "billing-worker-3");
    assert!(
        within(holder.since, before, after),
        "grant time {:?} outside the acquire [{before:?}, {after:?}]",
        holder.since
    );
    // Without a builder identity, the client's.
    let other = fx.client.lock("unnamed").acquire().await.expect("acquire");
    let holder = holder_of(&fx.client, "unnamed").await;
    assert_eq!(holder.identity, fx.client.identity());
    assert!(
        fx.client
            .identity()
            .ends_with(&format!("/{}", std::process::id())),
        "the default identity is <host>/<pid>: {}",
        fx.client.identity()
    );
    // Bad identities are refused before any round trip, and nothing is taken.
    for bad in ["", "two words", "tab\there", &"x".repeat(129)] {
        match fx.client.lock("refused").identity(bad).acquire().await {
            Err(LockError::InvalidConfig { reason }) => {
                assert!(reason.contains("identity"), "{reason}")
            }
            other => panic!("identity {bad:?} accepted: {other:?}"),
        }
    }
    assert_eq!(
        fx.client.lock_state("refused").await.expect("lock_state"),
        LockState::Free
    );
    lease.release().await.expect("release");
    other.release().await.expect("release");
}

async fn a_waiter_that_waited_is_named_from_its_granted_attempt(fx: Fixture) {
    let first = fx.client.lock("waited").acquire().await.expect("acquire");
    let other = fx.another_client().await;
    let waiter = spawn_waiter(other, "waited", "patient", Duration::from_secs(20));
    // Hold it a while, so that the waiter's first attempt is long past when it gets it.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let released_at = SystemTime::now();
    let lease = release_to(first, waiter).await;
    let holder = holder_of(&fx.client, "waited").await;
    assert_eq!(holder.identity, "patient");
    // Named from the attempt that was granted (or the hand-off), not from when it began
    // waiting: no earlier than the release, to the millisecond.
    assert!(
        holder.since + Duration::from_millis(1) >= released_at,
        "held since {:?}, released at {released_at:?}",
        holder.since
    );
    lease.release().await.expect("release");
}

/// Hand-offs pass a lock between waiters of one client (Redis); the token the releaser mints
/// for the waiter must name the waiter, not the releaser.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_carries_the_waiters_identity() {
    let fx = Fixture::redis().await;
    let first = fx
        .client
        .lock("handed")
        .identity("releaser")
        .acquire()
        .await
        .expect("acquire");
    let client = fx.client.clone();
    let waiter = spawn_waiter(client, "handed", "receiver", Duration::from_secs(30));
    // Queued for a hand-off once it has found the lock busy twice.
    let deadline = Instant::now() + Duration::from_secs(20);
    while fx.client.__inspect().queued_for_handoff() == 0 {
        assert!(
            Instant::now() < deadline,
            "the waiter never queued for a hand-off"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let lease = release_to(first, waiter).await;
    let holder = holder_of(&fx.client, "handed").await;
    assert_eq!(holder.identity, "receiver");
    lease.release().await.expect("release");
}

/// Whether `semaphore_state` shows no holder of semaphore `pool`.
async fn pool_is_free(fx: &Fixture) -> bool {
    fx.client
        .semaphore_state("pool")
        .await
        .expect("state")
        .is_empty()
}

async fn semaphore_state_lists_each_lease_and_the_force_frees_and_tells_them(fx: Fixture) {
    const TTL: Duration = Duration::from_secs(30);
    assert!(pool_is_free(&fx).await);
    let asked_at = Instant::now();
    let two = fx
        .client
        .semaphore("pool", 5)
        .identity("importer")
        .ttl(TTL)
        .acquire_n(2)
        .await
        .expect("two permits");
    let other = fx.another_client().await;
    let one = other
        .semaphore("pool", 5)
        .identity("exporter")
        .ttl(TTL)
        .acquire()
        .await
        .expect("one permit");
    let mut state = fx.client.semaphore_state("pool").await.expect("state");
    state.sort_by_key(|h| h.permits);
    let seen: Vec<(u32, &str)> = state
        .iter()
        .map(|h| {
            (
                h.permits,
                h.holder.as_ref().expect("named").identity.as_str(),
            )
        })
        .collect();
    assert_eq!(seen, [(1, "exporter"), (2, "importer")]);
    assert!(state.iter().all(|h| h.remaining_ttl <= TTL));
    let (lost_two, lost_one) = (two.handle(), one.handle());
    fx.until_listening_for_forces(2).await;
    assert_eq!(
        fx.client
            .force_unlock_semaphore("pool")
            .await
            .expect("force"),
        2
    );
    assert!(pool_is_free(&fx).await);
    told_before_first_renewal(
        [lost_two, lost_one],
        asked_at + TTL / 3,
        "a forced permit holder is told before its first renewal",
    )
    .await;
    // All five permits are free again.
    let all = fx
        .client
        .semaphore("pool", 5)
        .acquire_n(5)
        .await
        .expect("every permit");
    assert_eq!(
        fx.client
            .force_unlock_semaphore("pool")
            .await
            .expect("force"),
        1
    );
    drop(all);
    assert!(matches!(
        fx.client.semaphore_state("").await,
        Err(LockError::InvalidName(_))
    ));
}

async fn rw_lock_state_shows_writer_and_readers_and_the_force_frees_and_tells_them(fx: Fixture) {
    const TTL: Duration = Duration::from_secs(30);
    let state = fx.client.rw_lock_state("doc").await.expect("state");
    assert!(state.writer.is_none() && state.readers.is_empty());
    let asked_at = Instant::now();
    let r1 = doc_as(&fx, "reader-a", TTL).read().await.expect("read");
    let r2 = doc_as(&fx, "reader-b", TTL).read().await.expect("read");
    let state = fx.client.rw_lock_state("doc").await.expect("state");
    assert!(state.writer.is_none());
    let mut readers: Vec<&str> = state
        .readers
        .iter()
        .map(|h| h.holder.as_ref().expect("named").identity.as_str())
        .collect();
    readers.sort_unstable();
    assert_eq!(readers, ["reader-a", "reader-b"]);
    let handles = [r1.handle(), r2.handle()];
    fx.until_listening_for_forces(1).await;
    assert_eq!(
        fx.client.force_unlock_rw_lock("doc").await.expect("force"),
        2
    );
    told_before_first_renewal(
        handles,
        asked_at + TTL / 3,
        "a forced reader is told before its first renewal",
    )
    .await;
    let writer = doc_as(&fx, "editor", TTL)
        .write()
        .await
        .expect("write after the force");
    let state = fx.client.rw_lock_state("doc").await.expect("state");
    let shown = state.writer.expect("a writer holds it");
    assert_eq!(shown.holder.expect("named").identity, "editor");
    assert_eq!(shown.permits, 1);
    let handle = writer.handle();
    assert_eq!(
        fx.client.force_unlock_rw_lock("doc").await.expect("force"),
        1
    );
    tokio::time::timeout(TTL / 3, handle.lost())
        .await
        .expect("a forced writer is told before its first renewal");
    let state = fx.client.rw_lock_state("doc").await.expect("state");
    assert!(state.writer.is_none() && state.readers.is_empty());
}

/// A client's identity is checked when it is built; a good one is what its leases carry.
#[tokio::test]
async fn a_client_identity_is_checked_at_build_and_carried() {
    for bad in ["", "with space", "ünïcode", &"y".repeat(129)] {
        match Client::builder().identity(bad).try_in_memory() {
            Err(StoreError::Config { message }) => {
                assert!(message.contains("identity"), "{message}")
            }
            other => panic!("identity {bad:?} accepted: {:?}", other.map(|_| ())),
        }
    }
    let client = Client::builder()
        .identity("scheduler-eu-1")
        .try_in_memory()
        .expect("a good identity");
    assert_eq!(client.identity(), "scheduler-eu-1");
    let lease = client.lock("job").acquire().await.expect("acquire");
    assert_eq!(holder_of(&client, "job").await.identity, "scheduler-eu-1");
    lease.release().await.expect("release");
}

/// With `watch_deletions(true)` and the server's keyspace notifications on, a lock key deleted
/// by hand (`DEL` from another connection, as an operator in `redis-cli` would) tells its
/// holder at once, not at its next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_deleted_by_hand_tells_a_watching_holder_at_once() {
    const TTL: Duration = Duration::from_secs(30);
    let server = crate::support::server::RedisServer::builder()
        .arg("--notify-keyspace-events", "Eg")
        .start();
    let watching = Client::builder()
        .watch_deletions(true)
        .connect(&server.url())
        .await
        .expect("connect");
    let asked_at = Instant::now();
    let lease = watching
        .lock("by-hand")
        .ttl(TTL)
        .acquire()
        .await
        .expect("acquire");
    let mut conn = server.conn().await;
    // The holder's client listens once its watchdog runs.
    until_subscribed(&mut conn, "__keyevent@0__:del", 1, "holders").await;
    let key = watching.__inspect().lock_key("by-hand").expect("key");
    let deleted_at = Instant::now();
    let deleted: u64 = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("DEL");
    assert_eq!(deleted, 1);
    tokio::time::timeout_at(asked_at + TTL / 3, lease.handle().lost())
        .await
        .expect("the holder is told before its first renewal");
    eprintln!("holder told {:?} after a DEL by hand", deleted_at.elapsed());
    assert_eq!(lease.lost_reason(), Some(distlock::LossReason::NotHeld));
}

/// `watch_deletions` is refused where keyspace notifications cannot be watched, before any
/// connection is made.
#[tokio::test]
async fn watching_deletions_is_refused_on_a_cluster_and_a_quorum() {
    let nodes = [
        "redis://127.0.0.1:1/",
        "redis://127.0.0.1:2/",
        "redis://127.0.0.1:3/",
    ];
    for refused in [
        Client::builder()
            .watch_deletions(true)
            .connect_cluster(nodes)
            .await
            .map(|_| ()),
        Client::builder()
            .watch_deletions(true)
            .connect_quorum(nodes)
            .await
            .map(|_| ()),
    ] {
        match refused {
            Err(StoreError::Config { message }) => {
                assert!(message.contains("watch_deletions"), "{message}")
            }
            other => panic!("accepted: {other:?}"),
        }
    }
}
