//! [`Reservation`]: a turn taken in a subject's queue, waited for by
//! [`RateLimiter::acquire`](super::RateLimiter::acquire) and the tower layer's wait mode.

use std::time::Duration;

use tokio::time::Instant;

use super::{Decision, RateLimiter};

/// The answer to [`RateLimiter::reserve`]: either a turn (the request's cost is consumed at
/// the moment the turn comes; [`ready`](Self::ready) sleeps until then), or a refusal.
///
/// Dropping a granted reservation before its turn gives the turn back: a
/// [`refund`](RateLimiter::refund) of its cost is sent in the background (on the current
/// tokio runtime), so the next request can have it. After its turn, dropping it changes
/// nothing: the request counted.
#[derive(Debug)]
#[must_use = "a reservation is a turn: wait for it with `ready`, or drop it to give it back"]
pub struct Reservation {
    decision: Decision,
    /// When the turn comes.
    due: Instant,
    /// The turn to give back if dropped early: none once waited for, refused, or not
    /// reserved in the store (a pass at once, the outage policy).
    turn: Option<Turn>,
}

/// What giving a turn back needs.
pub(crate) struct Turn {
    pub(crate) limiter: RateLimiter,
    pub(crate) subject: String,
    pub(crate) cost: u32,
}

impl std::fmt::Debug for Turn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turn")
            .field("cost", &self.cost)
            .finish_non_exhaustive()
    }
}

impl Reservation {
    pub(crate) fn granted(decision: Decision, wait: Duration, turn: Option<Turn>) -> Self {
        Self {
            decision,
            due: Instant::now() + wait,
            turn: turn.filter(|_| !wait.is_zero()),
        }
    }

    pub(crate) fn refused(decision: Decision) -> Self {
        Self {
            decision,
            due: Instant::now(),
            turn: None,
        }
    }

    /// The store's answer: `allowed` if the turn was granted (the figures are as of the
    /// reservation, after its cost), else the denial, with the wait the turn would have had
    /// in `retry_after`.
    #[must_use]
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Whether a turn was granted.
    #[must_use]
    pub fn is_granted(&self) -> bool {
        self.decision.allowed
    }

    /// How long until the turn comes (zero once it has, and for a refusal).
    #[must_use]
    pub fn delay(&self) -> Duration {
        self.due.saturating_duration_since(Instant::now())
    }

    /// Sleeps until the turn comes, and answers the decision. A refusal answers at once.
    pub async fn ready(mut self) -> Decision {
        // Only a turn still to come sleeps: tokio's timer rounds a deadline up to its next
        // millisecond, so sleeping until a moment already here costs up to 1 ms (every
        // request through the tower layer and every `acquire` that passed at once paid it).
        if Instant::now() < self.due {
            tokio::time::sleep_until(self.due).await;
        }
        self.turn = None;
        std::mem::replace(&mut self.decision, Decision::empty())
    }

    /// The decision, giving back the turn if it has not come yet.
    pub(crate) fn into_decision(mut self) -> Decision {
        std::mem::replace(&mut self.decision, Decision::empty())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let Some(turn) = self.turn.take() else {
            return;
        };
        if Instant::now() >= self.due {
            return;
        }
        // Never block in Drop: the refund goes out on the runtime, if there is one.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(err) = turn.limiter.refund(&turn.subject, turn.cost).await {
                    tracing::debug!(
                        target: "distlock::ratelimit",
                        error = %err,
                        "could not give back a cancelled reservation"
                    );
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::task::Poll;

    use super::*;

    /// A turn that has come is answered at the first poll, without a timer (which would
    /// answer at its next millisecond at the earliest).
    #[tokio::test]
    async fn a_turn_that_has_come_is_ready_at_once() {
        let reservation = Reservation::granted(Decision::empty(), Duration::ZERO, None);
        let mut ready = std::pin::pin!(reservation.ready());
        let first = std::future::poll_fn(|cx| Poll::Ready(ready.as_mut().poll(cx))).await;
        assert!(first.is_ready(), "waited for the timer");
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_to_come_is_waited_for() {
        let reservation = Reservation::granted(Decision::empty(), Duration::from_millis(20), None);
        let before = Instant::now();
        let _ = reservation.ready().await;
        assert!(Instant::now() >= before + Duration::from_millis(20));
    }
}
