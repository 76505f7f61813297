//! Waiting for a turn: [`acquire`](RateLimiter::acquire), [`acquire_n`](RateLimiter::acquire_n)
//! and [`reserve`](RateLimiter::reserve), which reserve a request's turn in the store and sleep
//! until it comes.

use std::time::Duration;

use tokio::time::Instant;

use super::{MAX_WAIT, Piped, RateLimiter, Step, granting};
use crate::error::RateLimitError;
use crate::ratelimit::decision::Combine;
use crate::ratelimit::metrics;
use crate::ratelimit::reservation::{Reservation, Turn};
use crate::ratelimit::{Decision, Origin};
use crate::store::RateOp;

impl RateLimiter {
    /// Waits until a request of cost 1 may pass, then passes it: the leaky bucket as a queue,
    /// for workers that must call something at a fixed rate. See
    /// [`acquire_n`](Self::acquire_n).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use distlock::ratelimit::{Policy, Rate};
    ///
    /// let client = distlock::Client::in_memory();
    /// // A third-party API that takes 50 calls a second, one every 20 ms.
    /// let partner = client.rate_limiter(Policy::gcra("partner", Rate::per_second(50)?.burst(1)?)?).build()?;
    /// let start = tokio::time::Instant::now();
    /// for _ in 0..3 {
    ///     assert!(partner.acquire("partner-api").await?.allowed);
    /// }
    /// assert!(start.elapsed() >= Duration::from_millis(40)); // 0, 20 and 40 ms
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, subject: &str) -> Result<Decision, RateLimitError> {
        self.acquire_n(subject, 1).await
    }

    /// Waits until a request of `cost` units may pass, then passes it, if that is within
    /// [`max_wait`](crate::ratelimit::RateLimiterBuilder::max_wait) (default: however long it takes); otherwise it is denied at
    /// once (`allowed == false`, with the wait it would have had in `retry_after`).
    ///
    /// With GCRA and token-bucket policies the request *reserves* its turn when it is called
    /// (one round trip: the store advances the subject's state past it and answers the
    /// wait), so waiters across every process are served in the order they called, with no
    /// race to retry and no thundering herd. Dropping the future before its turn gives the
    /// turn back (a [`refund`](Self::refund), sent in the background). With window algorithms
    /// there is nothing to reserve: it sleeps until the store's `retry_after` and checks
    /// again, in no particular order.
    ///
    /// Errors are those of [`check_n`](Self::check_n); the outage policy applies as there
    /// (failing open passes at once).
    pub async fn acquire_n(&self, subject: &str, cost: u32) -> Result<Decision, RateLimitError> {
        let started = Instant::now();
        loop {
            let left = self.max_wait.saturating_sub(started.elapsed());
            let reservation = self.reserve_timed(subject, cost, left).await?;
            let decision = reservation.decision();
            // One decision per call, however many rounds it took.
            if decision.allowed {
                metrics::decided(decision, cost);
                return Ok(reservation.ready().await);
            }
            // A refused reservation waits no better by asking again; a window algorithm (or the
            // local fallback) has no turns to reserve, so it waits for its retry.
            let reserved = self.fifo && decision.origin == Origin::Store;
            if reserved || decision.retry_after > left || decision.retry_after.is_zero() {
                metrics::decided(decision, cost);
                return Ok(reservation.into_decision());
            }
            tokio::time::sleep(decision.retry_after).await;
        }
    }

    /// Reserves the next turn for a request of `cost` units on `subject`, if it comes within
    /// `max_wait`: the mechanism behind [`acquire_n`](Self::acquire_n), for callers that have
    /// something to do between learning the wait and sleeping it (the tower layer gives back
    /// the inner service's readiness). A granted [`Reservation`] has consumed its cost;
    /// [`ready`](Reservation::ready) sleeps until its turn, and dropping it before then gives
    /// the turn back. A refused one has consumed nothing (and, for window algorithms, says in
    /// `retry_after` when to ask again).
    pub async fn reserve(
        &self,
        subject: &str,
        cost: u32,
        max_wait: Duration,
    ) -> Result<Reservation, RateLimitError> {
        let result = self.reserve_timed(subject, cost, max_wait).await;
        if let Ok(reservation) = &result {
            metrics::decided(reservation.decision(), cost);
        }
        result
    }

    /// [`reserve`](Self::reserve), timed but not counted as a decision.
    async fn reserve_timed(
        &self,
        subject: &str,
        cost: u32,
        max_wait: Duration,
    ) -> Result<Reservation, RateLimitError> {
        self.timed(self.reserve_uncounted(subject, cost, max_wait))
            .await
    }

    async fn reserve_uncounted(
        &self,
        subject: &str,
        cost: u32,
        max_wait: Duration,
    ) -> Result<Reservation, RateLimitError> {
        let max_wait_us = u64::try_from(max_wait.min(MAX_WAIT).as_micros()).unwrap_or(u64::MAX);
        // An any-of limiter has no turns to reserve: its reservations are checks.
        let op = if cost == 0 || max_wait.is_zero() || self.combine == Combine::Any {
            self.check_op(cost)
        } else {
            RateOp::Reserve { cost, max_wait_us }
        };
        let step = Step {
            cost: Some(cost),
            cached_cost: cost,
            op,
            unanswered_op: self.check_op(cost),
        };
        // Others only move the turn later (or refund, which drops the entry): a cached wait
        // longer than max_wait is refused without a round trip.
        let fifo = self.fifo;
        let take_hit = |hit: &Decision| hit.retry_after > max_wait || !fifo;
        match self.pipeline(subject, step, take_hit).await? {
            Piped::Cached(hit) => Ok(Reservation::refused(granting(
                self.enforce(subject, hit),
                cost,
            ))),
            Piped::Answered(eff, reply) => {
                let wait = Duration::from_micros(reply.wait_us);
                let granted = reply.applied;
                let decision = granting(
                    self.enforce(subject, self.decision(&eff, reply, Origin::Store)),
                    cost,
                );
                // Only a reserved turn is given back on drop: an any-of limiter cannot
                // refund (see `refund`), and its check passed now.
                if granted && cost > 0 && self.combine == Combine::All {
                    Ok(Reservation::granted(
                        decision,
                        wait,
                        Some(Turn {
                            limiter: self.clone(),
                            subject: subject.to_owned(),
                            cost,
                        }),
                    ))
                } else if decision.allowed {
                    Ok(Reservation::granted(decision, Duration::ZERO, None))
                } else {
                    Ok(Reservation::refused(decision))
                }
            }
            Piped::Unanswered(decision) => {
                let decision = granting(decision, cost);
                Ok(if decision.allowed {
                    Reservation::granted(decision, Duration::ZERO, None)
                } else {
                    Reservation::refused(decision)
                })
            }
        }
    }
}
