//! The in-memory store: one process, a mutex around the maps. The same rules as Redis.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{Fenced, LOG_LEN, Log, Sale};

#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    seats: BTreeMap<u32, Seat>,
    logs: HashMap<Log, (u64, VecDeque<String>)>,
}

#[derive(Debug, Default)]
struct Seat {
    /// The highest fence that touched the seat.
    fence: u64,
    sale: Option<Sale>,
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    // No await while it is held, and a panic elsewhere cannot leave a half-written record
    // (every update is one assignment), so a poisoned mutex is still usable.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn hold(&self, seat: u32, fence: u64) -> Fenced {
        let mut state = self.state();
        let record = state.seats.entry(seat).or_default();
        if record.sale.is_some() {
            return Fenced::Sold;
        }
        if fence < record.fence {
            return Fenced::Stale {
                newer: record.fence,
            };
        }
        record.fence = fence;
        Fenced::Ok
    }

    pub(super) fn confirm(&self, sale: &Sale) -> Fenced {
        let mut state = self.state();
        let record = state.seats.entry(sale.seat).or_default();
        if record.sale.is_some() {
            return Fenced::Sold;
        }
        if sale.fence < record.fence {
            return Fenced::Stale {
                newer: record.fence,
            };
        }
        record.fence = sale.fence;
        record.sale = Some(sale.clone());
        Fenced::Ok
    }

    pub(super) fn sale(&self, seat: u32) -> Option<Sale> {
        self.state().seats.get(&seat).and_then(|s| s.sale.clone())
    }

    pub(super) fn sales(&self, seats: u32) -> Vec<Sale> {
        self.state()
            .seats
            .range(1..=seats)
            .filter_map(|(_, s)| s.sale.clone())
            .collect()
    }

    pub(super) fn sold_count(&self) -> u64 {
        let n = self
            .state()
            .seats
            .values()
            .filter(|s| s.sale.is_some())
            .count();
        u64::try_from(n).unwrap_or(u64::MAX)
    }

    pub(super) fn append(&self, log: Log, fence: u64, entry: String) -> Fenced {
        let mut state = self.state();
        let (highest, entries) = state.logs.entry(log).or_default();
        if fence < *highest {
            return Fenced::Stale { newer: *highest };
        }
        *highest = fence;
        entries.push_back(entry);
        while entries.len() > LOG_LEN {
            entries.pop_front();
        }
        Fenced::Ok
    }

    pub(super) fn entries(&self, log: Log) -> Vec<String> {
        self.state()
            .logs
            .get(&log)
            .map(|(_, e)| e.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sale(seat: u32, fence: u64) -> Sale {
        Sale {
            seat,
            buyer: "ada".into(),
            fence,
            replica: "r1".into(),
            sold_at_ms: 1,
        }
    }

    #[test]
    fn a_lower_fence_cannot_sell_after_a_newer_hold() {
        let store = MemoryStore::new();
        assert_eq!(store.hold(7, 10), Fenced::Ok);
        // A newer lock holder took over while the first was paused...
        assert_eq!(store.hold(7, 11), Fenced::Ok);
        // ...so the first one's confirmation is refused.
        assert_eq!(store.confirm(&sale(7, 10)), Fenced::Stale { newer: 11 });
        assert_eq!(store.confirm(&sale(7, 11)), Fenced::Ok);
        assert_eq!(store.confirm(&sale(7, 12)), Fenced::Sold);
        assert_eq!(store.hold(7, 13), Fenced::Sold);
        assert_eq!(store.sale(7).map(|s| s.fence), Some(11));
        assert_eq!(store.sold_count(), 1);
    }

    #[test]
    fn logs_refuse_lower_fences_and_stay_bounded() {
        let store = MemoryStore::new();
        assert_eq!(store.append(Log::JobRuns, 5, "a".into()), Fenced::Ok);
        assert_eq!(
            store.append(Log::JobRuns, 4, "b".into()),
            Fenced::Stale { newer: 5 }
        );
        for fence in 6..6 + LOG_LEN as u64 {
            store.append(Log::JobRuns, fence, fence.to_string());
        }
        let entries = store.entries(Log::JobRuns);
        assert_eq!(entries.len(), LOG_LEN);
        assert_eq!(entries.first().map(String::as_str), Some("6"));
        assert!(store.entries(Log::Reports).is_empty());
    }
}
