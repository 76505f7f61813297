//! Read-write locks on both stores: readers overlap, a writer never overlaps anyone, a writer
//! waiting behind a stream of readers gets in within a bound, one fence sequence for both
//! sides.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::time::Duration;

use distlock::{LockError, ReleaseOutcome};
use tokio::time::Instant;

use crate::support::fixture::{Fixture, on_both_stores};
use crate::support::readers::ReaderStream;

on_both_stores!(
    readers_overlap_and_a_writer_overlaps_nobody,
    fences_are_one_sequence_for_readers_and_writers,
    the_rw_lock_is_not_the_lock_of_the_same_name,
);
on_both_stores!(
    paused_memory: a_writer_behind_a_stream_of_readers_gets_in_within_a_bound,
    a_dead_reader_frees_its_place_within_its_ttl,
);

/// 6 reader tasks and 2 writer tasks (two clients) for 2 s: at any instant either readers
/// (any number) or one writer are inside; more than one reader is seen inside at once.
async fn readers_overlap_and_a_writer_overlaps_nobody(fx: Fixture) {
    // Readers inside, or -1 for a writer.
    let inside = Arc::new(AtomicI64::new(0));
    let most_readers = Arc::new(AtomicI64::new(0));
    let violations = Arc::new(AtomicU32::new(0));
    let writes = Arc::new(AtomicU32::new(0));
    let until = Instant::now() + Duration::from_secs(2);
    let other = fx.another_client().await;
    let mut tasks = Vec::new();
    for task in 0..8 {
        let client = if task % 2 == 0 {
            fx.client.clone()
        } else {
            other.clone()
        };
        let writer = task < 2;
        let (inside, most_readers, violations, writes) = (
            inside.clone(),
            most_readers.clone(),
            violations.clone(),
            writes.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while Instant::now() < until {
                let rw = client
                    .rw_lock("doc")
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(30));
                if writer {
                    let lease = rw.write().await.expect("write");
                    if inside
                        .compare_exchange(0, -1, Ordering::SeqCst, Ordering::SeqCst)
                        .is_err()
                    {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    inside.store(0, Ordering::SeqCst);
                    writes.fetch_add(1, Ordering::SeqCst);
                    lease.release().await.expect("release");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                } else {
                    let lease = rw.read().await.expect("read");
                    let now = inside.fetch_add(1, Ordering::SeqCst);
                    if now < 0 {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    most_readers.fetch_max(now + 1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(rand::random_range(2..12))).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    lease.release().await.expect("release");
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(
        violations.load(Ordering::SeqCst),
        0,
        "a writer overlapped someone"
    );
    assert!(writes.load(Ordering::SeqCst) > 0, "no writer got in");
    assert!(
        most_readers.load(Ordering::SeqCst) > 1,
        "readers never overlapped"
    );
}

/// 6 readers keep the lock read-held without a gap (each holds 40 ms and comes back at once);
/// a writer that starts waiting meanwhile gets in within a bound: the readers already in
/// finish, no new one starts.
async fn a_writer_behind_a_stream_of_readers_gets_in_within_a_bound(fx: Fixture) {
    // Where nothing runs late, the readers' 40 ms holds and a few round trips. On the real
    // clock a busy machine stretches every hold and round trip by an amount nothing bounds:
    // there the bound only tells "the readers in finish, no new one starts" from a writer
    // starved for its whole 10 s wait, with seconds to spare.
    let bound = if fx.paused() {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(5)
    };
    let mut readers = Vec::new();
    for _ in 0..6 {
        let client = fx.another_client().await;
        readers.push(move || {
            let client = client.clone();
            async move {
                client
                    .rw_lock("stream")
                    .wait(Duration::from_secs(10))
                    .read()
                    .await
            }
        });
    }
    let stream = ReaderStream::start(readers);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(stream.inside() > 0, "the readers do not hold the lock");
    let waits = stream
        .writer_waits("the writer", || {
            fx.client
                .rw_lock("stream")
                .wait(Duration::from_secs(10))
                .write()
        })
        .await;
    let longest = waits.iter().max().copied().unwrap_or_default();
    eprintln!("writer waits behind a stream of 6 readers (40 ms holds): {waits:?}");
    assert!(
        longest < bound,
        "a writer waited {longest:?} behind the readers: {waits:?}"
    );
}

async fn fences_are_one_sequence_for_readers_and_writers(fx: Fixture) {
    let rw = || fx.client.rw_lock("fenced");
    let r1 = rw().read().await.expect("read");
    let r2 = rw().read().await.expect("read");
    assert!(r2.fence().await.expect("fence") > r1.fence().await.expect("fence"));
    let read_fence = r2.fence().await.expect("fence");
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    let w = rw().write().await.expect("write");
    let write_fence = w.fence().await.expect("fence");
    assert!(write_fence > read_fence);
    assert!(matches!(rw().read().await, Err(LockError::Busy { .. })));
    assert!(matches!(rw().write().await, Err(LockError::Busy { .. })));
    assert_eq!(
        w.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let r3 = rw().read().await.expect("read");
    assert!(r3.fence().await.expect("fence") > write_fence);
    r3.release().await.expect("release");
}

/// A reader that stops renewing (no watchdog, the lease forgotten) leaves within its ttl, and
/// a waiting writer gets in then.
async fn a_dead_reader_frees_its_place_within_its_ttl(fx: Fixture) {
    const TTL: Duration = Duration::from_millis(400);
    let called = Instant::now();
    let dead = fx
        .client
        .rw_lock("dies")
        .ttl(TTL)
        .watchdog(false)
        .read()
        .await
        .expect("read");
    std::mem::forget(dead);
    let other = fx.another_client().await;
    let started = Instant::now();
    let writer = other
        .rw_lock("dies")
        .wait(Duration::from_secs(10))
        .write()
        .await
        .expect("the writer gets in");
    let waited = started.elapsed();
    // Not before the dead reader's entry expired: granted after `called`, it lived a ttl
    // from then at least (1 ms: the store's millisecond expiries).
    assert!(
        started + waited + Duration::from_millis(1) >= called + TTL,
        "the writer got in {waited:?} after a dead reader with a ttl of {TTL:?}"
    );
    if fx.paused() {
        // At its expiry, where nothing runs late: the writer slept the pttl it was told plus
        // its jitter (a tenth of it) and tokio's 1 ms timer resolution.
        assert!(
            waited <= TTL + TTL / 10 + Duration::from_millis(1),
            "waited {waited:?} for a ttl of {TTL:?}"
        );
    }
    writer.release().await.expect("release");
}

async fn the_rw_lock_is_not_the_lock_of_the_same_name(fx: Fixture) {
    let w = fx
        .client
        .rw_lock("shared-name")
        .write()
        .await
        .expect("write");
    let l = fx.client.lock("shared-name").acquire().await.expect("lock");
    let s = fx
        .client
        .semaphore("shared-name", 1)
        .acquire()
        .await
        .expect("semaphore");
    for lease in [w, l, s] {
        assert_eq!(
            lease.release().await.expect("release"),
            ReleaseOutcome::Released
        );
    }
}
