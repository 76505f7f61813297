//! The `metrics` feature: what each lock and rate-limit event records, read back from a
//! `metrics-util` `DebuggingRecorder`.
//!
//! The recorder is global (installed once for this binary), because the events that end a
//! lease happen on the watchdog's task, on whichever worker thread runs it; a thread-local
//! recorder would miss them. The tests take turns (`serial()`), and each asserts on what
//! changed between two readings, so none depends on what ran before it.
#![cfg(feature = "metrics")]

#[path = "../support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use distlock::ratelimit::{Decision, Lockout, Origin, Outage, Policy, Rate, RateLimiter};
use distlock::{Client, LockError, LossReason, RateLimitError};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tokio::time::Instant;

use crate::support::RedisServer;
use crate::support::fixture::Fixture;
use crate::support::server::short_client;

/// What the recorder has been given since it was installed. The debugging recorder's
/// snapshots drain it (counters and gauges back to 0, histograms emptied), so the readings
/// are summed here: as distlock's gauges only ever go up and down, the sum of a gauge's
/// readings is its value.
#[derive(Clone, Default)]
struct Totals {
    counters: HashMap<String, u64>,
    gauges: HashMap<String, f64>,
    histograms: HashMap<String, Vec<f64>>,
}

/// A metric's name and labels, as one string: `name{a=1,b=2}` with the labels sorted.
fn series(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}

impl Totals {
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.counters
            .get(&series(name, labels))
            .copied()
            .unwrap_or(0)
    }

    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.gauges
            .get(&series(name, labels))
            .copied()
            .unwrap_or(0.0)
    }

    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.histograms
            .get(&series(name, labels))
            .cloned()
            .unwrap_or_default()
    }

    /// Every series of `name`, for assertion messages.
    fn all(&self, name: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .counters
            .iter()
            .map(|(k, v)| format!("{k} = {v}"))
            .chain(self.gauges.iter().map(|(k, v)| format!("{k} = {v}")))
            .chain(
                self.histograms
                    .iter()
                    .map(|(k, v)| format!("{k} = {} samples", v.len())),
            )
            .filter(|s| s.starts_with(name))
            .collect();
        out.sort();
        out
    }
}

struct Recorder {
    snapshotter: Snapshotter,
    totals: Mutex<Totals>,
}

fn recorder() -> &'static Recorder {
    static RECORDER: OnceLock<Recorder> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::set_global_recorder(recorder).expect("the only recorder of this binary");
        distlock::describe_metrics();
        Recorder {
            snapshotter,
            totals: Mutex::new(Totals::default()),
        }
    })
}

/// Everything recorded so far.
fn read() -> Totals {
    let recorder = recorder();
    let mut totals = recorder
        .totals
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    for (key, _, _, value) in recorder.snapshotter.snapshot().into_vec() {
        let labels: Vec<(&str, &str)> = key.key().labels().map(|l| (l.key(), l.value())).collect();
        let name = series(key.key().name(), &labels);
        match value {
            DebugValue::Counter(n) => *totals.counters.entry(name).or_default() += n,
            DebugValue::Gauge(g) => *totals.gauges.entry(name).or_default() += g.into_inner(),
            DebugValue::Histogram(xs) => totals
                .histograms
                .entry(name)
                .or_default()
                .extend(xs.into_iter().map(|x| x.into_inner())),
        }
    }
    totals.clone()
}

/// One test at a time: the lock metrics' labels do not say which test recorded them.
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let guard = SERIAL.lock().await;
    recorder();
    guard
}

/// Waits (bounded) until `done` holds of a fresh reading.
async fn until(what: &str, done: impl Fn(&Totals) -> bool) -> Totals {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = read();
        if done(&now) {
            return now;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

const ACQUIRED: &str = "distlock_lock_acquired_total";
const BUSY: &str = "distlock_lock_busy_total";
const TIMEOUT: &str = "distlock_lock_timeout_total";
const LOST: &str = "distlock_lock_lost_total";
const HANDOFF: &str = "distlock_lock_handoff_total";
const WAIT: &str = "distlock_lock_wait_seconds";
const HOLD: &str = "distlock_lock_hold_seconds";
const HELD: &str = "distlock_leases_held";
const WAITERS: &str = "distlock_lock_waiters";
const DECISIONS: &str = "distlock_ratelimit_decisions_total";
const CHECK: &str = "distlock_ratelimit_check_seconds";
const UNAVAILABLE: &str = "distlock_ratelimit_unavailable_total";
const BREAKER_OPEN: &str = "distlock_ratelimit_breaker_open";

const LOCK: &[(&str, &str)] = &[("kind", "lock")];

/// A grant counts one acquisition and one wait sample, and one held lease until it is
/// released; the release takes the lease off the gauge and records how long it was held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_then_released_is_counted_and_leaves_no_lease() {
    let _serial = serial().await;
    let client = Client::in_memory();
    let before = read();
    let lease = client.lock("m:held").acquire().await.expect("acquire");
    let held = read();
    assert_eq!(
        held.counter(ACQUIRED, LOCK),
        before.counter(ACQUIRED, LOCK) + 1
    );
    assert_eq!(
        held.samples(WAIT, LOCK).len(),
        before.samples(WAIT, LOCK).len() + 1
    );
    assert_eq!(held.gauge(HELD, LOCK), before.gauge(HELD, LOCK) + 1.0);

    tokio::time::sleep(Duration::from_millis(50)).await;
    lease.release().await.expect("release");
    let after = read();
    assert_eq!(after.gauge(HELD, LOCK), before.gauge(HELD, LOCK));
    let holds = after.samples(HOLD, LOCK);
    assert_eq!(holds.len(), before.samples(HOLD, LOCK).len() + 1);
    let hold = *holds.last().expect("a hold sample");
    assert!((0.05..5.0).contains(&hold), "held for {hold} s");
    // A release is not a loss.
    assert_eq!(after.all(LOST), before.all(LOST));
}

/// Each primitive's grants are counted under its kind, and a lease dropped without a release
/// leaves the gauge too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_is_counted_and_a_dropped_lease_leaves_the_gauge() {
    let _serial = serial().await;
    let client = Client::in_memory();
    let kinds = |k| [("kind", k)];
    let before = read();
    let permit = client
        .semaphore("m:sem", 2)
        .acquire()
        .await
        .expect("permit");
    let reader = client.rw_lock("m:rw").read().await.expect("read");
    let both = client
        .multi_lock(["m:a", "m:b"])
        .acquire()
        .await
        .expect("multi");
    let path = client
        .hierarchy_lock("m/h/1")
        .exclusive()
        .await
        .expect("path");
    let held = read();
    for kind in ["semaphore", "read", "multi", "hierarchy"] {
        assert_eq!(
            held.counter(ACQUIRED, &kinds(kind)),
            before.counter(ACQUIRED, &kinds(kind)) + 1,
            "{kind}: {:?}",
            held.all(ACQUIRED)
        );
    }
    // A multi-lock's locks are leases of locks.
    let held_delta = |t: &Totals, k| t.gauge(HELD, &kinds(k)) - before.gauge(HELD, &kinds(k));
    assert_eq!(held_delta(&held, "semaphore"), 1.0);
    assert_eq!(held_delta(&held, "read"), 1.0);
    assert_eq!(held_delta(&held, "lock"), 2.0);
    assert_eq!(held_delta(&held, "hierarchy"), 1.0);

    drop(permit);
    drop(reader);
    drop(both);
    drop(path);
    let after = read();
    for kind in ["semaphore", "read", "lock", "hierarchy"] {
        assert_eq!(
            held_delta(&after, kind),
            0.0,
            "{kind}: {:?}",
            after.all(HELD)
        );
    }
    // The reader's release was sent in the background: wait for it.
    let writer = client
        .rw_lock("m:rw")
        .wait(Duration::from_secs(5))
        .write()
        .await
        .expect("write");
    assert_eq!(
        read().counter(ACQUIRED, &kinds("write")),
        before.counter(ACQUIRED, &kinds("write")) + 1
    );
    writer.release().await.expect("release");
}

/// An acquire that does not wait and finds the lock held counts as busy; one whose wait runs
/// out counts as a timeout. Neither counts as an acquisition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_and_timeout_answers_are_counted() {
    let _serial = serial().await;
    let client = Client::in_memory();
    let lease = client.lock("m:busy").acquire().await.expect("acquire");
    let before = read();
    assert!(matches!(
        client.lock("m:busy").acquire().await,
        Err(LockError::Busy { .. })
    ));
    let busy = read();
    assert_eq!(busy.counter(BUSY, LOCK), before.counter(BUSY, LOCK) + 1);
    assert_eq!(busy.counter(TIMEOUT, LOCK), before.counter(TIMEOUT, LOCK));
    assert!(matches!(
        client
            .lock("m:busy")
            .wait(Duration::from_millis(50))
            .acquire()
            .await,
        Err(LockError::Timeout { .. })
    ));
    let after = read();
    assert_eq!(
        after.counter(TIMEOUT, LOCK),
        before.counter(TIMEOUT, LOCK) + 1
    );
    assert_eq!(after.counter(BUSY, LOCK), busy.counter(BUSY, LOCK));
    assert_eq!(
        after.counter(ACQUIRED, LOCK),
        before.counter(ACQUIRED, LOCK)
    );
    // The waiter that timed out is no longer counted as waiting.
    assert_eq!(after.gauge(WAITERS, LOCK), before.gauge(WAITERS, LOCK));
    lease.release().await.expect("release");
}

/// A lease without its watchdog, past its ttl, is lost as expired: counted with that reason,
/// with its hold, and off the gauge (once: its release afterwards changes nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_counted_as_lost_with_its_reason() {
    let _serial = serial().await;
    let client = Client::in_memory();
    let expired = [("kind", "lock"), ("reason", "expired")];
    let before = read();
    let lease = client
        .lock("m:expires")
        .ttl(Duration::from_millis(100))
        .watchdog(false)
        .acquire()
        .await
        .expect("acquire");
    tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("lost at its deadline");
    assert_eq!(lease.lost_reason(), Some(LossReason::Expired));
    // The lost signal and the deadline's check race the watchdog's scan to end the lease:
    // whichever ends it records it, a moment after the other may have seen it end.
    let lost = until("the loss to be counted", |t| {
        t.counter(LOST, &expired) > before.counter(LOST, &expired)
    })
    .await;
    assert_eq!(
        lost.counter(LOST, &expired),
        before.counter(LOST, &expired) + 1
    );
    assert_eq!(lost.gauge(HELD, LOCK), before.gauge(HELD, LOCK));
    assert_eq!(
        lost.samples(HOLD, LOCK).len(),
        before.samples(HOLD, LOCK).len() + 1
    );
    let _ = lease.release().await;
    let after = read();
    assert_eq!(after.gauge(HELD, LOCK), before.gauge(HELD, LOCK));
    assert_eq!(after.counter(LOST, &expired), lost.counter(LOST, &expired));
    assert_eq!(
        after.samples(HOLD, LOCK).len(),
        lost.samples(HOLD, LOCK).len()
    );
}

/// Redis: a key deleted behind the holder's back is found gone by the watchdog's renewal; the
/// loss is counted as `not_held`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_whose_key_was_deleted_is_counted_as_not_held() {
    let _serial = serial().await;
    let fx = Fixture::redis().await;
    let not_held = [("kind", "lock"), ("reason", "not_held")];
    let before = read();
    let lease = fx
        .client
        .lock("m:deleted")
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .expect("acquire");
    assert!(
        fx.client
            .__inspect()
            .delete(&fx.lock_key("m:deleted"))
            .await
            .expect("delete")
    );
    tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("the renewal finds the key gone");
    assert_eq!(lease.lost_reason(), Some(LossReason::NotHeld));
    let after = read();
    assert_eq!(
        after.counter(LOST, &not_held),
        before.counter(LOST, &not_held) + 1,
        "{:?}",
        after.all(LOST)
    );
    assert_eq!(after.gauge(HELD, LOCK), before.gauge(HELD, LOCK));
    drop(lease);
}

/// A task in which `client` waits up to `wait` for lock `name`.
fn spawn_waiter(
    client: &Client,
    name: &'static str,
    wait: Duration,
) -> tokio::task::JoinHandle<Result<distlock::Lease, LockError>> {
    let client = client.clone();
    tokio::spawn(async move { client.lock(name).wait(wait).acquire().await })
}

/// A waiter is counted while it waits for a busy lock, and no longer once its future is
/// dropped; a waiter that gets the lock stops counting too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiters_gauge_follows_a_waiter_until_it_is_cancelled() {
    let _serial = serial().await;
    let client = Client::in_memory();
    let lease = client.lock("m:wait").acquire().await.expect("acquire");
    let before = read();
    let waiter = spawn_waiter(&client, "m:wait", Duration::from_secs(30));
    let base = before.gauge(WAITERS, LOCK);
    until("the waiter to be counted", |t| {
        t.gauge(WAITERS, LOCK) == base + 1.0
    })
    .await;
    waiter.abort();
    assert!(waiter.await.expect_err("aborted").is_cancelled());
    assert_eq!(read().gauge(WAITERS, LOCK), base);

    // One that is granted the lock after waiting.
    let waiter = spawn_waiter(&client, "m:wait", Duration::from_secs(30));
    until("the second waiter to be counted", |t| {
        t.gauge(WAITERS, LOCK) == base + 1.0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    lease.release().await.expect("release");
    let next = waiter.await.expect("waiter").expect("granted");
    let after = read();
    assert_eq!(after.gauge(WAITERS, LOCK), base);
    // Its wait is in the histogram: at least the 100 ms the lock stayed held.
    let waited = *after.samples(WAIT, LOCK).last().expect("a wait sample");
    assert!(waited >= 0.1, "waited {waited} s");
    next.release().await.expect("release");
}

/// Redis: a release that passes the lock to a queued waiter of the same client counts a
/// hand-off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_is_counted() {
    let _serial = serial().await;
    let fx = Fixture::redis().await;
    let lease = fx
        .client
        .lock("m:handoff")
        .acquire()
        .await
        .expect("acquire");
    let waiter = spawn_waiter(&fx.client, "m:handoff", Duration::from_secs(20));
    let deadline = Instant::now() + Duration::from_secs(5);
    while fx.client.__inspect().queued_for_handoff() == 0 {
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = read();
    lease.release().await.expect("release");
    let next = waiter.await.expect("waiter").expect("handed the lock");
    let after = read();
    assert_eq!(
        after.counter(HANDOFF, &[]),
        before.counter(HANDOFF, &[]) + 1
    );
    assert_eq!(
        after.counter(ACQUIRED, LOCK),
        before.counter(ACQUIRED, LOCK) + 1
    );
    next.release().await.expect("release");
}

fn decisions(t: &Totals, policy: &str, outcome: &str, origin: &str) -> u64 {
    t.counter(
        DECISIONS,
        &[("policy", policy), ("outcome", outcome), ("origin", origin)],
    )
}

/// Asserts that from `before` to `after`, `policy`'s decisions by (outcome, origin) grew by
/// the counts in `expected`.
#[track_caller]
fn assert_decisions(before: &Totals, after: &Totals, policy: &str, expected: &[(&str, &str, u64)]) {
    for &(outcome, origin, count) in expected {
        assert_eq!(
            decisions(after, policy, outcome, origin) - decisions(before, policy, outcome, origin),
            count,
            "{outcome} by {origin}: {:?}",
            after.all(DECISIONS)
        );
    }
}

/// `n` checks of `user:1` on `limiter`, one after the other, each decision as `seen` sees it.
async fn checks<T>(limiter: &RateLimiter, n: usize, seen: impl Fn(Decision) -> T) -> Vec<T> {
    let mut decisions = Vec::new();
    for _ in 0..n {
        decisions.push(seen(limiter.check("user:1").await.expect("check")));
    }
    decisions
}

/// Allowed and denied decisions are counted under their policy and origin (the store, then
/// the deny cache); a peek is not a decision; every check is timed under the policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_decisions_are_counted_by_policy_outcome_and_origin() {
    let _serial = serial().await;
    let client = Client::in_memory();
    let p = "m-counted";
    let limiter = client
        .rate_limiter(Policy::gcra(p, Rate::per_minute(2).expect("rate")).expect("policy"))
        .build()
        .expect("valid limiter");
    let before = read();
    let origins = checks(&limiter, 4, |d| (d.allowed, d.origin)).await;
    assert_eq!(
        origins,
        [
            (true, Origin::Store),
            (true, Origin::Store),
            (false, Origin::Store),
            (false, Origin::DenyCache)
        ]
    );
    limiter.peek("user:1").await.expect("peek");
    let after = read();
    let expected = [
        ("allowed", "store", 2),
        ("denied", "store", 1),
        ("denied", "deny_cache", 1),
    ];
    assert_decisions(&before, &after, p, &expected);
    let policy = [("policy", p)];
    assert_eq!(
        after.samples(CHECK, &policy).len(),
        before.samples(CHECK, &policy).len() + 5
    );
    // Another policy's figures are its own.
    assert_eq!(decisions(&after, "m-other", "allowed", "store"), 0);
}

/// Shadow mode: a request the policy denies but lets through is counted as `shadow_denied`,
/// not as allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_counts_shadow_denials() {
    let _serial = serial().await;
    let client = Client::in_memory();
    let p = "m-shadow";
    let limiter = client
        .rate_limiter(Policy::gcra(p, Rate::per_minute(1).expect("rate")).expect("policy"))
        .shadow(true)
        .deny_cache(0)
        .build()
        .expect("valid limiter");
    let before = read();
    let first = limiter.check("user:1").await.expect("check");
    let second = limiter.check("user:1").await.expect("check");
    assert!(first.allowed && !first.shadowed);
    assert!(second.allowed && second.shadowed);
    let after = read();
    let expected = [
        ("allowed", "store", 1),
        ("shadow_denied", "store", 1),
        ("denied", "store", 0),
    ];
    assert_decisions(&before, &after, p, &expected);
}

/// A lockout's denials are counted as `locked_out`, apart from the policy's plain denials:
/// the breach that starts the block and every check during it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockout_denials_are_counted_as_locked_out() {
    let _serial = serial().await;
    let client = Client::in_memory();
    let p = "m-lockout";
    let policy = Policy::gcra(p, Rate::per_minute(2).expect("rate"))
        .expect("policy")
        .with_lockout(Lockout::after_breach([Duration::from_secs(600)]))
        .expect("lockout");
    let limiter = client
        .rate_limiter(policy)
        .deny_cache(0)
        .build()
        .expect("valid limiter");
    let before = read();
    let seen = checks(&limiter, 4, |d| (d.allowed, d.locked_out)).await;
    assert_eq!(
        seen,
        [(true, false), (true, false), (false, true), (false, true)]
    );
    let after = read();
    let expected = [
        ("allowed", "store", 2),
        ("locked_out", "store", 2),
        ("denied", "store", 0),
    ];
    assert_decisions(&before, &after, p, &expected);
}

/// Redis, killed: the local fallback's and failing open's decisions are counted with their
/// origin; a fail-closed check that errs is timed but is no decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_while_the_store_is_down_are_counted_with_their_origin() {
    let _serial = serial().await;
    let mut server = RedisServer::start();
    let client = short_client(&server.url()).await;
    let limiter = |name: &str, outage| {
        client
            .rate_limiter(Policy::gcra(name, Rate::per_minute(5).expect("rate")).expect("policy"))
            .on_outage(outage)
            .deadline(Duration::from_millis(150))
            .build()
            .expect("valid limiter")
    };
    let fallback = limiter("m-fallback", Outage::LocalFallback);
    let open = limiter("m-open", Outage::FailOpen);
    let closed = limiter("m-closed", Outage::FailClosed);
    assert_eq!(
        fallback.check("warm").await.expect("check").origin,
        Origin::Store
    );
    server.kill();
    let before = read();
    let d = fallback
        .check("user:1")
        .await
        .expect("the fallback decides");
    assert_eq!((d.allowed, d.origin), (true, Origin::LocalFallback));
    let d = open.check("user:1").await.expect("fails open");
    assert_eq!((d.allowed, d.origin), (true, Origin::FailOpen));
    assert!(matches!(
        closed.check("user:1").await,
        Err(RateLimitError::Store(_) | RateLimitError::CircuitOpen { .. })
    ));
    let after = read();
    let delta = |p, o, g| decisions(&after, p, o, g) - decisions(&before, p, o, g);
    assert_eq!(
        delta("m-fallback", "allowed", "local_fallback"),
        1,
        "{:?}",
        after.all(DECISIONS)
    );
    assert_eq!(delta("m-open", "allowed", "fail_open"), 1);
    assert!(
        after.all(DECISIONS).iter().all(|s| !s.contains("m-closed")),
        "{:?}",
        after.all(DECISIONS)
    );
    let closed_policy = [("policy", "m-closed")];
    assert_eq!(
        after.samples(CHECK, &closed_policy).len(),
        before.samples(CHECK, &closed_policy).len() + 1
    );
    // Issue 29 §2: each unanswered operation is counted with what the outage policy made of
    // it, so an outage can be alerted on.
    let unavailable = |t: &Totals, policy: &str, outcome: &str| {
        ["store", "circuit_open"]
            .iter()
            .map(|reason| {
                t.counter(
                    UNAVAILABLE,
                    &[("policy", policy), ("reason", reason), ("outcome", outcome)],
                )
            })
            .sum::<u64>()
    };
    for (policy, outcome) in [
        ("m-fallback", "local_fallback"),
        ("m-open", "failed_open"),
        ("m-closed", "failed_closed"),
    ] {
        assert_eq!(
            unavailable(&after, policy, outcome) - unavailable(&before, policy, outcome),
            1,
            "{policy}: {:?}",
            after.all(UNAVAILABLE)
        );
    }
    // The breaker opens after three failures in a row: the gauge says so, and drops back
    // once the store answers again.
    let gauge = |t: &Totals| t.gauge(BREAKER_OPEN, &[("policy", "m-open")]);
    for _ in 0..5 {
        open.check("user:1").await.expect("fails open");
    }
    assert_eq!(gauge(&read()), 1.0, "{:?}", read().all(BREAKER_OPEN));
    server.restart();
    let back = Instant::now();
    while open.check("user:2").await.expect("check").origin != Origin::Store {
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "never back on the store"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(gauge(&read()), 0.0, "{:?}", read().all(BREAKER_OPEN));
}
