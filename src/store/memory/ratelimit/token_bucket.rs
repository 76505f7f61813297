//! The token bucket. Mirrors `src/store/scripts/ratelimit/token_bucket.lua`.
//!
//! `burst` tokens; one token is added every emission interval `T` up to `burst`. State is
//! the whole tokens left and the time `at` they were counted at, so the fraction of a token
//! earned since `at` is kept across calls (`at` only advances by whole intervals). A full
//! bucket forgets `at`, so time spent full earns nothing.

use super::{Outcome, Snapshot, State, Write};

pub(super) fn decide(
    interval: i64,
    burst: i64,
    state: Option<&State>,
    now: i64,
    cost: i64,
) -> Outcome {
    let need = cost.max(1);
    let (mut tokens, mut at) = match state {
        Some(State::Bucket { tokens, at }) => (*tokens, *at),
        _ => (burst, now),
    };
    if now > at {
        let gained = (now - at) / interval;
        tokens += gained;
        at += gained * interval;
    }
    if tokens >= burst {
        tokens = burst;
        at = now;
    }
    // Until full: the missing tokens' intervals, less the part of one already earned.
    let until_full = |left: i64| {
        if left >= burst {
            0
        } else {
            (burst - left) * interval - (now - at)
        }
    };
    let before = Snapshot {
        remaining: tokens,
        reset: until_full(tokens),
    };
    if tokens < need {
        return Outcome::deny((need - tokens) * interval - (now - at), before);
    }
    if cost == 0 {
        return Outcome::allow(before, None);
    }
    let left = tokens - cost;
    Outcome::allow(
        before,
        Some((
            Snapshot {
                remaining: left,
                reset: until_full(left),
            },
            Write::Replace(State::Bucket { tokens: left, at }),
        )),
    )
}
