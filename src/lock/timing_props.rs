//! Property tests of the lease timing transitions (TESTPLAN 45, issue 26 §3), state-machine
//! style: a generated sequence of sends, server applications, answers (on time, late, lost)
//! and clock advances runs against [`Timing`] and a model of the server's key, and after every
//! step the local deadline must not outrun the key's expiry on the server.
//!
//! The model keeps the library's discipline: one expiry-setting op on the wire at a time (the
//! lease's op gate), applied by the server at some moment after it was sent, in send order,
//! with the server's clock running up to 1% fast (the drift that `safety_margin` allows for).
//! A second op in flight is not modelled: without the gate an earlier op's answer could raise
//! the deadline above what a later, shorter `extend` set, which is why the gate exists.

use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use super::{Answer, Ask, OpKind, Timing};

/// One step of a generated history.
#[derive(Debug, Clone)]
enum Step {
    /// Time passes (ms).
    Advance(u64),
    /// The watchdog sends a renewal, or `extend(ttl ms)` is sent, if no op is on the wire.
    Send(Option<u64>),
    /// The server applies the op on the wire (if it has not yet and the key is still ours).
    Apply,
    /// The op's answer arrives: what the server did, or `Unknown` (timeout, dropped).
    Answer { lost: bool },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u64..400).prop_map(Step::Advance),
        2 => prop_oneof![Just(None), (10u64..3_000).prop_map(Some)].prop_map(Step::Send),
        2 => Just(Step::Apply),
        2 => any::<bool>().prop_map(|lost| Step::Answer { lost }),
    ]
}

/// The op on the wire.
#[derive(Debug, Clone, Copy)]
struct Wire {
    seq: u64,
    sent_at: Instant,
    kind: OpKind,
    ask: Ask,
    applied: bool,
}

/// The server's view of the key: `Some(expiry)` while it holds our token.
struct Server {
    expiry: Option<Instant>,
    /// How fast the server's clock runs (≥ 1: a ttl elapses sooner in real time).
    rate: f64,
}

impl Server {
    fn expire(&mut self, now: Instant) {
        if self.expiry.is_some_and(|e| e <= now) {
            self.expiry = None;
        }
    }

    fn set(&mut self, now: Instant, ttl: Duration) {
        self.expiry = Some(now + ttl.div_f64(self.rate));
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// "The local deadline never outruns the server's expiry", over every generated history of
    /// grant, renewals, extends, late and lost answers, `max_hold` and `min_hold`.
    #[test]
    fn the_local_deadline_never_outruns_the_servers_expiry(
        ttl_ms in 10u64..3_000,
        grant_delay_ms in 0u64..50,
        drift_ppm in 0u32..=10_000,
        max_hold_ms in prop::option::of(10u64..10_000),
        min_hold_ms in prop::option::of(10u64..5_000),
        renews in any::<bool>(),
        steps in prop::collection::vec(step(), 1..120),
    ) {
        let ttl = Duration::from_millis(ttl_ms);
        let t0 = Instant::now();
        let mut now = t0;
        let mut server = Server { expiry: None, rate: 1.0 + f64::from(drift_ppm) / 1e6 };
        // The grant: sent at t0, applied by the server a little later, answered after that.
        let min_hold = min_hold_ms.map(Duration::from_millis);
        let grant_ttl = ttl.max(min_hold.unwrap_or_default());
        now += Duration::from_millis(grant_delay_ms);
        server.set(now, grant_ttl);
        let min_hold_until = min_hold.map(|m| now + m);
        let mut t = Timing::granted(
            ttl,
            grant_ttl,
            t0,
            renews,
            max_hold_ms.map(Duration::from_millis),
            min_hold_until,
        );
        let max_hold_until = max_hold_ms.map(|m| t0 + Duration::from_millis(m));
        let mut wire: Option<Wire> = None;
        let mut over = false;
        for (i, step) in steps.into_iter().enumerate() {
            match step {
                Step::Advance(ms) => now += Duration::from_millis(ms),
                Step::Send(extend) => {
                    if over || wire.is_some() {
                        continue;
                    }
                    let kind = extend.map_or(OpKind::Renewal, |ms| OpKind::Extend(Duration::from_millis(ms)));
                    let wanted = match kind {
                        OpKind::Renewal => t.ttl(),
                        OpKind::Extend(ttl) => ttl,
                    };
                    let Some(ask) = t.ask(wanted, now) else {
                        // Only once max_hold has been reached.
                        let until = max_hold_until.expect("ask refuses only with a max_hold");
                        prop_assert!(until <= now, "step {i}: ask refused before max_hold");
                        t.stop_renewing();
                        continue;
                    };
                    if let Some(until) = max_hold_until {
                        prop_assert!(now + ask.ttl <= until, "step {i}: an ask past max_hold");
                    }
                    if let Some(until) = min_hold_until
                        && !ask.last
                    {
                        prop_assert!(now + ask.ttl >= until, "step {i}: an ask below min_hold");
                    }
                    let seq = t.send(now, ask);
                    wire = Some(Wire { seq, sent_at: now, kind, ask, applied: false });
                }
                Step::Apply => {
                    server.expire(now);
                    if let Some(w) = wire.as_mut()
                        && !w.applied
                    {
                        w.applied = true;
                        // Compare-and-PEXPIRE: never re-creates an expired key.
                        if server.expiry.is_some() {
                            server.set(now, w.ask.ttl);
                        }
                    }
                }
                Step::Answer { lost } => {
                    server.expire(now);
                    let Some(w) = wire.take() else { continue };
                    let answer = if lost {
                        Answer::Unknown
                    } else if !w.applied {
                        // An answer means the server ran it: apply it now.
                        if server.expiry.is_some() {
                            server.set(now, w.ask.ttl);
                            Answer::Held
                        } else {
                            Answer::NotHeld
                        }
                    } else if server.expiry.is_some() {
                        Answer::Held
                    } else {
                        Answer::NotHeld
                    };
                    t.apply(w.seq, w.sent_at, w.kind, w.ask, answer, now);
                    if answer == Answer::NotHeld {
                        over = true;
                        prop_assert_eq!(t.next_renew(), None, "step {}: renewing a lost lease", i);
                    }
                    if answer == Answer::Held && renews && !w.ask.last {
                        prop_assert!(t.next_renew().is_some(), "step {i}: renewals stopped on a held lease");
                    }
                    if answer == Answer::Unknown && renews && !w.ask.last && !over && t.next_renew().is_some() {
                        let retry = t.next_renew().expect("checked");
                        prop_assert!(retry > now, "step {i}: a retry in the past");
                    }
                }
            }
            server.expire(now);
            // The invariant: whatever the lease believes, the key lives at least that long.
            // (Once the key is gone, the deadline must be at or before the moment it went.)
            let expiry = server.expiry.unwrap_or(now);
            if !over && server.expiry.is_some() {
                prop_assert!(
                    t.valid_until() <= expiry,
                    "step {i}: local deadline {:?} after the server's expiry {:?}",
                    t.valid_until() - t0,
                    expiry - t0
                );
            } else if !over {
                prop_assert!(
                    t.valid_until() <= now,
                    "step {i}: the key is gone but the lease believes it valid for {:?}",
                    t.valid_until() - now
                );
            }
        }
    }
}
