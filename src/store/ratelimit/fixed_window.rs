//! The fixed window counter. Mirrors `src/store/ratelimit/fixed_window.lua`.
//!
//! Windows are `[k·P, (k+1)·P)` in server time (aligned to the Unix epoch, the same for
//! every subject). State is the window's index, its count and the period it was counted in; a
//! count from another window counts as zero, except that a count made under another period
//! (the rate changed) carries over while its own window has not ended. A denied request can
//! pass at the next window's start.

use super::{Outcome, PolicyParams, Snapshot, State, Write, non_negative};

/// The current window's index and count.
fn count(period: i64, state: Option<&State>, now: i64) -> (i64, i64) {
    let index = now / period;
    let count = match state {
        Some(&State::Window {
            index: i,
            count,
            period: p,
        }) => {
            if p == period {
                if i == index { count } else { 0 }
            } else if p > 0 && now < (i + 1) * p {
                count
            } else {
                0
            }
        }
        _ => 0,
    };
    (index, count)
}

fn state(index: i64, count: i64, period: i64) -> Option<State> {
    (count > 0).then_some(State::Window {
        index,
        count,
        period,
    })
}

pub(super) fn decide(p: &PolicyParams, state: Option<&State>, now: i64, cost: i64) -> Outcome {
    let (period, limit) = (p.unit_us, p.count);
    let need = cost.max(1);
    let (index, count) = count(period, state, now);
    let window_end = (index + 1) * period - now;
    let figures = |count: i64| Snapshot {
        remaining: non_negative(limit - count),
        reset: if count > 0 { window_end } else { 0 },
    };
    let before = figures(count);
    if count + need > limit {
        return Outcome::deny(window_end, before);
    }
    if cost == 0 {
        return Outcome::allow(before, None);
    }
    let count = count + cost;
    Outcome::allow(
        before,
        Some((
            figures(count),
            Write::Replace(self::state(index, count, period)),
        )),
    )
}

/// Gives back (`delta < 0`, down to zero) or charges (`delta > 0`, up to the limit, never
/// lowering a count above it) units of the current window.
pub(super) fn adjust(period: i64, limit: i64, slot: &mut Option<State>, now: i64, delta: i64) {
    let (index, count) = count(period, slot.as_ref(), now);
    let moved = count + delta;
    let new_count = if delta < 0 {
        non_negative(moved)
    } else {
        moved.min(limit).max(count)
    };
    *slot = state(index, new_count, period);
}

/// The state read at `now` under `period`, rewritten in it.
pub(super) fn normalized(period: i64, state: Option<&State>, now: i64) -> Option<State> {
    let (index, count) = count(period, state, now);
    self::state(index, count, period)
}
