//! Issue 44, a graceful drain: `Client::close`, `Client::shutdown` and `Client::own_leases`.
//! On both stores, what a shutting-down client refuses, lists and gives back; across two OS
//! processes, a holder of 100 leases and an election's leader that drains on SIGTERM lets
//! another process take a lock and the leadership at once, not after the ttl.

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};

use distlock::{Client, LeaseKind, LockError, LockState, LossReason, ReleaseOutcome};

use crate::support::RedisServer;
use crate::support::child::{self, ChildProcess, say};
use crate::support::fixture::{Fixture, connect, on_both_stores};
use crate::support::server::until_subscribed;

/// The ttl of every lease here: long, so that a lease that went free before it ran out was
/// given back, not left to expire.
const TTL: Duration = Duration::from_secs(30);

on_both_stores!(
    shutdown_refuses_lists_and_gives_back,
    close_keeps_the_held_leases_and_refuses_new_ones,
);

fn is_shutting_down<T: std::fmt::Debug>(result: Result<T, LockError>, name: &str) {
    match result {
        Err(LockError::ShuttingDown { name: refused }) => assert_eq!(refused, name),
        other => panic!("`{name}` refused with ShuttingDown, got {other:?}"),
    }
}

/// Every primitive's lease is listed (with its kind, its grant time, its fence once minted,
/// one that the watchdog does not renew too), all are given back by `shutdown`, whose report
/// names them; the guards' lost signals fire with the shutdown reason; a waiter of the client
/// gives up; nothing new is granted; the list is empty after, and so is a second report.
async fn shutdown_refuses_lists_and_gives_back(fx: Fixture) {
    let client = &fx.client;
    let before = SystemTime::now();
    let lock = client
        .lock("drain:lock")
        .ttl(TTL)
        .acquire()
        .await
        .expect("lock");
    let fence = lock.fence().await.expect("fence");
    let unwatched = client
        .lock("drain:unwatched")
        .ttl(TTL)
        .watchdog(false)
        .acquire()
        .await
        .expect("lock without the watchdog");
    let permits = client
        .semaphore("drain:permits", 3)
        .ttl(TTL)
        .acquire_n(2)
        .await
        .expect("permits");
    let read = client
        .rw_lock("drain:rw")
        .ttl(TTL)
        .read()
        .await
        .expect("read");
    let multi = client
        .multi_lock(["drain:m1", "drain:m2"])
        .ttl(TTL)
        .acquire()
        .await
        .expect("multi-lock");
    let election = client
        .election("drain:election")
        .ttl(TTL)
        .build()
        .expect("election");
    let leadership = election.campaign("me").await.expect("campaign");
    let (job_started, job_running) = tokio::sync::oneshot::channel();
    let job = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .job("drain:job")
                .ttl(TTL)
                // A body that never ends by itself: only the drain can stop it (a body that
                // awaited its own lost signal would race the run's stop and might finish).
                .run(|_lease| async move {
                    let _ = job_started.send(());
                    std::future::pending::<()>().await;
                })
                .await
        }
    });
    job_running.await.expect("the job runs");

    let listed = client.own_leases();
    let kinds: BTreeSet<(String, LeaseKind)> = listed
        .iter()
        .map(|lease| (lease.name.clone(), lease.kind))
        .collect();
    let expected: BTreeSet<(String, LeaseKind)> = [
        ("drain:lock", LeaseKind::Lock),
        ("drain:unwatched", LeaseKind::Lock),
        ("drain:permits", LeaseKind::Permits),
        ("drain:rw", LeaseKind::Read),
        ("drain:m1", LeaseKind::MultiLock),
        ("drain:m2", LeaseKind::MultiLock),
        ("drain:election", LeaseKind::ElectionTerm),
        ("drain:job", LeaseKind::JobRun),
    ]
    .into_iter()
    .map(|(name, kind)| (name.to_owned(), kind))
    .collect();
    assert_eq!(kinds, expected, "listed: {listed:?}");
    assert_eq!(listed.len(), expected.len(), "one entry each: {listed:?}");
    let now = SystemTime::now();
    for lease in &listed {
        assert!(before <= lease.since && lease.since <= now, "{lease:?}");
    }
    let fence_of = |name: &str| {
        listed
            .iter()
            .find(|lease| lease.name == name)
            .map(|lease| lease.fence)
    };
    assert_eq!(
        fence_of("drain:lock"),
        Some(Some(fence)),
        "minted fence listed"
    );
    assert_eq!(
        fence_of("drain:unwatched"),
        Some(None),
        "listing mints nothing"
    );
    assert_eq!(
        fence_of("drain:election"),
        Some(Some(leadership.term())),
        "a term is its fence"
    );

    // A waiter of this client: it must give up, not be handed the lock as it is drained.
    let waiter = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .lock("drain:lock")
                .wait(Duration::from_secs(60))
                .acquire()
                .await
        }
    });
    let handles = [lock.handle(), unwatched.handle(), leadership.handle()];

    let report = client.shutdown(Duration::from_secs(10)).await;
    assert!(report.not_released.is_empty(), "{report:?}");
    let released: BTreeSet<(String, LeaseKind)> = report
        .released
        .iter()
        .map(|lease| (lease.name.clone(), lease.kind))
        .collect();
    assert_eq!(released, expected, "{report:?}");
    assert!(client.is_closed());

    for handle in &handles {
        assert_eq!(
            handle.lost_reason(),
            Some(LossReason::Shutdown),
            "{handle:?}"
        );
    }
    assert_eq!(permits.lost_reason(), Some(LossReason::Shutdown));
    assert_eq!(read.lost_reason(), Some(LossReason::Shutdown));
    assert!(multi.is_lost());
    match job.await.expect("job task") {
        Err(LockError::LeaseLost {
            reason: LossReason::Shutdown,
            ..
        }) => {}
        other => panic!("the job's body stopped by the drain, got {other:?}"),
    }
    // Given back in the store: free for everyone at once, not after the ttl.
    for name in [
        "drain:lock",
        "drain:unwatched",
        "drain:m1",
        "drain:election",
    ] {
        assert_eq!(
            client.lock_state(name).await.expect("lock_state"),
            LockState::Free,
            "{name} given back\n{}",
            fx.log()
        );
    }
    // The waiter gave up when the drain began (not granted the lock once its ttl ran out).
    let waited = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter gives up at once");
    is_shutting_down(waited.expect("waiter task"), "drain:lock");

    // Nothing new.
    is_shutting_down(client.lock("drain:new").acquire().await, "drain:new");
    is_shutting_down(
        client.semaphore("drain:permits", 3).acquire().await,
        "drain:permits",
    );
    is_shutting_down(client.rw_lock("drain:rw").write().await, "drain:rw");
    is_shutting_down(
        client.multi_lock(["drain:x", "drain:y"]).acquire().await,
        "drain:x",
    );
    is_shutting_down(election.campaign("me again").await, "drain:election");
    is_shutting_down(client.job("drain:job").run(|_| async {}).await, "drain:job");
    assert!(client.own_leases().is_empty());

    // The guards the application still holds: nothing left to send.
    assert_eq!(
        lock.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    drop((unwatched, permits, read, multi, leadership));
    let again = client.shutdown(Duration::from_secs(10)).await;
    assert!(
        again.is_empty(),
        "a second shutdown finds nothing: {again:?}"
    );
}

/// `close` refuses new leases at once but keeps the held ones (renewed, usable), so the work
/// in flight finishes under them; the shutdown that follows gives them back.
async fn close_keeps_the_held_leases_and_refuses_new_ones(fx: Fixture) {
    let client = &fx.client;
    let held = client
        .lock("close:held")
        .ttl(TTL)
        .acquire()
        .await
        .expect("lock");
    let clone = client.clone();
    clone.close();
    assert!(client.is_closed(), "clones share the state");
    is_shutting_down(client.lock("close:new").acquire().await, "close:new");
    held.ensure_held().expect("still held after close");
    let fence = held.fence().await.expect("a fence can still be minted");
    assert_eq!(client.own_leases().len(), 1);
    assert_eq!(client.own_leases()[0].fence, Some(fence));
    // No deadline at all is a deadline too (no overflow).
    let report = client.shutdown(Duration::MAX).await;
    assert_eq!(report.released.len(), 1, "{report:?}");
    assert_eq!(held.lost_reason(), Some(LossReason::Shutdown));
}

/// This module's entry test for child processes.
const ENTRY: &str = "drain::child_entry";

/// How many locks the draining child holds.
const HELD: usize = 100;

/// Entry point of the child processes; does nothing unless the parent set a role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as a child process of the tests in this module"]
async fn child_entry() {
    let Some((role, url)) = child::role() else {
        return;
    };
    let client = connect(&url).await;
    match role.as_str() {
        "drain-on-sigterm" => child_drain_on_sigterm(client).await,
        other => panic!("unknown child role {other}"),
    }
}

/// Holds 100 locks and leads an election, each with a 30 s ttl, until SIGTERM; then drains
/// and reports what the drain gave back, how long it took, and why its guards' lost signals
/// fired.
async fn child_drain_on_sigterm(client: Client) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut leases = Vec::with_capacity(HELD);
    for i in 0..HELD {
        let lease = client
            .lock(format!("drain:{i}"))
            .ttl(TTL)
            .acquire()
            .await
            .expect("acquire");
        leases.push(lease);
    }
    let leadership = client
        .election("drain:leader")
        .ttl(TTL)
        .build()
        .expect("election")
        .campaign("child")
        .await
        .expect("campaign");
    say(&format!("READY term={}", leadership.term()));
    terminate.recv().await;
    let report = client.shutdown(Duration::from_secs(10)).await;
    say(&format!(
        "DRAINED released={} not_released={} took_us={}",
        report.released.len(),
        report.not_released.len(),
        report.took.as_micros()
    ));
    let reasons: BTreeSet<String> = leases
        .iter()
        .map(|lease| format!("{:?}", lease.lost_reason()))
        .chain(std::iter::once(format!("{:?}", leadership.lost_reason())))
        .collect();
    say(&format!("LOST {reasons:?}"));
    say("DONE");
}

/// Issue 44's test: a process holding 100 leases and leading an election drains on SIGTERM;
/// another process, waiting for one of those locks and campaigning, gets the lock and the
/// leadership within seconds of the signal, far inside the 30 s ttl the leases would
/// otherwise have run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_draining_on_sigterm_frees_its_locks_and_leadership_at_once() {
    let server = RedisServer::start();
    let child = ChildProcess::spawn(ENTRY, "drain-on-sigterm", &server.url());
    child.expect_line("READY", Duration::from_secs(60));
    let client = connect(&server.url()).await;
    assert!(
        matches!(
            client.lock_state("drain:7").await.expect("lock_state"),
            LockState::Held { .. }
        ),
        "the child holds the locks"
    );
    let election = client
        .election("drain:leader")
        .ttl(TTL)
        .build()
        .expect("election");
    let previous = election
        .leader()
        .await
        .expect("leader")
        .expect("the child leads");
    let waiter = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .lock("drain:7")
                .ttl(TTL)
                .wait(TTL * 2)
                .acquire()
                .await
        }
    });
    let campaign = tokio::spawn({
        let election = election.clone();
        async move { election.campaign("parent").await }
    });
    // Both wait on the release channels before the signal (a release is announced to those
    // who listen; one that missed it would look again only after the holder's ttl).
    let mut conn = server.conn().await;
    let prefix = distlock::DEFAULT_PREFIX;
    until_subscribed(
        &mut conn,
        &format!("{prefix}:released:{{drain:7}}"),
        1,
        "waiter",
    )
    .await;
    until_subscribed(
        &mut conn,
        &format!("{prefix}:released:{{drain:leader}}"),
        1,
        "campaigner",
    )
    .await;

    let signalled = Instant::now();
    child.signal(libc::SIGTERM);
    let lease = waiter.await.expect("waiter task").expect("acquired");
    let lock_after = signalled.elapsed();
    let leadership = campaign.await.expect("campaign task").expect("elected");
    let leader_after = signalled.elapsed();
    let drained = child.expect_line("DRAINED", Duration::from_secs(30));
    let lost = child.expect_line("LOST", Duration::from_secs(10));
    child.expect_line("DONE", Duration::from_secs(10));
    eprintln!(
        "child {drained}; after SIGTERM the parent got the lock in {lock_after:?} and the \
         leadership in {leader_after:?}"
    );
    assert!(
        drained.starts_with(&format!("DRAINED released={} not_released=0 ", HELD + 1)),
        "{drained}"
    );
    assert_eq!(lost, "LOST {\"Some(Shutdown)\"}");
    // The bound is the ttl (what the waiters would have waited without a drain), with room
    // for a loaded machine; a drain answers within a few round trips.
    let bound = Duration::from_secs(5);
    assert!(lock_after < bound, "lock after {lock_after:?}");
    assert!(leader_after < bound, "leadership after {leader_after:?}");
    assert!(leadership.term() > previous.term);
    drop(lease);
    drop(leadership);
    child.wait_success(Duration::from_secs(10));
}
