//! The sliding log. Mirrors `src/store/ratelimit/sliding_log.lua` (a sorted set there).
//!
//! The times of the allowed requests of the last `P` (one entry per cost unit); a request
//! passes if the entries in `(now − P, now]` plus its cost stay within the limit. Denied
//! requests are never stored, and the log is capped at the limit, so a subject costs at
//! most `limit` entries however hard it is hammered. It is exact: no span of `P` ever holds
//! more than `limit` allowed units. Entries are times, so a change of rate needs no
//! conversion: the window in force counts the entries the log holds. A write trims the log
//! by its cap only (its newest `limit` entries stay, however old), never by the window in
//! force, and the log expires `keep` after its newest entry (`keep ≥ P`, see
//! `expires`), as the Redis key does: so a window made longer later still counts the
//! entries of the old one while the log lives. (Trimming and expiring by the window in
//! force made a longer window forget them: issue 28.)

use std::collections::VecDeque;

use super::{Outcome, PolicyParams, Snapshot, State, Write, non_negative};

pub(super) fn decide(p: &PolicyParams, state: Option<&State>, now: i64, cost: i64) -> Outcome {
    let (period, limit) = (p.unit_us, p.count);
    let need = cost.max(1);
    let empty = VecDeque::new();
    let log = match state {
        Some(State::Log(log)) => log,
        _ => &empty,
    };
    let start = log.partition_point(|&t| t <= now - period);
    let count = i64::try_from(log.len() - start).unwrap_or(i64::MAX);
    let newest = log.back().copied().filter(|_| count > 0);
    let before = Snapshot {
        remaining: non_negative(limit - count),
        reset: newest.map_or(0, |t| t + period - now),
    };
    if count + need > limit {
        // The oldest entries that must slide out first; the last of them sets the wait.
        let must_expire = usize::try_from(count + need - limit).unwrap_or(usize::MAX);
        let oldest = log[start + must_expire - 1];
        return Outcome::deny(oldest + period - now, before);
    }
    if cost == 0 {
        return Outcome::allow(before, None);
    }
    let newest = newest.map_or(now, |t| t.max(now));
    Outcome::allow(
        before,
        Some((
            Snapshot {
                remaining: non_negative(limit - count - cost),
                reset: newest + period - now,
            },
            Write::LogAppend,
        )),
    )
}

/// Adds `cost` entries at `now` (in order), and caps the log at its newest `limit` entries;
/// entries older than the window stay (see the module doc).
pub(super) fn append(limit: i64, slot: &mut Option<State>, now: i64, cost: i64) {
    if !matches!(slot, Some(State::Log(_))) {
        *slot = Some(State::Log(VecDeque::new()));
    }
    let Some(State::Log(log)) = slot else {
        return;
    };
    let at = log.partition_point(|&t| t <= now);
    for _ in 0..cost {
        log.insert(at, now);
    }
    let cap = usize::try_from(limit).unwrap_or(usize::MAX);
    while log.len() > cap {
        log.pop_front();
    }
}

/// Gives back (`delta < 0`) the newest entries of the window, or charges (`delta > 0`) at
/// most what is left, as entries at `now`.
pub(super) fn adjust(period: i64, limit: i64, slot: &mut Option<State>, now: i64, delta: i64) {
    let count = match slot {
        Some(State::Log(log)) => {
            let start = log.partition_point(|&t| t <= now - period);
            i64::try_from(log.len() - start).unwrap_or(i64::MAX)
        }
        _ => 0,
    };
    if delta < 0 {
        if let Some(State::Log(log)) = slot {
            for _ in 0..(-delta).min(count) {
                log.pop_back();
            }
            if log.is_empty() {
                *slot = None;
            }
        }
        return;
    }
    let add = delta.min(non_negative(limit - count));
    if add > 0 {
        append(limit, slot, now, add);
    }
}

/// When the log in `state`, just appended to, expires: `keep` after its newest entry, as the
/// script sets the key's ttl at every append. `None` for no log.
pub(super) fn expires(keep: i64, state: Option<&State>) -> Option<i64> {
    match state {
        Some(State::Log(log)) => log.back().map(|&newest| newest + keep),
        _ => None,
    }
}
