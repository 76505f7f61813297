//! Batching on Redis: concurrent operations of one client share script calls, and every caller
//! still gets its own answer.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use distlock::{LockError, ReleaseOutcome};

use crate::support::fixture::Fixture;
use crate::support::server::command_calls;

async fn evalsha_calls(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    command_calls(conn, "evalsha").await
}

/// 512 tasks acquire at once: 448 distinct free locks and 64 tries of 8 shared ones. Every
/// distinct lock is granted with its own fence, exactly one try per shared lock wins, and all
/// of it took fewer script calls than operations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acquires_and_releases_share_calls_and_keep_their_answers() {
    const DISTINCT: usize = 448;
    const SHARED_TRIES: usize = 64;
    const SHARED_NAMES: usize = 8;
    let fx = Fixture::redis().await;
    let mut conn = fx.server.as_ref().expect("redis").conn().await;
    // Load the scripts first, so the counts below are all batched calls.
    fx.client
        .lock("warm")
        .acquire()
        .await
        .expect("warm")
        .release()
        .await
        .expect("warm release");
    let before = evalsha_calls(&mut conn).await;

    let barrier = Arc::new(tokio::sync::Barrier::new(DISTINCT + SHARED_TRIES));
    let mut tasks = Vec::new();
    for i in 0..DISTINCT + SHARED_TRIES {
        let client = fx.client.clone();
        let barrier = barrier.clone();
        let name = if i < DISTINCT {
            format!("own-{i}")
        } else {
            format!("shared-{}", i % SHARED_NAMES)
        };
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let got = client
                .lock(&name)
                .ttl(Duration::from_secs(30))
                .acquire()
                .await;
            (name, got)
        }));
    }
    let mut leases = Vec::new();
    let mut shared_winners = HashSet::new();
    for task in tasks {
        let (name, got) = task.await.expect("task");
        match got {
            Ok(lease) => {
                if name.starts_with("shared-") {
                    assert!(shared_winners.insert(name.clone()), "{name} won twice");
                }
                leases.push(lease);
            }
            Err(LockError::Busy { .. }) => {
                assert!(name.starts_with("shared-"), "{name} was busy");
            }
            Err(other) => panic!("{name}: {other}\n{}", fx.log()),
        }
    }
    assert_eq!(shared_winners.len(), SHARED_NAMES);
    assert_eq!(leases.len(), DISTINCT + SHARED_NAMES);
    let mut fences = HashSet::new();
    for lease in &leases {
        fences.insert(lease.fence().await.expect("fence"));
    }
    assert_eq!(fences.len(), leases.len(), "two grants shared a fence");

    let releases = leases
        .into_iter()
        .map(|lease| tokio::spawn(async move { (lease.name().to_owned(), lease.release().await) }));
    let releases: Vec<_> = releases.collect();
    for release in releases {
        let (name, outcome) = release.await.expect("task");
        assert_eq!(
            outcome.expect("release"),
            ReleaseOutcome::Released,
            "{name}"
        );
    }
    let calls = evalsha_calls(&mut conn).await - before;
    let ops = (DISTINCT + SHARED_TRIES + DISTINCT + SHARED_NAMES) as u64;
    assert!(
        calls < ops,
        "{calls} script calls for {ops} operations: nothing was batched"
    );
    let left = crate::semantics::lock_keys_left(&fx.client).await;
    assert!(left.is_empty(), "locks left behind: {left:?}");
}
