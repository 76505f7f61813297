//! TESTPLAN 1 through the macro: 16 tasks × 250 calls of a locked function that does a
//! non-atomic read-modify-write and records its hold interval.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distlock::{Client, LockError, distributed_lock};
use rand::Rng as _;

use crate::support::fixture::{Fixture, on_both_stores};

const TASKS: usize = 16;
const SECTIONS: usize = 250;

on_both_stores!(locked_fn_never_overlaps_across_16_tasks);

#[derive(Default)]
struct Shared {
    counter: AtomicU64,
    intervals: Mutex<Vec<(Instant, Instant)>>,
}

#[distributed_lock(key = "exclusion", client = client, ttl = "5s", wait = "60s")]
async fn critical_section(client: &Client, shared: &Shared) -> Result<(), LockError> {
    let start = Instant::now();
    let seen = shared.counter.load(Ordering::SeqCst);
    let pause = {
        let mut rng = rand::rng();
        rng.random_bool(0.5)
            .then(|| Duration::from_micros(rng.random_range(0..2000)))
    };
    match pause {
        Some(pause) => tokio::time::sleep(pause).await,
        None => tokio::task::yield_now().await,
    }
    shared.counter.store(seen + 1, Ordering::SeqCst);
    let end = Instant::now();
    shared
        .intervals
        .lock()
        .expect("intervals")
        .push((start, end));
    Ok(())
}

async fn locked_fn_never_overlaps_across_16_tasks(store: Fixture) {
    let shared = Arc::new(Shared::default());
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let client = store.another_client().await;
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..SECTIONS {
                critical_section(&client, &shared)
                    .await
                    .expect("critical section");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(
        shared.counter.load(Ordering::SeqCst),
        (TASKS * SECTIONS) as u64,
        "lost updates: two callers were inside at once\n{}",
        store.log()
    );
    let mut intervals = shared.intervals.lock().expect("intervals").clone();
    assert_eq!(intervals.len(), TASKS * SECTIONS);
    intervals.sort_by_key(|i| i.0);
    let overlap = intervals.windows(2).find(|w| w[1].0 < w[0].1);
    assert_eq!(overlap, None, "two hold intervals overlap");
    assert!(!store.is_held("exclusion").await, "released at the end");
}
