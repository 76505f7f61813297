//! The fixed window counter. Mirrors `src/store/scripts/ratelimit/fixed_window.lua`.
//!
//! Windows are `[k·P, (k+1)·P)` in server time (aligned to the Unix epoch, the same for
//! every subject). State is the window's index and count; a count from another window
//! counts as zero. A denied request can pass at the next window's start.

use super::{Outcome, Snapshot, State, Write, non_negative};

pub(super) fn decide(
    period: i64,
    limit: i64,
    state: Option<&State>,
    now: i64,
    cost: i64,
) -> Outcome {
    let need = cost.max(1);
    let index = now / period;
    let count = match state {
        Some(State::Window { index: i, count }) if *i == index => *count,
        _ => 0,
    };
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
            Write::Replace(State::Window { index, count }),
        )),
    )
}
