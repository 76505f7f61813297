//! Operating a limiter, on both stores: reset, refund and penalize on every algorithm; a
//! change of a subject's rate keeps what it used; reservations served in order, given back
//! when cancelled, refused past the maximum wait; and the circuit breaker during an outage.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::ratelimit::{
    Algorithm, CircuitBreaker, Origin, Outage, Policy, Rate, RateLimiter, SubjectRates,
};
use distlock::{Client, RateLimitError};
use tokio::time::Instant;

use crate::common::{ALGORITHMS, EPOCH_US, allowed_of, brief, policy};
use crate::support::fixture::{Fixture, on_both_stores};
use crate::support::{Proxy, RedisServer};

on_both_stores!(
    refund_penalize_and_reset_on_every_algorithm,
    several_policies_move_together,
    a_rate_change_keeps_what_was_used,
    acquire_lets_waiters_through_no_faster_than_the_rate,
    rates_come_from_the_subject_cached_and_changes_keep_usage,
    a_sliding_log_refilled_at_one_instant_counts_every_entry,
);
// Bodies that time something: on Redis they check what holds however late anything runs;
// on tokio's paused clock (memory), where nothing runs late, the exact figures as well.
on_both_stores!(
    paused_memory: a_cancelled_reservation_gives_its_turn_back,
    a_turn_past_max_wait_is_refused_at_once,
);

/// 5 per minute on every algorithm: three checks, a refund, a penalty that saturates at
/// empty, a refund larger than what was used, a reset.
async fn refund_penalize_and_reset_on_every_algorithm(fx: Fixture) {
    for algorithm in ALGORITHMS {
        let limiter = fx
            .client
            .rate_limiter(policy(algorithm, 5, Duration::from_secs(60)))
            .deny_cache(0)
            .build()
            .expect("valid limiter");
        let subject = format!("ops:{}", algorithm.name());
        for _ in 0..3 {
            assert!(limiter.check(&subject).await.expect("check").allowed);
        }
        let after = limiter.refund(&subject, 1).await.expect("refund");
        assert_eq!(
            after.remaining,
            3,
            "{algorithm:?} refund: {}",
            brief(&after)
        );
        assert!(after.allowed, "{algorithm:?}: an answer as a peek");
        let after = limiter.penalize(&subject, 100).await.expect("penalize");
        assert_eq!(
            after.remaining,
            0,
            "{algorithm:?} penalty: {}",
            brief(&after)
        );
        assert!(!after.allowed, "{algorithm:?}: used up");
        // The longest wait of a subject that used exactly its limit: the period; on a
        // sliding window, used at the very start of a window, the rest of that window plus the
        // fifth of the next one after which its weight lets one request in (which of the two
        // applies depends on the wall clock).
        let full_wait = match algorithm {
            Algorithm::SlidingWindow => Duration::from_secs(60 + 60 / 5),
            _ => Duration::from_secs(60),
        };
        assert!(
            after.retry_after <= full_wait,
            "{algorithm:?}: a penalty never waits longer than a subject that used its limit: {}",
            brief(&after)
        );
        let again = limiter.penalize(&subject, 100).await.expect("penalize");
        assert!(
            again.reset_after <= after.reset_after,
            "{algorithm:?}: a second penalty puts nothing into debt: {} then {}",
            brief(&after),
            brief(&again)
        );
        let after = limiter.refund(&subject, 1000).await.expect("refund");
        assert_eq!(
            after.remaining,
            5,
            "{algorithm:?} full refund: {}",
            brief(&after)
        );
        assert!(limiter.check(&subject).await.expect("check").allowed);
        let after = limiter.reset(&subject).await.expect("reset");
        assert_eq!(
            (after.remaining, after.reset_after),
            (5, Duration::ZERO),
            "{algorithm:?} reset: {}",
            brief(&after)
        );
        let noop = limiter.refund(&subject, 0).await.expect("refund 0");
        assert_eq!(noop.remaining, 5);
        assert!(matches!(
            limiter.refund("", 1).await,
            Err(RateLimitError::InvalidSubject(_))
        ));
    }
}

/// A reset clears every policy of the limiter; a refund gives back under each.
async fn several_policies_move_together(fx: Fixture) {
    let limiter = fx
        .client
        .rate_limiter_all([
            Policy::gcra("per-second", Rate::per_second(10).expect("rate")).expect("policy"),
            Policy::fixed_window("per-day", Rate::per_day(3).expect("rate")).expect("policy"),
        ])
        .build()
        .expect("policies");
    for _ in 0..3 {
        limiter.check("both").await.expect("check");
    }
    let refused = limiter.check("both").await.expect("check");
    assert!(!refused.allowed && &*refused.policy == "per-day");
    let after = limiter.refund("both", 2).await.expect("refund");
    assert_eq!(after.policies[0].remaining, 9, "{after:?}");
    assert_eq!(after.policies[1].remaining, 2, "{after:?}");
    let after = limiter.reset("both").await.expect("reset");
    assert_eq!(after.policies[0].remaining, 10);
    assert_eq!(after.policies[1].remaining, 3);
}

/// A limiter of one policy `name`: `count` per `period` by `algorithm`.
fn at_rate(
    fx: &Fixture,
    name: &str,
    algorithm: Algorithm,
    count: u32,
    period: Duration,
) -> RateLimiter {
    let rate = Rate::per(count, period).expect("rate");
    let policy = Policy::new(name, algorithm, rate).expect("policy");
    fx.client
        .rate_limiter(policy)
        .build()
        .expect("valid limiter")
}

/// A subject that used its whole burst at one rate has used it at the next: moving to a
/// slower rate (same burst) hands out nothing, moving to a faster one keeps the units used
/// and lets them drain at the new pace.
async fn a_rate_change_keeps_what_was_used(fx: Fixture) {
    for algorithm in ALGORITHMS {
        let fast = at_rate(&fx, "plan", algorithm, 10, Duration::from_secs(1));
        let slow = at_rate(&fx, "plan", algorithm, 10, Duration::from_secs(600));
        let subject = format!("plan:{}", algorithm.name());
        // The windows are aligned to the Unix epoch: start the ten checks just after a
        // boundary, so they all fall in one fast window (ten checks that straddled one would
        // leave fewer than ten in the window the new rate carries over, and pass).
        let into_second = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .subsec_nanos();
        tokio::time::sleep(
            Duration::from_secs(1) - Duration::from_nanos(u64::from(into_second))
                + Duration::from_millis(5),
        )
        .await;
        assert_eq!(allowed_of(&fast, &subject, 10).await, 10, "{algorithm:?}");
        // Downgraded at once: nothing more for a long while.
        let d = slow.check(&subject).await.expect("check");
        assert!(
            !d.allowed,
            "{algorithm:?}: the change of rate handed out a burst: {}",
            brief(&d)
        );
        assert!(
            d.retry_after > Duration::from_secs(1),
            "{algorithm:?}: {}",
            brief(&d)
        );
    }
    // GCRA: upgraded from the slow rate, the used units drain at the fast pace.
    let upgrade = |period| at_rate(&fx, "upgrade", Algorithm::Gcra, 10, period);
    let (fast, slow) = (
        upgrade(Duration::from_millis(100)),
        upgrade(Duration::from_secs(600)),
    );
    for _ in 0..10 {
        assert!(slow.check("upgraded").await.expect("check").allowed);
    }
    let d = fast.peek("upgraded").await.expect("peek");
    assert!(
        d.reset_after <= Duration::from_millis(100),
        "10 units of 10 ms each: {}",
        brief(&d)
    );
}

/// A GCRA policy `name` of `per_second` per second, burst 1: one turn at a time.
fn one_at_a_time(name: &str, per_second: u32) -> Policy {
    let rate = Rate::per_second(per_second).expect("rate");
    Policy::gcra(name, rate.burst(1).expect("burst")).expect("policy")
}

/// 50/s, burst 1: 12 tasks acquire at once; each waits its turn, so the k-th pass comes no
/// sooner than k turns of 20 ms after the start (a late wake-up on a loaded machine is no
/// failure; the two-process test in `tests/waiting` measures the spacing).
async fn acquire_lets_waiters_through_no_faster_than_the_rate(fx: Fixture) {
    let limiter = fx
        .client
        .rate_limiter(one_at_a_time("worker", 50))
        .build()
        .expect("valid limiter");
    let passes = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            let limiter = limiter.clone();
            let passes = Arc::clone(&passes);
            tokio::spawn(async move {
                let d = limiter.acquire("partner").await.expect("acquire");
                assert!(d.allowed, "{}", brief(&d));
                passes.lock().expect("lock").push(start.elapsed());
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    let mut passes = passes.lock().expect("lock").clone();
    passes.sort();
    assert_eq!(passes.len(), 12);
    for (k, pass) in passes.iter().enumerate() {
        // Less 1 ms for the store's clock against this one.
        let turn = Duration::from_millis(20) * u32::try_from(k).expect("fits");
        assert!(
            *pass + Duration::from_millis(1) >= turn,
            "pass {k} came before its turn at {turn:?}: {passes:?}"
        );
    }
}

/// A reservation dropped before its turn gives the turn back: the next caller gets it.
///
/// 2/s with a burst of 1: turns 500 ms apart, counted on the store's clock from the first
/// acquire. A reservation the store answers `e` after that acquire waits `k × 500 ms − e`. On
/// the real clock `e` is known only to lie between the first's answer and the later one's
/// send (at least) and the first's send and the later one's answer (at most), a window a busy
/// machine stretches: each delay is checked against both ends, so a late machine widens what
/// the test can tell apart but never fails a right answer.
async fn a_cancelled_reservation_gives_its_turn_back(fx: Fixture) {
    const TURN: Duration = Duration::from_millis(500);
    // The store's clock counts whole milliseconds.
    const TICK: Duration = Duration::from_millis(1);
    let limiter = fx
        .client
        .rate_limiter(one_at_a_time("cancel", 2))
        .build()
        .expect("valid limiter");
    let first_sent = Instant::now();
    assert!(limiter.acquire("c").await.expect("first").allowed);
    let first_answered = Instant::now();
    // A granted reservation, with the least and the most time the store's clock can have
    // moved between the first acquire and it.
    let reserve = || async {
        let least = first_answered.elapsed();
        let r = limiter
            .reserve("c", 1, Duration::from_secs(5))
            .await
            .expect("reserve");
        assert!(r.is_granted(), "{r:?}");
        (r, least, first_sent.elapsed())
    };
    // Whether a reservation seen `least`..`most` after the first has the k-th turn after it.
    let has_turn = |delay: Duration, least: Duration, most: Duration, k: u32| {
        delay + least <= TURN * k + TICK && delay + most + TICK >= TURN * k
    };
    let (second, least, most) = reserve().await;
    assert!(
        has_turn(second.delay(), least, most, 1),
        "the second turn: {second:?}, {least:?}..{most:?} after the first"
    );
    let (third, least, most) = reserve().await;
    assert!(
        has_turn(third.delay(), least, most, 2),
        "the third turn: {third:?}, {least:?}..{most:?} after the first"
    );
    drop(third);
    // The refund goes out in the background.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (fourth, least, most) = reserve().await;
    // Given back: the fourth gets the third's turn (2 turns after the first), not the one
    // after it (3 turns; told apart while the window is under a turn wide).
    assert!(
        has_turn(fourth.delay(), least, most, 2),
        "the dropped turn was not given back: {fourth:?}, {least:?}..{most:?} after the first"
    );
    if fx.paused() {
        // Where nothing runs late, exactly: the fourth comes 100 ms after the third.
        assert_eq!(fourth.delay(), 2 * TURN - Duration::from_millis(100));
    }
    let passed = second.ready().await;
    assert!(passed.allowed);
    drop(fourth);
}

/// With max_wait 100 ms, a turn 500 ms away is refused at once and consumes nothing.
async fn a_turn_past_max_wait_is_refused_at_once(fx: Fixture) {
    let limiter = fx
        .client
        .rate_limiter(one_at_a_time("bounded", 2))
        .max_wait(Duration::from_millis(100))
        .build()
        .expect("valid limiter");
    assert!(limiter.acquire("b").await.expect("first").allowed);
    let start = Instant::now();
    let refused = limiter.acquire("b").await.expect("second");
    // Refused, not allowed: it did not wait for its turn (a wait ends allowed).
    assert!(!refused.allowed, "{}", brief(&refused));
    if fx.paused() {
        // Where nothing runs late, at once: no time passes at all.
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
    assert!(refused.retry_after > Duration::from_millis(100));
    let peek = limiter.peek("b").await.expect("peek");
    assert!(peek.retry_after <= refused.retry_after, "nothing consumed");
    // Zero makes acquire a check; a window algorithm waits by checking again.
    let window = fx
        .client
        .rate_limiter(policy(
            Algorithm::FixedWindow,
            1,
            Duration::from_millis(200),
        ))
        .max_wait(Duration::from_secs(1))
        .build()
        .expect("valid limiter");
    assert!(window.acquire("w").await.expect("acquire").allowed);
    let start = Instant::now();
    assert!(window.acquire("w").await.expect("acquire").allowed);
    if fx.paused() {
        // Where nothing runs late: at the next window, within 200 ms, plus the wait's
        // jitter and tokio's 1 ms timer resolution.
        assert!(start.elapsed() <= Duration::from_millis(400));
    }
}

/// Latencies of `n` sequential fail-open checks.
async fn outage_latencies(
    client: &Client,
    breaker: Option<CircuitBreaker>,
    n: usize,
) -> Vec<Duration> {
    let limiter = client
        .rate_limiter(policy(Algorithm::Gcra, 1000, Duration::from_secs(1)))
        .on_outage(Outage::FailOpen)
        .deadline(Duration::from_millis(150))
        .circuit_breaker(breaker)
        .build()
        .expect("valid limiter");
    let mut took = Vec::with_capacity(n);
    for i in 0..n {
        let start = Instant::now();
        let d = limiter
            .check(&format!("s{}", i % 10))
            .await
            .expect("fail open");
        assert_eq!(d.origin, Origin::FailOpen);
        took.push(start.elapsed());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    took
}

/// The measurement: a blackholed store and a 150 ms deadline. Without the breaker
/// every check waits the deadline; with it, only the first few and one probe per interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_answers_at_once_during_an_outage() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr()).await;
    let client = Client::builder()
        .response_timeout(Duration::from_millis(300))
        .connect(&proxy.url())
        .await
        .expect("connect");
    proxy.blackhole();
    let n = 200;
    let with = outage_latencies(&client, Some(CircuitBreaker::new()), n).await;
    let without = outage_latencies(&client, None, 20).await;
    let slow = |v: &[Duration]| {
        v.iter()
            .filter(|d| **d >= Duration::from_millis(75))
            .count()
    };
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / u32::try_from(v.len()).expect("fits");
    let mut sorted = with.clone();
    sorted.sort();
    println!(
        "outage, 150 ms deadline: without a breaker mean {:?} ({} of {} waited); with one mean \
         {:?}, p50 {:?}, p99 {:?}, max {:?} ({} of {n} waited)",
        mean(&without),
        slow(&without),
        without.len(),
        mean(&with),
        sorted[n / 2],
        sorted[n * 99 / 100],
        sorted[n - 1],
        slow(&with)
    );
    assert_eq!(
        slow(&without),
        without.len(),
        "every check waits without it"
    );
    // 200 checks of ~5 ms over ~1.5 s: 3 to trip, then a probe every 100..500 ms.
    assert!(slow(&with) <= 15, "{} checks waited: {with:?}", slow(&with));
    // Closing again after the outage is `outage::back_on_the_store_within_a_second_of_a_restart`
    // (every limiter has a breaker by default).
}

/// A plan per tenant from a lookup: the rate follows the plan, the lookup runs once per
/// subject while cached (once for 20 concurrent checks), a changed plan applies after the
/// cache's ttl with the usage carried over, and a failing or wrong lookup leaves the
/// policy's own rate.
async fn rates_come_from_the_subject_cached_and_changes_keep_usage(fx: Fixture) {
    let plans: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    plans.lock().expect("plans").insert("acme".into(), 10);
    let lookups = Arc::new(AtomicUsize::new(0));
    let limiter = {
        let (plans, lookups) = (Arc::clone(&plans), Arc::clone(&lookups));
        fx.client
            .rate_limiter(
                Policy::sliding_window("api", Rate::per_minute(2).expect("rate")).expect("policy"),
            )
            .rates_by_subject(move |tenant: String| {
                let (plans, lookups) = (Arc::clone(&plans), Arc::clone(&lookups));
                async move {
                    lookups.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    if tenant == "broken" {
                        return Err("the plan database is down".into());
                    }
                    if tenant == "wrong" {
                        return Ok(SubjectRates::new().rate("nope", Rate::per_minute(99)?));
                    }
                    let per_minute = plans.lock().expect("plans").get(&tenant).copied();
                    Ok::<_, Box<dyn std::error::Error + Send + Sync>>(match per_minute {
                        Some(n) => SubjectRates::new().rate("api", Rate::per_minute(n)?),
                        None => SubjectRates::new(),
                    })
                }
            })
            .rate_cache(Duration::from_millis(300), 100)
            .build()
            .expect("valid limiter")
    };
    let checks: Vec<_> = (0..20)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.check("acme").await.expect("check") })
        })
        .collect();
    let mut allowed = 0;
    for check in checks {
        let d = check.await.expect("task");
        assert_eq!(d.limit, 10, "{}", brief(&d));
        allowed += usize::from(d.allowed);
    }
    assert_eq!(allowed, 10, "the plan's 10 per minute");
    assert_eq!(
        lookups.load(Ordering::SeqCst),
        1,
        "one lookup for 20 checks"
    );
    let free = limiter.check("someone").await.expect("check");
    assert_eq!(free.limit, 2, "no plan: the policy's own rate");
    for subject in ["broken", "wrong"] {
        let d = limiter.check(subject).await.expect("check");
        assert_eq!(d.limit, 2, "{subject}: the policy's own rate");
    }
    // Downgraded to 5 per minute: the 10 used count, nothing more passes.
    plans.lock().expect("plans").insert("acme".into(), 5);
    tokio::time::sleep(Duration::from_millis(350)).await;
    let d = limiter.check("acme").await.expect("check");
    assert_eq!(d.limit, 5);
    assert!(
        !d.allowed,
        "the downgrade handed out a burst: {}",
        brief(&d)
    );
    // Upgraded to 20: the 10 used still count, 10 more pass.
    plans.lock().expect("plans").insert("acme".into(), 20);
    tokio::time::sleep(Duration::from_millis(350)).await;
    let d = limiter.peek("acme").await.expect("peek");
    assert_eq!((d.limit, d.remaining), (20, 10), "{}", brief(&d));
    assert!(matches!(
        limiter.check("").await,
        Err(RateLimitError::InvalidSubject(_))
    ));
}

/// A sliding log of 20: 12 entries at one instant, one refunded, then 9 more at that instant
/// fill it exactly. (Found by the model check: the Redis log numbered a new entry after how
/// many there were at its time; a refund takes the member that sorts last, "t:9" of "t:1" to
/// "t:12", so the next entry, numbered 12, overwrote one and was lost.)
async fn a_sliding_log_refilled_at_one_instant_counts_every_entry(fx: Fixture) {
    use distlock::ratelimit::__TestOp as Op;
    let limiter = fx
        .client
        .rate_limiter(policy(Algorithm::SlidingLog, 20, Duration::from_secs(60)))
        .build()
        .expect("valid limiter");
    let at = EPOCH_US;
    let (d, applied, _) = limiter
        .__operate_at("log", Op::Check(12), at)
        .await
        .expect("check");
    assert!(applied && d.remaining == 8, "{}", brief(&d));
    let (d, _, _) = limiter
        .__operate_at("log", Op::Refund(1), at)
        .await
        .expect("refund");
    assert_eq!(d.remaining, 9, "{}", brief(&d));
    for left in (0..=8).rev() {
        let (d, applied, _) = limiter
            .__operate_at("log", Op::Check(1), at)
            .await
            .expect("check");
        assert!(applied && d.remaining == left, "{}", brief(&d));
    }
    let (d, applied, _) = limiter
        .__operate_at("log", Op::Check(1), at)
        .await
        .expect("check");
    assert!(!applied && !d.allowed, "the log holds 20: {}", brief(&d));
}
