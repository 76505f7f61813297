//! How long a layer's requests held their leases lately: [`RecentHolds`], fed by a
//! [`HoldTimer`] that the response body drops with its lease. A leaf: the lease path and the
//! response body both use it, and neither imports the other for it.

use std::sync::Arc;
use std::time::Duration;

/// How many of a layer's latest holds [`RecentHolds`] keeps.
const RECENT_HOLDS: usize = 16;

/// The durations of a layer's latest holds (from the grant to the release's start), kept
/// without a lock: what a refused request is told to wait at most for a lease this layer's
/// requests hold (see `LockLayerBuilder`'s `Retry-After`).
#[derive(Debug, Default)]
pub(crate) struct RecentHolds {
    /// Microseconds plus one; 0 is an empty slot.
    slots: [std::sync::atomic::AtomicU64; RECENT_HOLDS],
    next: std::sync::atomic::AtomicUsize,
}

impl RecentHolds {
    fn record(&self, held: Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        let at = self.next.fetch_add(1, Relaxed) % RECENT_HOLDS;
        let micros = u64::try_from(held.as_micros()).unwrap_or(u64::MAX - 1);
        self.slots[at].store(micros.saturating_add(1), Relaxed);
    }

    /// The longest of the latest holds, if any ended yet.
    pub(crate) fn longest(&self) -> Option<Duration> {
        let longest = self
            .slots
            .iter()
            .map(|slot| slot.load(std::sync::atomic::Ordering::Relaxed))
            .max()
            .filter(|&m| m > 0)?;
        Some(Duration::from_micros(longest - 1))
    }
}

/// A hold in progress: its duration goes to the layer's [`RecentHolds`] when it is dropped
/// (with the lease, when the response body ends or is dropped).
pub(crate) struct HoldTimer {
    started: std::time::Instant,
    holds: Arc<RecentHolds>,
}

impl HoldTimer {
    pub(crate) fn start(holds: &Arc<RecentHolds>) -> Self {
        Self {
            started: std::time::Instant::now(),
            holds: Arc::clone(holds),
        }
    }
}

impl Drop for HoldTimer {
    fn drop(&mut self) {
        self.holds.record(self.started.elapsed());
    }
}

impl std::fmt::Debug for HoldTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HoldTimer")
            .field("started", &self.started)
            .finish_non_exhaustive()
    }
}
