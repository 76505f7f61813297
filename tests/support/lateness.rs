//! How late this runtime runs its timers, measured while a test runs.
//!
//! A deadline (a response timeout, a rate-limit check's deadline, a lease's lost signal) is a
//! timer: the library can only keep it to within how late the runtime fires timers and polls
//! the task waiting on it. On a busy machine that lateness has no bound, so a fixed slack on
//! top of a deadline either fails there or is too loose to mean anything. A
//! [`LatenessProbe`] is a task of the test's own runtime that sleeps 2 ms at a time and adds
//! up how late it woke; a test then allows, on top of a deadline, what the probe measured
//! over the same span: the delay the runtime added to every timer of the library meanwhile.
//! On an idle machine that is a millisecond or two, so the bound stays tight.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

const PERIOD: Duration = Duration::from_millis(2);

/// A task measuring this runtime's timer lateness; stopped on drop.
pub struct LatenessProbe {
    /// Total lateness so far, in µs.
    total_us: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

/// A point of a [`LatenessProbe`]'s measure, to read the lateness since.
#[derive(Clone, Copy, Debug)]
pub struct Mark(u64);

impl LatenessProbe {
    /// Starts the probe on the current runtime.
    pub fn start() -> Self {
        let total_us = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn({
            let total_us = total_us.clone();
            async move {
                loop {
                    let due = Instant::now() + PERIOD;
                    tokio::time::sleep_until(due).await;
                    let late = Instant::now().saturating_duration_since(due);
                    let late = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
                    total_us.fetch_add(late, Ordering::Relaxed);
                }
            }
        });
        Self { total_us, task }
    }

    pub fn mark(&self) -> Mark {
        Mark(self.total_us.load(Ordering::Relaxed))
    }

    /// How late, in all, the probe's timers fired since `mark`: what the runtime added to a
    /// chain of timers and wake-ups in that span (each of which waited while the probe did),
    /// give or take one period.
    pub fn since(&self, mark: Mark) -> Duration {
        Duration::from_micros(self.total_us.load(Ordering::Relaxed).saturating_sub(mark.0))
    }
}

/// What a timed promise on the real clock is allowed besides its own figure and the
/// runtime's measured lateness: the round trips around it on loopback (the attempt that finds
/// the lock busy, the one that takes it, a renewal) and the work of the task that measures it.
pub const ROUND_TRIPS: Duration = Duration::from_millis(100);

impl LatenessProbe {
    /// The bound of a timed promise measured since `mark`: `promise` (the library's own
    /// figure, its jitter included), plus [`ROUND_TRIPS`], plus how late this runtime ran
    /// its timers since `mark`.
    pub fn bound(&self, mark: Mark, promise: Duration) -> Duration {
        promise + ROUND_TRIPS + self.since(mark)
    }
}

impl Drop for LatenessProbe {
    fn drop(&mut self) {
        self.task.abort();
    }
}
