//! The sliding window counter. Mirrors `src/store/scripts/ratelimit/sliding_window.lua`.
//!
//! Counts per fixed window of `P`, as the fixed window does, but a request is judged by the
//! current count plus the previous window's count weighted by the share of the previous
//! window still inside the sliding window `(now − P, now]`: `⌈prev·(P − e)/P⌉` at `e` µs
//! into the current window. Rounding up keeps the estimate on the safe side. The product
//! is an `f64` computed exactly as the Lua computes it, so both stores agree to the bit.

use super::{Outcome, Snapshot, State, Write, non_negative};

#[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
pub(super) fn decide(
    period: i64,
    limit: i64,
    state: Option<&State>,
    now: i64,
    cost: i64,
) -> Outcome {
    let need = cost.max(1);
    let index = now / period;
    let (prev, curr) = match state {
        Some(State::Sliding {
            index: i,
            prev,
            curr,
        }) => {
            if *i == index {
                (*prev, *curr)
            } else if *i == index - 1 {
                (*curr, 0)
            } else {
                (0, 0)
            }
        }
        _ => (0, 0),
    };
    let elapsed = now - index * period;
    let weighted = (prev as f64 * (period - elapsed) as f64 / period as f64).ceil() as i64;
    // The state matters until the current count has slid out of the next window.
    let reset = |curr: i64| {
        if curr > 0 {
            2 * period - elapsed
        } else if prev > 0 {
            period - elapsed
        } else {
            0
        }
    };
    let before = Snapshot {
        remaining: non_negative(limit - weighted - curr),
        reset: reset(curr),
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
                reset: reset(curr),
            },
            Write::Replace(State::Sliding { index, prev, curr }),
        )),
    )
}
