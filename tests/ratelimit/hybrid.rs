//! The hybrid limiter (issue 28 §7): a replica leases a share of a subject's budget and
//! answers from it locally until it runs out or the sync interval passes, then gives back
//! what it did not use. On both stores, a Cluster, and across two OS processes, where the
//! overshoot is measured against its documented bound, `share × replicas`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock::ratelimit::{MAX_PERIOD, Origin, Outage, Policy, Rate, RateLimiter, SubjectRates};
use distlock::{InvalidPolicy, RateLimitError};

use crate::common::{allowed_of, brief};
use crate::support::RedisServer;
use crate::support::child::{self, ChildProcess};
use crate::support::fixture::{Fixture, connect, on_both_stores, shared_cluster_client};

on_both_stores!(
    checks_are_answered_from_the_share,
    concurrent_checks_spend_the_limit_exactly,
    unused_units_go_back_when_asked,
    a_stale_share_goes_back_at_the_next_check,
    reset_drops_the_replicas_share,
    a_caller_that_gives_up_mid_lease_loses_no_share,
    a_subjects_own_lower_rate_caps_its_lease,
    bad_settings_are_typed_errors_at_build,
    a_client_shutdown_gives_shares_back_and_leases_no_more,
);

const HOUR: Duration = Duration::from_secs(3600);

/// `limit` at once, then one more every 366 days / `limit`: nothing refills during a test (a
/// window aligned to the clock could turn over mid-test).
fn spent_once(name: &str, limit: u32) -> Policy {
    let rate = Rate::per(limit, MAX_PERIOD)
        .and_then(|r| r.burst(limit))
        .expect("rate");
    Policy::gcra(name, rate).expect("policy")
}

fn hybrid(fx: &Fixture, policy: Policy, share: u32, sync: Duration) -> RateLimiter {
    fx.client
        .rate_limiter(policy)
        .hybrid(share, sync)
        .build()
        .expect("hybrid limiter")
}

/// An exact limiter of `policy` beside the hybrid ones: every check asks the store.
fn exact(fx: &Fixture, policy: Policy) -> RateLimiter {
    fx.client
        .rate_limiter(policy)
        .deny_cache(0)
        .build()
        .expect("limiter")
}

/// One check of `s` on `limiter`: allowed, and answered by `origin`.
async fn allowed_by(limiter: &RateLimiter, origin: Origin, what: &str) {
    let d = limiter.check("s").await.expect("check");
    assert_eq!(
        (d.allowed, d.origin),
        (true, origin),
        "{what}: {}",
        brief(&d)
    );
}

/// 100 an hour, shares of 10: the 100 checks make 10 round trips (one per share) and 90 are
/// answered locally; the figures count the share's units; the 101st is denied by the store.
async fn checks_are_answered_from_the_share(fx: Fixture) {
    let limiter = hybrid(&fx, spent_once("h", 100), 10, HOUR);
    let first = limiter.check("s").await.expect("check");
    assert!(first.allowed, "{}", brief(&first));
    assert_eq!(
        (first.origin, first.granted, first.remaining),
        (Origin::Store, 1, 99),
        "{}",
        brief(&first)
    );
    let second = limiter.check("s").await.expect("check");
    assert_eq!(
        (
            second.allowed,
            second.origin,
            second.granted,
            second.remaining
        ),
        (true, Origin::LocalShare, 1, 98),
        "{}",
        brief(&second)
    );
    let mut local = 1;
    for i in 2..100 {
        let d = limiter.check("s").await.expect("check");
        assert!(d.allowed, "check {i}: {}", brief(&d));
        if d.origin == Origin::LocalShare {
            local += 1;
        }
    }
    assert_eq!(local, 90, "every tenth check leases, the others are local");
    assert_eq!(limiter.__store_calls(), 10, "one round trip per share");
    let denied = limiter.check("s").await.expect("check");
    assert!(!denied.allowed, "{}", brief(&denied));
    assert_eq!(denied.granted, 0);
    assert!(denied.retry_after > Duration::ZERO, "{}", brief(&denied));
    // A peek is exact, never local.
    let peek = limiter.peek("s").await.expect("peek");
    assert_ne!(peek.origin, Origin::LocalShare);
    // Another subject has its own share.
    let other = limiter.check("t").await.expect("check");
    assert_eq!((other.allowed, other.origin), (true, Origin::Store));
}

/// 8 tasks on one replica, 1000 an hour, shares of 50: exactly 1000 pass (nothing refills
/// within the test, and a replica only denies once its share and the store are both empty),
/// in far fewer round trips than checks: the tasks that find the share empty wait for one
/// lease instead of each taking their own.
async fn concurrent_checks_spend_the_limit_exactly(fx: Fixture) {
    let limiter = hybrid(&fx, spent_once("h", 1000), 50, HOUR);
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move { allowed_of(&limiter, "s", 200).await })
        })
        .collect();
    let mut passed = 0;
    for task in tasks {
        passed += task.await.expect("task");
    }
    assert_eq!(passed, 1000, "of 1600 attempts");
    let calls = limiter.__store_calls();
    assert!(
        (20..=40).contains(&calls),
        "20 leases of 50, plus the denials' few round trips (the deny cache answers the rest): {calls}"
    );
}

/// Issue 44: `Client::shutdown` gives back what the client's hybrid limiters hold in
/// shares, and from then on they lease no new share: their checks are exact.
async fn a_client_shutdown_gives_shares_back_and_leases_no_more(fx: Fixture) {
    let policy = spent_once("h", 10);
    let a = hybrid(&fx, policy, 5, HOUR);
    assert!(a.check("s").await.expect("check").allowed);
    let report = fx.client.shutdown(Duration::from_secs(10)).await;
    assert_eq!(report.shares_returned, 4, "{report:?}");
    assert!(report.share_errors.is_empty(), "{report:?}");
    for _ in 0..3 {
        allowed_by(&a, Origin::Store, "exact after the shutdown").await;
    }
    assert_eq!(
        a.return_shares().await.expect("return"),
        0,
        "no share leased"
    );
    assert!(fx.client.shutdown(Duration::from_secs(10)).await.is_empty());
}

/// Two replicas lease 5 each of 10 and use 1 each: an exact limiter then has nothing. When
/// the first gives its share back, its 4 unused units are the exact limiter's.
async fn unused_units_go_back_when_asked(fx: Fixture) {
    let policy = spent_once("h", 10);
    let a = hybrid(&fx, policy.clone(), 5, HOUR);
    let b = hybrid(&fx, policy.clone(), 5, HOUR);
    let exact = exact(&fx, policy);
    assert!(a.check("s").await.expect("check").allowed);
    assert!(b.check("s").await.expect("check").allowed);
    let d = exact.check("s").await.expect("check");
    assert!(!d.allowed, "the replicas hold the rest: {}", brief(&d));
    assert_eq!(a.return_shares().await.expect("return"), 4);
    assert_eq!(a.return_shares().await.expect("return"), 0, "nothing twice");
    assert_eq!(allowed_of(&exact, "s", 6).await, 4);
    // B still answers from its own share.
    allowed_by(&b, Origin::LocalShare, "B").await;
    // An exact limiter has no shares to give back.
    assert_eq!(exact.return_shares().await.expect("return"), 0);
}

/// A share older than the sync interval is not used: the next check gives its units back
/// and leases again.
async fn a_stale_share_goes_back_at_the_next_check(fx: Fixture) {
    let policy = spent_once("h", 10);
    let sync = Duration::from_millis(100);
    let a = hybrid(&fx, policy.clone(), 5, sync);
    let exact = exact(&fx, policy);
    assert_eq!(a.check("s").await.expect("check").origin, Origin::Store); // leases 5, holds 4
    tokio::time::sleep(sync * 2).await;
    // Stale: not answered locally; 4 go back and a new share of 5 is leased.
    allowed_by(&a, Origin::Store, "stale").await;
    // 10 − 5 + 4 − 5 = 4 left for others, once the give-back (in the background) has landed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let peek = exact.peek("s").await.expect("peek");
        if peek.remaining == 4 {
            break;
        }
        assert!(
            peek.remaining < 4 && tokio::time::Instant::now() < deadline,
            "the stale units came back: {}",
            brief(&peek)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A reset drops this replica's share: the next check leases from the fresh state.
async fn reset_drops_the_replicas_share(fx: Fixture) {
    let a = hybrid(&fx, spent_once("h", 10), 5, HOUR);
    assert!(a.check("s").await.expect("check").allowed);
    assert_eq!(
        a.check("s").await.expect("check").origin,
        Origin::LocalShare
    );
    a.reset("s").await.expect("reset");
    let d = a.check("s").await.expect("check");
    assert_eq!((d.origin, d.remaining), (Origin::Store, 9), "{}", brief(&d));
}

/// A check dropped while its lease is in flight (a timeout, a closed connection) costs its
/// own unit at most: the lease lands in the share for the next checks.
async fn a_caller_that_gives_up_mid_lease_loses_no_share(fx: Fixture) {
    let a = hybrid(&fx, spent_once("h", 10), 10, HOUR);
    let first = tokio::time::timeout(Duration::ZERO, a.check("s")).await;
    let mut passed = u32::from(matches!(first, Ok(Ok(ref d)) if d.allowed));
    // The lease may still be on its way: wait for it, as the next checks would.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let d = a.check("s").await.expect("check");
        if !d.allowed {
            break;
        }
        passed += 1;
        assert!(tokio::time::Instant::now() < deadline, "never denied");
    }
    assert!(
        passed >= 9,
        "the dropped check's lease served the others: {passed} of 10 passed"
    );
}

/// A subject whose own rate is below the share: a cost above its limit is refused without a
/// lease (as an exact limiter refuses it), and its leases are capped at its limit, so it gets
/// exactly its own 5.
async fn a_subjects_own_lower_rate_caps_its_lease(fx: Fixture) {
    let limiter = fx
        .client
        .rate_limiter(spent_once("plan", 100))
        .rates_by_subject(|tenant: String| async move {
            let rates = match tenant.as_str() {
                "free" => SubjectRates::new().rate(
                    "plan",
                    Rate::per(5, MAX_PERIOD)
                        .and_then(|r| r.burst(5))
                        .expect("rate"),
                ),
                _ => SubjectRates::new(),
            };
            Ok::<_, InvalidPolicy>(rates)
        })
        .hybrid(50, HOUR)
        .build()
        .expect("limiter");
    assert!(matches!(
        limiter.check_n("free", 10).await,
        Err(RateLimitError::CostTooLarge { capacity: 5, .. })
    ));
    assert_eq!(limiter.__store_calls(), 0, "refused before any lease");
    assert_eq!(allowed_of(&limiter, "free", 8).await, 5);
    let other = limiter.check("paid").await.expect("check");
    assert_eq!(
        (other.allowed, other.remaining),
        (true, 99),
        "{}",
        brief(&other)
    );
}

/// A share of 0 or above the least limit, a sync of zero or beyond the longest period, and
/// shadow mode are refused when the limiter is built.
async fn bad_settings_are_typed_errors_at_build(fx: Fixture) {
    let build = |share: u32, sync: Duration, shadow: bool| {
        fx.client
            .rate_limiter_all([spent_once("a", 100), spent_once("b", 20)])
            .shadow(shadow)
            .hybrid(share, sync)
            .build()
    };
    let second = Duration::from_secs(1);
    for share in [0, 21, u32::MAX] {
        assert!(
            matches!(
                build(share, second, false),
                Err(RateLimitError::InvalidPolicy(InvalidPolicy::HybridShare {
                    limit: 20,
                    ..
                }))
            ),
            "share {share}"
        );
    }
    for sync in [Duration::ZERO, MAX_PERIOD + Duration::from_nanos(1)] {
        assert!(
            matches!(
                build(20, sync, false),
                Err(RateLimitError::InvalidPolicy(
                    InvalidPolicy::HybridSync { .. }
                ))
            ),
            "sync {sync:?}"
        );
    }
    assert!(matches!(
        build(5, second, true),
        Err(RateLimitError::InvalidPolicy(
            InvalidPolicy::HybridInShadowMode
        ))
    ));
    let any_of = fx
        .client
        .rate_limiter_any([spent_once("a", 100), spent_once("b", 20)])
        .hybrid(5, second)
        .build();
    assert!(matches!(
        any_of,
        Err(RateLimitError::InvalidPolicy(InvalidPolicy::HybridAnyOf))
    ));
    assert!(build(20, MAX_PERIOD, false).is_ok());
    assert!(build(1, second, false).is_ok());
}

/// With the store killed, the outage policy answers the leases: the local fallback's units
/// are answered locally as the fallback's (the same passes as an exact limiter's fallback)
/// and are never given back to the store; failing open passes every check and keeps no
/// share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outages_answer_the_leases() {
    let mut server = RedisServer::start();
    let client = connect(&server.url()).await;
    let build = |outage: Outage| {
        client
            .rate_limiter(
                Policy::gcra(
                    "outage",
                    Rate::per(3, Duration::from_secs(10)).expect("rate"),
                )
                .expect("policy"),
            )
            .on_outage(outage)
            .deadline(Duration::from_millis(200))
            .hybrid(2, HOUR)
            .build()
            .expect("limiter")
    };
    let fallback = build(Outage::LocalFallback);
    let open = build(Outage::FailOpen);
    assert_eq!(
        fallback.check("warm").await.expect("check").origin,
        Origin::Store
    );
    server.kill();
    let mut seen = Vec::new();
    for _ in 0..5 {
        let d = fallback.check("s").await.expect("the fallback never errs");
        assert_eq!(d.origin, Origin::LocalFallback, "{}", brief(&d));
        seen.push(d.allowed);
    }
    assert_eq!(seen, [true, true, true, false, false]);
    for _ in 0..5 {
        allowed_by(&open, Origin::FailOpen, "fail open").await;
    }
    // Only the store's units go back: "warm" holds one (a round trip, which fails now), the
    // fallback's and the failed-open checks none.
    assert!(fallback.return_shares().await.is_err(), "the store is away");
    assert_eq!(open.return_shares().await.expect("nothing to give back"), 0);
}

/// On a Cluster, three subjects spread over the slots: each gets exactly its limit, mostly
/// from its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_shares_are_exact_at_exhaustion_on_a_cluster() {
    let client = shared_cluster_client("hybrid").await;
    let limiter = client
        .rate_limiter(spent_once(&format!("hybrid-{}", std::process::id()), 25))
        .hybrid(10, HOUR)
        .build()
        .expect("limiter");
    for subject in ["alpha", "bravo", "charlie"] {
        let (mut passed, mut local) = (0, 0);
        for _ in 0..30 {
            let d = limiter.check(subject).await.expect("check");
            if d.allowed {
                passed += 1;
            }
            if d.origin == Origin::LocalShare {
                local += 1;
            }
        }
        assert_eq!(passed, 25, "{subject}");
        assert_eq!(local, 22, "{subject}: leases of 10, 10 and 5");
    }
}

// Two processes against one Redis, each with two tasks checking as fast as they can for a
// while, under 200/s with a burst of 20, shares of 10 synced every second. GCRA lets at most
// burst + rate × W pass in any window of length W; the hybrid mode may add share × replicas.
const ENTRY: &str = "hybrid::child_entry";
const PROCESSES: u64 = 2;
const SHARE: u32 = 10;
const RATE: u32 = 200;
const BURST: u32 = 20;
const RUN: Duration = Duration::from_millis(1500);
/// The windows the passes are counted in.
const WINDOW: Duration = Duration::from_millis(250);

fn fast_policy() -> Policy {
    Policy::gcra(
        "hybrid-fast",
        Rate::per_second(RATE)
            .and_then(|r| r.burst(BURST))
            .expect("rate"),
    )
    .expect("policy")
}

fn unix_us() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    u64::try_from(since.as_micros()).expect("µs fit")
}

/// What a child runs: every pass as `<µs before the check>-<µs after it>`, and how many were
/// answered locally.
async fn hammer(url: &str) -> (Vec<(u64, u64)>, u64) {
    let limiter = connect(url)
        .await
        .rate_limiter(fast_policy())
        .hybrid(SHARE, Duration::from_secs(1))
        .build()
        .expect("limiter");
    let until = tokio::time::Instant::now() + RUN;
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let (mut passes, mut local) = (Vec::new(), 0);
                while tokio::time::Instant::now() < until {
                    let before = unix_us();
                    let d = limiter.check("tenant").await.expect("check");
                    if d.allowed {
                        passes.push((before, unix_us()));
                    }
                    if d.origin == Origin::LocalShare {
                        local += 1;
                    }
                }
                (passes, local)
            })
        })
        .collect();
    let (mut passes, mut local) = (Vec::new(), 0);
    for task in tasks {
        let (p, l) = task.await.expect("task");
        passes.extend(p);
        local += l;
    }
    (passes, local)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as a child process of `overshoot_across_two_processes_is_within_share_times_replicas`"]
async fn child_entry() {
    let Some((role, url)) = child::role() else {
        return;
    };
    assert_eq!(role, "hammer", "unknown role");
    let (passes, local) = hammer(&url).await;
    let passes: Vec<String> = passes.iter().map(|(a, b)| format!("{a}-{b}")).collect();
    child::say(&format!("DONE {local} {}", passes.join(" ")));
}

/// The most passes certainly inside one window of length `window`: a pass counts in
/// `[t, t + window]` only if its whole check (from before it was sent to after it was
/// answered) lies inside, so a slow or starved check never makes a window look fuller than
/// it was.
fn fullest_window(passes: &[(u64, u64)], window: u64) -> usize {
    passes
        .iter()
        .map(|&(t, _)| {
            passes
                .iter()
                .filter(|&&(a, b)| a >= t && b <= t + window)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overshoot_across_two_processes_is_within_share_times_replicas() {
    let server = RedisServer::start();
    let children: Vec<ChildProcess> = (0..PROCESSES)
        .map(|_| ChildProcess::spawn(ENTRY, "hammer", &server.url()))
        .collect();
    let (mut passes, mut local) = (Vec::new(), 0);
    for child in &children {
        let line = child.expect_line("DONE", Duration::from_secs(120));
        let mut fields = line["DONE ".len()..].split(' ');
        local += fields
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .expect("a count of local answers");
        for pass in fields.filter(|f| !f.is_empty()) {
            let (a, b) = pass.split_once('-').expect("a pass as start-end");
            passes.push((a.parse::<u64>().expect("µs"), b.parse::<u64>().expect("µs")));
        }
    }
    for child in children {
        child.wait_success(Duration::from_secs(10));
    }
    let window_us = u64::try_from(WINDOW.as_micros()).expect("µs");
    let fullest = fullest_window(&passes, window_us) as u64;
    // GCRA in any window of length W: the burst, plus one per interval, plus one for the
    // window's edge.
    let exact_bound = u64::from(BURST) + u64::from(RATE) * window_us / 1_000_000 + 1;
    let bound = exact_bound + u64::from(SHARE) * PROCESSES;
    eprintln!(
        "hybrid across {PROCESSES} processes: {} passed ({local} locally); fullest {WINDOW:?} \
         window {fullest}; exact bound {exact_bound}, hybrid bound {bound}",
        passes.len()
    );
    assert!(
        fullest <= bound,
        "{fullest} passes in one {WINDOW:?} window, more than burst + rate × window + \
         share × replicas = {bound}\n{}",
        server.log()
    );
    // The burst's first lease is a whole share, answered locally but for the check that
    // leased it. (At the steady rate, leases hold what accrued since the last one: one or
    // two units, so most checks then go to the store; that is the mode's design.)
    assert!(
        local >= u64::from(SHARE - 1),
        "at least one whole share was answered locally: {local} of {}",
        passes.len()
    );
}
