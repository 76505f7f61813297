//! How late this runtime runs its timers, measured while a test runs.
//!
//! A deadline (a response timeout, a rate-limit check's deadline, a lease's lost signal) is a
//! timer: the library can only keep it to within how late the runtime fires timers and polls
//! the task waiting on it. On a busy machine that lateness has no bound, so a fixed slack on
//! top of a deadline either fails there or is too loose to mean anything. A
//! [`LatenessProbe`] is a task of the test's own runtime that sleeps 2 ms at a time and adds
//! up how late it woke; a test then allows, on top of a deadline, what the probe measured
//! over the same span: the delay the runtime added to every timer of the library meanwhile
//! ([`since`](LatenessProbe::since), for a chain of timers), or the worst delay of one timer
//! ([`worst_since`](LatenessProbe::worst_since), for a promise that rests on one).
//! On an idle machine that is a millisecond or two, so the bound stays tight.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

const PERIOD: Duration = Duration::from_millis(2);

/// How many of its latest ticks the probe keeps, for [`LatenessProbe::worst_since`]: two
/// minutes of them.
const KEPT_TICKS: usize = 60_000;

/// A task measuring this runtime's timer lateness; stopped on drop.
pub struct LatenessProbe {
    /// Total lateness so far, in µs.
    total_us: Arc<AtomicU64>,
    /// Each recent tick's due time and lateness (µs), oldest first.
    ticks: Arc<Mutex<VecDeque<(Instant, u64)>>>,
    task: JoinHandle<()>,
}

/// A point of a [`LatenessProbe`]'s measure, to read the lateness since.
#[derive(Clone, Copy, Debug)]
pub struct Mark(u64, Instant);

impl LatenessProbe {
    /// Starts the probe on the current runtime.
    pub fn start() -> Self {
        let total_us = Arc::new(AtomicU64::new(0));
        let ticks = Arc::new(Mutex::new(VecDeque::new()));
        let task = tokio::spawn({
            let total_us = total_us.clone();
            let ticks = ticks.clone();
            async move {
                loop {
                    let due = Instant::now() + PERIOD;
                    tokio::time::sleep_until(due).await;
                    let late = Instant::now().saturating_duration_since(due);
                    let late = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
                    total_us.fetch_add(late, Ordering::Relaxed);
                    let mut ticks = ticks.lock().unwrap_or_else(PoisonError::into_inner);
                    if ticks.len() == KEPT_TICKS {
                        ticks.pop_front();
                    }
                    ticks.push_back((due, late));
                }
            }
        });
        Self {
            total_us,
            ticks,
            task,
        }
    }

    pub fn mark(&self) -> Mark {
        Mark(self.total_us.load(Ordering::Relaxed), Instant::now())
    }

    /// How late, in all, the probe's timers fired since `mark`: what the runtime added to a
    /// chain of timers and wake-ups in that span (each of which waited while the probe did),
    /// give or take one period.
    pub fn since(&self, mark: Mark) -> Duration {
        Duration::from_micros(self.total_us.load(Ordering::Relaxed).saturating_sub(mark.0))
    }

    /// How late the probe's latest timer fired, at worst, among those due since `mark` (and
    /// the one due just before it, which may have fired after it): what the runtime added to
    /// any one timer of the library meanwhile. Unlike [`since`](Self::since), it does not
    /// grow with the span: tokio fires timers at millisecond boundaries, so every tick is a
    /// little late and a sum over seconds is far more than any one timer lost.
    pub fn worst_since(&self, mark: Mark) -> Duration {
        let ticks = self.ticks.lock().unwrap_or_else(PoisonError::into_inner);
        let from = mark.1.checked_sub(PERIOD).unwrap_or(mark.1);
        let worst = ticks
            .iter()
            .rev()
            .take_while(|(due, _)| *due >= from)
            .map(|(_, late)| *late)
            .max()
            .unwrap_or(0);
        // The tick that may still be pending now is as late as it has waited so far.
        let pending = Instant::now()
            .saturating_duration_since(ticks.back().map_or(mark.1, |(due, _)| *due) + PERIOD);
        Duration::from_micros(worst).max(pending)
    }
}

/// What a timed promise on the real clock is allowed besides its own figure and the
/// runtime's measured lateness: the round trips around it on loopback (the attempt that finds
/// the lock busy, the one that takes it, a renewal) and the work of the task that measures it.
pub const ROUND_TRIPS: Duration = Duration::from_millis(100);

impl LatenessProbe {
    /// The bound of a timed promise measured since `mark`: `promise` (the library's own
    /// figure, its jitter included), plus [`ROUND_TRIPS`], plus twice the worst lateness of
    /// one timer since `mark` (the library's timer, and the wake-up of the task that reads
    /// the time after it).
    pub fn bound(&self, mark: Mark, promise: Duration) -> Duration {
        promise + ROUND_TRIPS + self.worst_since(mark) * 2
    }
}

impl Drop for LatenessProbe {
    fn drop(&mut self) {
        self.task.abort();
    }
}
