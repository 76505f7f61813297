//! GCRA, the generic cell rate algorithm (leaky bucket as a meter), as redis-cell's
//! `CL.THROTTLE`, and the token bucket, which is the same algorithm counted in whole tokens.
//! Mirrors `src/store/ratelimit/gcra.lua`.
//!
//! State is the TAT, the theoretical arrival time: when the subject's requests so far would
//! have finished had they been spaced one emission interval `T` apart, and the `T` it was
//! counted in. A request of cost `c` passes if its new TAT (`max(tat, now) + c·T`) lies no
//! further than the tolerance `burst·T` in the future, so `burst` requests pass at once from
//! rest and then one per `T`. Remaining requests are how many more intervals fit under the
//! tolerance. A TAT counted in another interval (the rate changed) is read as the same number
//! of intervals of debt, rounded up, and rewritten so by the first operation under the new
//! rate (`normalize` in `mod.rs`), so the debt then drains at the new rate. Beyond the
//! tolerance the TAT holds reservations.

use super::{Outcome, PolicyParams, Snapshot, State, Write, non_negative};

/// The most debt a TAT may hold, in µs (as `MAX_DEBT` in the Lua).
const MAX_DEBT: i64 = 126_489_600_000_000;

/// The TAT as of `now` (at least `now`), in `interval`.
#[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
pub(super) fn tat(state: Option<&State>, now: i64, interval: i64) -> i64 {
    let Some(&State::Tat { tat, interval: was }) = state else {
        return now;
    };
    if tat <= now || was < 1 {
        return now;
    }
    let mut debt = tat - now;
    if was != interval {
        // The same double expression, in the same order, as the Lua.
        debt = (debt as f64 * interval as f64 / was as f64).ceil() as i64;
    }
    now + debt.min(MAX_DEBT)
}

/// The state holding `tat` (none when there is no debt).
pub(super) fn state(tat: i64, now: i64, interval: i64) -> Option<State> {
    (tat > now).then_some(State::Tat { tat, interval })
}

/// The figures with the TAT at `tat` (also how the Redis store's lean GCRA script's replies
/// are read: `src/store/ratelimit/script.rs`).
pub(crate) fn figures(tat: i64, now: i64, interval: i64, burst: i64) -> Snapshot {
    Snapshot {
        remaining: non_negative(interval * burst - (tat - now)) / interval,
        reset: tat - now,
    }
}

pub(super) fn decide(p: &PolicyParams, state: Option<&State>, now: i64, cost: i64) -> Outcome {
    let (interval, burst) = (p.unit_us, p.count);
    let need = cost.max(1);
    let tolerance = interval * burst;
    let tat = tat(state, now, interval);
    let before = figures(tat, now, interval, burst);
    let allow_at = tat + need * interval - tolerance;
    if allow_at > now {
        return Outcome::deny(allow_at - now, before);
    }
    if cost == 0 {
        return Outcome::allow(before, None);
    }
    let new_tat = tat + cost * interval;
    Outcome::allow(
        before,
        Some((
            figures(new_tat, now, interval, burst),
            Write::Replace(state_or_nothing(new_tat, now, interval)),
        )),
    )
}

fn state_or_nothing(tat: i64, now: i64, interval: i64) -> Option<State> {
    state(tat, now, interval)
}

/// Gives back (`delta < 0`) or charges (`delta > 0`) `|delta|` units: a charge never takes the
/// TAT past `now + tolerance` nor lowers it, a refund never takes it below `now`.
pub(super) fn adjust(interval: i64, burst: i64, slot: &mut Option<State>, now: i64, delta: i64) {
    let tat = tat(slot.as_ref(), now, interval);
    let moved = tat + delta * interval;
    let new_tat = if delta < 0 {
        moved.max(now)
    } else {
        moved.min(now + interval * burst).max(tat)
    };
    *slot = state(new_tat, now, interval);
}
