//! `#[distributed_lock]` on any store: the check, shared by the Cluster and quorum suites
//! (each includes this file by path: the support module is also built without the macros),
//! that the macro runs unchanged on a client of that store and serialises calls on one key.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use distlock::{Client, LockError, distributed_lock};

/// A read-yield-write of `counter`: a lost update unless calls on one `id` are serialised.
/// Returns the lease's fence (0 if the body ran without a lease).
#[distributed_lock(key = "settle:{id}", client = client, ttl = "5s", wait = "5s")]
async fn settle(client: &Client, id: u32, counter: &AtomicU64) -> Result<u64, LockError> {
    let seen = counter.load(Ordering::SeqCst);
    tokio::task::yield_now().await;
    counter.store(seen + 1, Ordering::SeqCst);
    match distlock::current_lease() {
        Some(lease) => lease.fence().await,
        None => Ok(0),
    }
}

/// `tasks` tasks each call the macro-locked `settle` `rounds` times on one key through
/// `client`: every call runs under a fenced lease and no update is lost.
pub async fn the_macro_serialises_calls(client: &Client, tasks: u64, rounds: u64) {
    let counter = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..tasks)
        .map(|_| {
            let (client, counter) = (client.clone(), counter.clone());
            tokio::spawn(async move {
                for _ in 0..rounds {
                    assert!(settle(&client, 1, &counter).await.expect("settle") > 0);
                }
            })
        })
        .collect();
    let spawned = tasks.len() as u64;
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(counter.load(Ordering::SeqCst), spawned * rounds);
}
