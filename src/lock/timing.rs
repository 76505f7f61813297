//! A lease's timing, with one owner: the local safety deadline, the ttl renewals ask for, and
//! when the watchdog renews next.
//!
//! Every operation that sets the lock key's expiry after the grant (a watchdog renewal, an
//! [`extend`](crate::Lease::extend)) is an [`ExpiryOp`], and:
//!
//! * **at most one is on the wire per lease**: an op holds the lease's op permit from before
//!   it is sent until its answer has been applied, so the watchdog and `extend` take turns and
//!   their answers can never be applied in another order than the server applied them;
//! * it takes a **sequence number when it is sent**, and its answer is applied only if no
//!   later-sent op has been applied (with the permit this never drops an answer; it keeps the
//!   rule true should the permit ever be bypassed);
//! * **when it is sent**, the deadline comes down to what the op asks for if that is earlier
//!   (the server may apply an `extend` to a shorter ttl before its answer is back);
//! * its answer goes through **one transition function**, [`Timing::apply`]:
//!   - *held*: the deadline is that op's send time plus its ttl minus
//!     [`safety_margin`]: always the latest-sent op known to have succeeded, never a max over
//!     ops with different ttls (an `extend` to a shorter ttl moves it earlier);
//!   - *unknown* (timeout, connection error, or the op was dropped before its answer): the op
//!     may or may not have been applied, so the deadline becomes the earlier of the two
//!     possibilities;
//!   - *not held*: the lease is over (the caller ends it).
//!
//! The invariant: at every instant, the local deadline is no later than the key's expiry on
//! the server (plus nothing: the margin is subtracted), as long as the server applies one
//! lease's ops in the order they were sent, which one connection guarantees.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

pub use crate::drift::safety_margin;

/// The shortest wait before a renewal that got no answer is tried again.
const RETRY_MIN: Duration = Duration::from_millis(10);

/// The timing state of one lease. Changed only through [`Timing::apply`] (and at creation).
#[derive(Debug)]
pub(crate) struct Timing {
    /// The ttl renewals ask for: the grant's, then the last successful `extend`'s.
    ttl: Duration,
    /// The local safety deadline.
    valid_until: Instant,
    /// When the watchdog should next renew; `None` once it must not (watchdog off, or the
    /// last renewal allowed by `max_hold` has been made).
    next_renew: Option<Instant>,
    /// When a lease with `max_hold` must stop being renewed.
    max_hold_until: Option<Instant>,
    /// Until when a lease with `min_hold` must keep its key, even after its release: every
    /// op asks for at least what remains of it.
    min_hold_until: Option<Instant>,
    renews: bool,
    /// Sequence number of the last op sent, and of the last op whose answer was applied.
    sent: u64,
    applied: u64,
}

/// What an expiry-setting op learned from the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The key held our token; its expiry is now the op's ttl.
    Held,
    /// The key is gone or holds another token: the lease is over.
    NotHeld,
    /// No answer (timeout, connection error, cancelled): it may or may not have been applied.
    Unknown,
}

/// How an op sets the ttl renewals ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    /// A watchdog renewal: same ttl as before.
    Renewal,
    /// `extend(ttl)`: on success, later renewals ask for this ttl.
    Extend(Duration),
}

/// The ttl one op asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ask {
    pub(crate) ttl: Duration,
    /// `max_hold` cut it: no renewal may follow this one.
    pub(crate) last: bool,
}

impl Timing {
    /// A lease granted for `grant_ttl` by a request sent at `sent_at`, renewed with `ttl`.
    pub(crate) fn granted(
        ttl: Duration,
        grant_ttl: Duration,
        sent_at: Instant,
        renews: bool,
        max_hold: Option<Duration>,
        min_hold_until: Option<Instant>,
    ) -> Self {
        // `None` if it does not fit in an Instant (e.g. `Duration::MAX`): no limit then.
        let max_hold_until = max_hold.and_then(|m| sent_at.checked_add(m));
        let mut timing = Self {
            ttl,
            valid_until: sent_at,
            next_renew: None,
            max_hold_until,
            min_hold_until,
            renews,
            sent: 0,
            applied: 0,
        };
        // The grant itself set the full ttl; `max_hold` caps the renewals that follow.
        timing.set_held(
            sent_at,
            Ask {
                ttl: grant_ttl,
                last: false,
            },
        );
        timing
    }

    /// What remains of the minimum hold at `now`, if anything: how long a release must keep
    /// the key (by setting its expiry) instead of freeing it.
    pub(crate) fn min_hold_left(&self, now: Instant) -> Option<Duration> {
        self.min_hold_until
            .map(|until| until.saturating_duration_since(now))
            .filter(|left| !left.is_zero())
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.valid_until
    }

    pub(crate) fn next_renew(&self) -> Option<Instant> {
        self.next_renew
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The ttl an op sent at `now` that wants `ttl` may ask for: at least what remains of
    /// `min_hold` (so no op ever brings the key's expiry before it), and capped so that the
    /// key does not outlive `max_hold` (which wins); `None` once `max_hold` has been reached.
    pub(crate) fn ask(&self, ttl: Duration, now: Instant) -> Option<Ask> {
        let ttl = ttl.max(self.min_hold_left(now).unwrap_or_default());
        match self.max_hold_until {
            Some(until) if until <= now => None,
            Some(until) if until - now <= ttl => Some(Ask {
                ttl: until - now,
                last: true,
            }),
            _ => Some(Ask { ttl, last: false }),
        }
    }

    /// Marks an op sent at `sent_at` asking for `ask` as sent; returns its sequence number.
    ///
    /// From this moment the server may apply it, before its answer is back: if it asks for
    /// less than the deadline assumes (an `extend` to a shorter ttl), the deadline comes down
    /// now, not when the answer arrives.
    fn send(&mut self, sent_at: Instant, ask: Ask) -> u64 {
        self.valid_until = self.valid_until.min(deadline(sent_at, ask.ttl));
        self.sent += 1;
        self.sent
    }

    /// Renewals stop for good (`max_hold` reached before one could be sent).
    pub(crate) fn stop_renewing(&mut self) {
        self.next_renew = None;
    }

    fn set_held(&mut self, sent_at: Instant, ask: Ask) {
        self.valid_until = deadline(sent_at, ask.ttl);
        self.next_renew = (self.renews && !ask.last).then(|| sent_at + ask.ttl / 3);
    }

    /// The one transition: applies the answer to op `seq`, sent at `sent_at`, that asked for
    /// `ask` (of `kind`). Answers to ops older than one already applied are ignored.
    pub(crate) fn apply(
        &mut self,
        seq: u64,
        sent_at: Instant,
        kind: OpKind,
        ask: Ask,
        answer: Answer,
        now: Instant,
    ) {
        if seq <= self.applied {
            return;
        }
        match answer {
            Answer::Held => {
                self.applied = seq;
                if let OpKind::Extend(ttl) = kind {
                    self.ttl = ttl;
                }
                self.set_held(sent_at, ask);
            }
            Answer::Unknown => {
                // Applied or not, the key lives at least until the earlier of the two.
                self.valid_until = self.valid_until.min(deadline(sent_at, ask.ttl));
                if self.next_renew.is_some() {
                    let retry = (self.ttl / 10).max(RETRY_MIN);
                    self.next_renew = Some(now + retry);
                }
            }
            Answer::NotHeld => {
                self.applied = seq;
                self.next_renew = None;
            }
        }
    }
}

/// The local safety deadline of a ttl that started no earlier than `sent_at`.
fn deadline(sent_at: Instant, ttl: Duration) -> Instant {
    sent_at + ttl.saturating_sub(safety_margin(ttl))
}

/// A lease's timing and its op permit: one expiry-setting op on the wire at a time, and the
/// timing it changes, together, so that only an [`ExpiryOp`] holding the permit applies an
/// answer.
#[derive(Debug)]
pub(crate) struct OpGate {
    permit: Arc<Semaphore>,
    timing: Mutex<Timing>,
}

impl OpGate {
    pub(crate) fn new(timing: Timing) -> Self {
        Self {
            permit: Arc::new(Semaphore::new(1)),
            timing: Mutex::new(timing),
        }
    }

    /// The lease's timing; changed only through [`ExpiryOp`].
    pub(crate) fn timing(&self) -> MutexGuard<'_, Timing> {
        self.timing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The permit if no op is under way.
    pub(crate) fn try_take(&self) -> Option<OwnedSemaphorePermit> {
        self.permit.clone().try_acquire_owned().ok()
    }

    /// Waits for the op under way to be answered, then takes the permit.
    pub(crate) async fn take(&self) -> OwnedSemaphorePermit {
        // The semaphore is never closed, so acquiring cannot fail.
        match self.permit.clone().acquire_owned().await {
            Ok(permit) => permit,
            Err(_) => unreachable!("a lease's op gate is never closed"),
        }
    }

    /// Whether an op is under way.
    pub(crate) fn busy(&self) -> bool {
        self.permit.available_permits() == 0
    }
}

/// One op that sets the key's expiry, from the moment it is sent to its answer. Dropped
/// without [`finish`](Self::finish) (cancelled, or its task dropped), its answer counts as
/// [`Answer::Unknown`].
pub(crate) struct ExpiryOp<'a> {
    gate: &'a OpGate,
    seq: u64,
    sent_at: Instant,
    kind: OpKind,
    ask: Ask,
    /// Released after the answer is applied.
    permit: Option<OwnedSemaphorePermit>,
}

impl<'a> ExpiryOp<'a> {
    /// Starts an op on the lease whose gate is `gate`, holding its `permit`, sent now: `None`
    /// if `max_hold` forbids any further expiry (renewals then stop for good).
    pub(crate) fn start(
        gate: &'a OpGate,
        permit: OwnedSemaphorePermit,
        kind: OpKind,
    ) -> Option<Self> {
        let sent_at = Instant::now();
        let (seq, ask) = {
            let mut t = gate.timing();
            let wanted = match kind {
                OpKind::Renewal => t.ttl,
                OpKind::Extend(ttl) => ttl,
            };
            match t.ask(wanted, sent_at) {
                Some(ask) => (t.send(sent_at, ask), ask),
                None => {
                    t.stop_renewing();
                    return None;
                }
            }
        };
        Some(Self {
            gate,
            seq,
            sent_at,
            kind,
            ask,
            permit: Some(permit),
        })
    }

    /// The ttl to send.
    pub(crate) fn ttl(&self) -> Duration {
        self.ask.ttl
    }

    /// Applies the store's answer and frees the permit.
    pub(crate) fn finish(mut self, answer: Answer) {
        self.apply(answer);
    }

    fn apply(&mut self, answer: Answer) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        self.gate.timing().apply(
            self.seq,
            self.sent_at,
            self.kind,
            self.ask,
            answer,
            Instant::now(),
        );
        drop(permit);
    }
}

impl Drop for ExpiryOp<'_> {
    fn drop(&mut self) {
        self.apply(Answer::Unknown);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(3);

    fn ask(ttl: Duration) -> Ask {
        Ask { ttl, last: false }
    }

    fn held(t: &mut Timing, seq: u64, sent_at: Instant, kind: OpKind, ttl: Duration) {
        t.apply(seq, sent_at, kind, ask(ttl), Answer::Held, sent_at);
    }

    #[test]
    fn a_shorter_extend_moves_the_deadline_earlier() {
        let t0 = Instant::now();
        let mut t = Timing::granted(TTL, TTL, t0, true, None, None);
        let short = Duration::from_millis(300);
        let renewal = t.send(t0, ask(TTL));
        let extend = t.send(t0, ask(short));
        held(&mut t, renewal, t0, OpKind::Renewal, TTL);
        held(&mut t, extend, t0, OpKind::Extend(short), short);
        assert_eq!(t.valid_until(), deadline(t0, short));
        assert_eq!(t.ttl(), short);
        assert!(t.next_renew().is_some(), "renewals go on with the new ttl");
    }

    #[test]
    fn an_older_answer_never_overrides_a_newer_one() {
        let t0 = Instant::now();
        let mut t = Timing::granted(TTL, TTL, t0, true, None, None);
        let short = Duration::from_millis(300);
        let renewal = t.send(t0, ask(TTL));
        let extend = t.send(t0, ask(short));
        // The extend (sent later) is answered first, then the renewal's answer arrives.
        held(&mut t, extend, t0, OpKind::Extend(short), short);
        held(&mut t, renewal, t0, OpKind::Renewal, TTL);
        assert_eq!(t.valid_until(), deadline(t0, short));
        assert_eq!(t.ttl(), short);
        assert!(t.next_renew().is_some(), "still renewed");
    }

    #[test]
    fn an_unknown_answer_keeps_the_earlier_deadline() {
        let t0 = Instant::now();
        let mut t = Timing::granted(TTL, TTL, t0, true, None, None);
        let before = t.valid_until();
        let short = Duration::from_millis(100);
        let seq = t.send(t0, ask(short));
        assert_eq!(
            t.valid_until(),
            before.min(deadline(t0, short)),
            "lowered when sent"
        );
        t.apply(
            seq,
            t0,
            OpKind::Extend(short),
            ask(short),
            Answer::Unknown,
            t0,
        );
        assert_eq!(t.valid_until(), before.min(deadline(t0, short)));
        assert_eq!(t.ttl(), TTL, "a failed extend does not change the ttl");
    }

    #[test]
    fn max_hold_caps_the_ask_and_stops_renewals() {
        let t0 = Instant::now();
        let mut t = Timing::granted(TTL, TTL, t0, true, Some(Duration::from_secs(4)), None);
        let at = t0 + Duration::from_secs(2);
        let capped = t.ask(TTL, at).expect("time left");
        assert_eq!(capped.ttl, Duration::from_secs(2));
        assert!(capped.last);
        let seq = t.send(at, capped);
        t.apply(seq, at, OpKind::Renewal, capped, Answer::Held, at);
        assert_eq!(t.next_renew(), None);
        assert_eq!(t.ask(TTL, t0 + Duration::from_secs(4)), None);
        // A max_hold too large for an Instant means no limit.
        let t = Timing::granted(TTL, TTL, t0, true, Some(Duration::MAX), None);
        assert_eq!(t.ask(TTL, t0).map(|a| a.last), Some(false));
    }

    #[test]
    fn min_hold_raises_every_ask_until_it_has_passed() {
        let t0 = Instant::now();
        let min = Duration::from_secs(10);
        let t = Timing::granted(TTL, min, t0, true, None, Some(t0 + min));
        assert_eq!(
            t.valid_until(),
            deadline(t0, min),
            "the grant asked for min_hold"
        );
        let at = t0 + Duration::from_secs(4);
        assert_eq!(t.ask(TTL, at).map(|a| a.ttl), Some(Duration::from_secs(6)));
        assert_eq!(t.min_hold_left(at), Some(Duration::from_secs(6)));
        let later = t0 + Duration::from_secs(8);
        assert_eq!(
            t.ask(TTL, later).map(|a| a.ttl),
            Some(TTL),
            "the ttl is longer"
        );
        assert_eq!(t.min_hold_left(t0 + min), None);
        // max_hold wins over min_hold.
        let t = Timing::granted(TTL, min, t0, true, Some(min / 2), Some(t0 + min));
        let capped = t.ask(TTL, t0 + Duration::from_secs(1)).expect("time left");
        assert_eq!(capped.ttl, Duration::from_secs(4));
        assert!(capped.last);
    }
}

// Property tests of the transitions above (proptest is a dev-dependency).
#[cfg(test)]
#[path = "timing_props.rs"]
mod props;
