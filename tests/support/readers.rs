//! A writer behind a stream of readers: the body the read-write lock's and the hierarchy's
//! writer-starvation tests share (`tests/lock/rwlock.rs`, [`super::hierarchy`]).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use distlock::{Lease, LockError};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Reader tasks that take a shared lease over and over, each held 40 ms and given back at
/// once, and note whether the writer was in while they were.
pub struct ReaderStream {
    stop: Arc<AtomicBool>,
    writer_in: Arc<AtomicBool>,
    overlap: Arc<AtomicBool>,
    inside: Arc<AtomicI64>,
    tasks: Vec<JoinHandle<()>>,
}

impl ReaderStream {
    /// Starts one reader task per entry of `readers`, which takes its leases (a failed take is
    /// tried again); the n-th starts 7n ms after the first, so that some reader is always in.
    pub fn start<R, F>(readers: impl IntoIterator<Item = R>) -> Self
    where
        R: Fn() -> F + Send + 'static,
        F: Future<Output = Result<Lease, LockError>> + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let writer_in = Arc::new(AtomicBool::new(false));
        let overlap = Arc::new(AtomicBool::new(false));
        let inside = Arc::new(AtomicI64::new(0));
        let tasks = readers
            .into_iter()
            .zip(0u64..)
            .map(|(read, task)| {
                let (stop, writer_in, overlap, inside) = (
                    stop.clone(),
                    writer_in.clone(),
                    overlap.clone(),
                    inside.clone(),
                );
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(7 * task)).await;
                    while !stop.load(Ordering::SeqCst) {
                        let Ok(lease) = read().await else {
                            continue;
                        };
                        inside.fetch_add(1, Ordering::SeqCst);
                        if writer_in.load(Ordering::SeqCst) {
                            overlap.store(true, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(40)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        let _ = lease.release().await;
                    }
                })
            })
            .collect();
        Self {
            stop,
            writer_in,
            overlap,
            inside,
            tasks,
        }
    }

    /// How many readers hold a lease now.
    pub fn inside(&self) -> i64 {
        self.inside.load(Ordering::SeqCst)
    }

    /// Five writes taken with `write`, each timed from the call, held 20 ms, 150 ms apart; then
    /// stops the readers. Asserts that no reader was in while `writer` was, and returns the
    /// writes' waits.
    pub async fn writer_waits<W, F>(self, writer: &str, write: W) -> Vec<Duration>
    where
        W: Fn() -> F,
        F: Future<Output = Result<Lease, LockError>>,
    {
        let mut waits = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            let lease = write().await.expect("the writer gets in");
            waits.push(started.elapsed());
            self.writer_in.store(true, Ordering::SeqCst);
            if self.inside() > 0 {
                self.overlap.store(true, Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            self.writer_in.store(false, Ordering::SeqCst);
            lease.release().await.expect("release");
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            task.await.expect("reader");
        }
        assert!(
            !self.overlap.load(Ordering::SeqCst),
            "a reader overlapped {writer}"
        );
        waits
    }
}
