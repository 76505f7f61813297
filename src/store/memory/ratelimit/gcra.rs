//! GCRA, the generic cell rate algorithm (leaky bucket as a meter), as redis-cell's
//! `CL.THROTTLE`. Mirrors `src/store/scripts/ratelimit/gcra.lua`.
//!
//! State is the TAT, the theoretical arrival time: when the subject's requests so far would
//! have finished had they been spaced one emission interval `T` apart. A request of cost `c`
//! passes if its new TAT (`max(tat, now) + c·T`) lies no further than the tolerance
//! `burst·T` in the future, so `burst` requests pass at once from rest and then one per `T`.
//! Remaining requests are how many more intervals fit under the tolerance.

use super::{Outcome, Snapshot, State, Write, non_negative};

pub(super) fn decide(
    interval: i64,
    burst: i64,
    state: Option<&State>,
    now: i64,
    cost: i64,
) -> Outcome {
    let need = cost.max(1);
    let tolerance = interval * burst;
    let stored = match state {
        Some(State::Tat(tat)) => *tat,
        _ => 0,
    };
    let tat = stored.max(now);
    let figures = |tat: i64| Snapshot {
        remaining: non_negative(tolerance - (tat - now)) / interval,
        reset: tat - now,
    };
    let before = figures(tat);
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
        Some((figures(new_tat), Write::Replace(State::Tat(new_tat)))),
    )
}
