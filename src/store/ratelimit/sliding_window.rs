//! The sliding window counter. Mirrors `src/store/ratelimit/sliding_window.lua`.
//!
//! Counts per fixed window of `P`, as the fixed window does, but a request is judged by the
//! current count plus the previous window's count weighted by the share of the previous
//! window still inside the sliding window `(now − P, now]`: `⌈prev·(P − e)/P⌉` at `e` µs
//! into the current window. Rounding up keeps the estimate on the safe side. The product
//! is an `f64` computed exactly as the Lua computes it, so both stores agree to the bit.
//! Counts made under another period (the rate changed) carry over as what they weigh now,
//! counted in the current window.

use super::{Outcome, PolicyParams, Snapshot, State, Write, non_negative};

/// The share of `prev` still inside the sliding window, `elapsed` µs into the current one.
#[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
fn weight(prev: i64, period: i64, elapsed: i64) -> i64 {
    (prev as f64 * (period - elapsed) as f64 / period as f64).ceil() as i64
}

/// The current window's index and the previous and current counts.
fn counts(period: i64, state: Option<&State>, now: i64) -> (i64, i64, i64) {
    let index = now / period;
    let Some(&State::Sliding {
        index: i,
        prev,
        curr,
        period: was,
    }) = state
    else {
        return (index, 0, 0);
    };
    if was == period {
        if i == index {
            (index, prev, curr)
        } else if i == index - 1 {
            (index, curr, 0)
        } else {
            (index, 0, 0)
        }
    } else if was > 0 {
        let old = now / was;
        let (old_prev, old_curr) = if i == old {
            (prev, curr)
        } else if i == old - 1 {
            (curr, 0)
        } else {
            (0, 0)
        };
        (index, 0, weight(old_prev, was, now - old * was) + old_curr)
    } else {
        (index, 0, 0)
    }
}

/// µs until the state stops mattering.
fn reset(prev: i64, curr: i64, period: i64, elapsed: i64) -> i64 {
    if curr > 0 {
        2 * period - elapsed
    } else if prev > 0 {
        period - elapsed
    } else {
        0
    }
}

fn state(index: i64, prev: i64, curr: i64, period: i64) -> Option<State> {
    (prev > 0 || curr > 0).then_some(State::Sliding {
        index,
        prev,
        curr,
        period,
    })
}

#[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
pub(super) fn decide(p: &PolicyParams, state: Option<&State>, now: i64, cost: i64) -> Outcome {
    let (period, limit) = (p.unit_us, p.count);
    let need = cost.max(1);
    let (index, prev, curr) = counts(period, state, now);
    let elapsed = now - index * period;
    let weighted = weight(prev, period, elapsed);
    let before = Snapshot {
        remaining: non_negative(limit - weighted - curr),
        reset: reset(prev, curr, period, elapsed),
    };
    if weighted + curr + need > limit {
        let room = limit - curr - need;
        let retry = if room >= 0 {
            // Later in this window, once the previous window's weight has shrunk to `room`.
            let at = period - (room as f64 * period as f64 / prev as f64).floor() as i64;
            at - elapsed
        } else {
            // Next window, where this window's count becomes the weighted one.
            let room = limit - need;
            let at = if curr > 0 {
                non_negative(period - (room as f64 * period as f64 / curr as f64).floor() as i64)
            } else {
                0
            };
            period - elapsed + at
        };
        return Outcome::deny(retry.max(1), before);
    }
    if cost == 0 {
        return Outcome::allow(before, None);
    }
    let curr = curr + cost;
    Outcome::allow(
        before,
        Some((
            Snapshot {
                remaining: non_negative(limit - weighted - curr),
                reset: reset(prev, curr, period, elapsed),
            },
            Write::Replace(self::state(index, prev, curr, period)),
        )),
    )
}

/// Gives back (`delta < 0`) the newest units first (this window's, then the previous one's),
/// or charges (`delta > 0`) at most what is left, in this window.
pub(super) fn adjust(period: i64, limit: i64, slot: &mut Option<State>, now: i64, delta: i64) {
    let (index, mut prev, mut curr) = counts(period, slot.as_ref(), now);
    let elapsed = now - index * period;
    if delta < 0 {
        let back = -delta;
        let from_curr = back.min(curr);
        curr -= from_curr;
        prev = non_negative(prev - (back - from_curr));
    } else {
        let left = non_negative(limit - weight(prev, period, elapsed) - curr);
        curr += delta.min(left);
    }
    *slot = state(index, prev, curr, period);
}

/// The state read at `now` under `period`, rewritten in it.
pub(super) fn normalized(period: i64, state: Option<&State>, now: i64) -> Option<State> {
    let (index, prev, curr) = counts(period, state, now);
    self::state(index, prev, curr, period)
}
