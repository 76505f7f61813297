//! A policy's lockout, the twin of `lockout.lua`: a check of the policy that it denies while
//! the subject is not blocked (a *breach*) blocks the subject for the step of the breach's
//! number, and while blocked every check of the policy is denied without spending anything.
//! Any algorithm: the lockout only reads the algorithm's decision and masks it.
//!
//! State, in its own key beside the policy's (same hash tag): the end of the latest block and
//! how many breaches are remembered, `"<until>:<breaches>"`. It expires `memory` after the
//! block ends, and a state that old reads as none whatever its ttl (so an injected clock or a
//! slow expiry never changes an answer).

use super::{Outcome, Snapshot, State};

/// The most steps a lockout has (`ratelimit::MAX_LOCKOUT_STEPS`).
pub(crate) const MAX_STEPS: usize = 8;

/// One policy's lockout as the stores see it: the blocks' lengths by breach and how long
/// breaches are remembered after the latest block ends, in µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LockoutParams {
    steps: [i64; MAX_STEPS],
    len: u8,
    pub(crate) memory_us: i64,
}

impl LockoutParams {
    /// At most [`MAX_STEPS`] of `steps` (a checked lockout has no more).
    pub(crate) fn new(steps: &[i64], memory_us: i64) -> Self {
        let len = steps.len().min(MAX_STEPS);
        let mut all = [0; MAX_STEPS];
        all[..len].copy_from_slice(&steps[..len]);
        Self {
            steps: all,
            len: u8::try_from(len).unwrap_or(0),
            memory_us,
        }
    }

    pub(crate) fn steps(&self) -> &[i64] {
        &self.steps[..usize::from(self.len)]
    }

    /// The block of breach number `n` (from 1): its step, or the last one.
    fn block(&self, n: i64) -> i64 {
        let steps = self.steps();
        let i = usize::try_from(n.saturating_sub(1))
            .unwrap_or(0)
            .min(steps.len().saturating_sub(1));
        steps.get(i).copied().unwrap_or(0)
    }

    /// The script's ARGV: `"<memory>:<step 1>:<step 2>..."`.
    pub(crate) fn encode(&self) -> String {
        let mut text = self.memory_us.to_string();
        for step in self.steps() {
            text.push(':');
            text.push_str(&step.to_string());
        }
        text
    }
}

/// The subject's lock under one policy as of `now`: the end of its latest block and how many
/// breaches are remembered; `(0, 0)` when there is none, or it is past its memory.
pub(crate) fn read(p: &LockoutParams, state: Option<&State>, now: i64) -> (i64, i64) {
    match state {
        Some(&State::Lock { until, breaches }) if now < until.saturating_add(p.memory_us) => {
            (until, breaches)
        }
        _ => (0, 0),
    }
}

/// A breach at `now`, after `breaches` remembered: the state to store, the new block's end,
/// and when the state expires.
pub(crate) fn breach(p: &LockoutParams, breaches: i64, now: i64) -> (State, i64, i64) {
    let n = breaches + 1;
    let until = now + p.block(n);
    (
        State::Lock { until, breaches: n },
        until,
        until + p.memory_us,
    )
}

/// A policy's decision while the subject is blocked for `left` more µs: denied, with nothing
/// left and nothing to write; the request passes at the later of the block's end and when
/// the policy alone would pass it, and the policy is full again at the later of the block's
/// end and its own reset.
pub(crate) fn mask(outcome: Outcome, left: i64) -> Outcome {
    Outcome {
        allowed: false,
        retry: outcome.retry.max(left),
        before: Snapshot {
            remaining: 0,
            reset: outcome.before.reset.max(left),
        },
        after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breaches_escalate_then_repeat_the_last_step() {
        let p = LockoutParams::new(&[10, 50, 300], 1000);
        assert_eq!(p.encode(), "1000:10:50:300");
        let (state, until, expires) = breach(&p, 0, 100);
        assert_eq!((until, expires), (110, 1110));
        assert_eq!(read(&p, Some(&state), 105), (110, 1));
        assert_eq!(read(&p, Some(&state), 1109), (110, 1), "remembered");
        assert_eq!(read(&p, Some(&state), 1110), (0, 0), "forgotten");
        assert_eq!(breach(&p, 1, 200).1, 250);
        assert_eq!(breach(&p, 2, 200).1, 500);
        assert_eq!(breach(&p, 7, 200).1, 500, "the last step repeats");
    }
}
