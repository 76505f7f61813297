//! `Client::rate_limiter_any`, the "any of" combination (issue 28 §4): a steady policy or a
//! separate burst budget lets a request through, and only the one that allowed it is charged,
//! in one round trip; on both stores and a Cluster. (The model check and the deny cache's
//! model check run it on random traces too.)

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use distlock::ratelimit::{__TestOp as Op, Decision, Lockout, Origin, Policy, Rate, RateLimiter};
use distlock::{Client, RateLimitError};

use crate::common::{EPOCH_US, brief};
use crate::support::cluster::RedisCluster;
use crate::support::fixture::{Fixture, on_both_stores};

on_both_stores!(
    the_steady_rate_then_the_burst_budget_then_a_denial,
    the_soonest_policy_answers_a_denial,
    a_lockout_breaches_only_when_every_policy_denies,
    refunds_penalties_and_partial_grants_are_refused,
    checks_from_two_clients_charge_exactly_one_policy_each,
    a_denial_is_cached_only_when_no_policy_allows,
);

/// Steady: one a second, two at once (GCRA). Burst: three an hour (GCRA, burst 3).
fn steady_and_burst() -> [Policy; 2] {
    [
        Policy::gcra(
            "steady",
            Rate::per_second(1).and_then(|r| r.burst(2)).expect("rate"),
        )
        .expect("policy"),
        Policy::gcra("burst", Rate::per_hour(3).expect("rate")).expect("policy"),
    ]
}

/// The names of the policies a decision charged.
fn charged(d: &Decision) -> Vec<&str> {
    d.policies
        .iter()
        .filter(|p| p.charged)
        .map(|p| &*p.policy)
        .collect()
}

/// Each policy's `remaining`.
fn left(d: &Decision) -> Vec<u64> {
    d.policies.iter().map(|p| p.remaining).collect()
}

/// At one injected instant: the steady rate takes two, the burst budget the next three, then
/// a denial charges neither; a second later the steady rate has one again and is charged
/// while the budget is spent.
async fn the_steady_rate_then_the_burst_budget_then_a_denial(fx: Fixture) {
    let limiter = fx
        .client
        .rate_limiter_any(steady_and_burst())
        .deny_cache(0)
        .build()
        .expect("valid limiter");
    let at = async |t: u64| {
        let (d, applied, _) = limiter
            .__operate_at("s", Op::Check(1), t)
            .await
            .expect("check");
        assert_eq!(applied, !charged(&d).is_empty(), "{}", brief(&d));
        d
    };
    for expected_left in [[1, 3], [0, 3]] {
        let d = at(EPOCH_US).await;
        assert!(d.allowed, "{}", brief(&d));
        assert_eq!(charged(&d), ["steady"], "{}", brief(&d));
        assert_eq!((&*d.policy, d.granted), ("steady", 1));
        assert_eq!(left(&d), expected_left, "{}", brief(&d));
    }
    // The steady rate is spent: the burst budget takes over, and the steady rate says when
    // it would have allowed.
    for expected_left in [2, 1, 0] {
        let d = at(EPOCH_US).await;
        assert!(d.allowed, "{}", brief(&d));
        assert_eq!(charged(&d), ["burst"], "{}", brief(&d));
        assert_eq!((&*d.policy, d.remaining), ("burst", expected_left));
        assert!(!d.policies[0].allowed);
        assert_eq!(d.policies[0].retry_after, Duration::from_secs(1));
    }
    // Both spent: denied, nothing charged, the sooner wait (the steady rate's) answers.
    let d = at(EPOCH_US + 500_000).await;
    assert!(!d.allowed && charged(&d).is_empty(), "{}", brief(&d));
    assert_eq!((&*d.policy, d.granted), ("steady", 0));
    assert_eq!(d.retry_after, Duration::from_millis(500));
    assert_eq!(left(&d), [0, 0]);
    // The burst budget is spent and the steady rate allows again: the steady rate is charged.
    let d = at(EPOCH_US + 1_000_000).await;
    assert!(d.allowed, "{}", brief(&d));
    assert_eq!(charged(&d), ["steady"], "{}", brief(&d));
    assert!(!d.policies[1].allowed);
    // A peek charges nothing, and says what the next request would get.
    let (peek, applied, _) = limiter
        .__operate_at("s", Op::Check(0), EPOCH_US + 2_000_000)
        .await
        .expect("peek");
    assert!(peek.allowed && !applied && charged(&peek).is_empty());
    // The steady rate was charged at 1 s (its debt then runs to 3 s): one left at 2 s.
    assert_eq!(left(&peek), [1, 0]);
    // Through the real clock too: a fresh subject is charged to the steady rate.
    let d = limiter.check("fresh").await.expect("check");
    assert_eq!(charged(&d), ["steady"], "{}", brief(&d));
}

/// When the burst budget would allow sooner than the steady rate, a denial's retry is the
/// budget's (the soonest, not the first policy's).
async fn the_soonest_policy_answers_a_denial(fx: Fixture) {
    let limiter = fx
        .client
        .rate_limiter_any([
            Policy::gcra("steady", Rate::per_hour(1).expect("rate")).expect("policy"),
            Policy::fixed_window("burst", Rate::per_second(1).expect("rate")).expect("policy"),
        ])
        .deny_cache(0)
        .build()
        .expect("valid limiter");
    // A whole second, so the fixed window starts at EPOCH_US.
    let t = EPOCH_US / 1_000_000 * 1_000_000;
    for name in ["steady", "burst"] {
        let d = limiter.__check_at("s", 1, t).await.expect("check");
        assert_eq!(charged(&d), [name], "{}", brief(&d));
    }
    let d = limiter
        .__check_at("s", 1, t + 250_000)
        .await
        .expect("check");
    assert!(!d.allowed && charged(&d).is_empty(), "{}", brief(&d));
    assert_eq!(&*d.policy, "burst", "{}", brief(&d));
    assert_eq!(d.retry_after, Duration::from_millis(750));
    assert!(d.policies[0].retry_after > Duration::from_secs(3000));
    // A cost one policy could never take is refused up front, as for all-or-nothing.
    assert!(matches!(
        limiter.check_n("s", 2).await,
        Err(RateLimitError::CostTooLarge { .. })
    ));
}

/// The steady rate has a lockout: while the burst budget lets requests through, nothing is
/// breached; the first request that both deny breaches it.
async fn a_lockout_breaches_only_when_every_policy_denies(fx: Fixture) {
    let lockout = Lockout::after_breach([Duration::from_secs(60)]);
    let [steady, burst] = steady_and_burst();
    let limiter = fx
        .client
        .rate_limiter_any([steady.with_lockout(lockout).expect("lockout"), burst])
        .deny_cache(0)
        .build()
        .expect("valid limiter");
    for _ in 0..5 {
        let d = limiter.__check_at("s", 1, EPOCH_US).await.expect("check");
        assert!(d.allowed && !d.locked_out, "{}", brief(&d));
        assert!(!d.policies[0].locked_out, "{}", brief(&d));
    }
    let d = limiter.__check_at("s", 1, EPOCH_US).await.expect("check");
    assert!(!d.allowed && d.locked_out, "{}", brief(&d));
    assert!(d.policies[0].locked_out, "{}", brief(&d));
    assert_eq!(d.policies[0].retry_after, Duration::from_secs(60));
    // The budget's wait (20 minutes for its next unit) is longer than the block: the block
    // answers.
    assert_eq!(
        (&*d.policy, d.retry_after),
        ("steady", Duration::from_secs(60))
    );
}

/// Refund, penalize and check_up_to would have to pick a policy: refused with a typed error,
/// nothing sent. A reset clears both; a refund through a limiter of the charged policy alone
/// (the same keys) gives back what an any-of check charged.
async fn refunds_penalties_and_partial_grants_are_refused(fx: Fixture) {
    // Neither refills within the test, however slow the machine.
    let policies = [
        Policy::gcra("steady", Rate::per_hour(2).expect("rate")).expect("policy"),
        Policy::gcra("burst", Rate::per_day(3).expect("rate")).expect("policy"),
    ];
    let limiter = fx
        .client
        .rate_limiter_any(policies.clone())
        .deny_cache(0)
        .build()
        .expect("valid limiter");
    for _ in 0..3 {
        limiter.check("s").await.expect("check");
    }
    let calls = limiter.__store_calls();
    assert!(matches!(
        limiter.refund("s", 1).await,
        Err(RateLimitError::NotForAnyOf {
            operation: "refund"
        })
    ));
    assert!(matches!(
        limiter.penalize("s", 1).await,
        Err(RateLimitError::NotForAnyOf {
            operation: "penalize"
        })
    ));
    assert!(matches!(
        limiter.check_up_to("s", 2).await,
        Err(RateLimitError::NotForAnyOf {
            operation: "check_up_to"
        })
    ));
    assert_eq!(limiter.__store_calls(), calls, "nothing was sent");
    // The third check was charged to the burst budget (2 of 3 left): give it back there.
    let burst = fx
        .client
        .rate_limiter(policies[1].clone())
        .build()
        .expect("valid limiter");
    assert_eq!(burst.refund("s", 1).await.expect("refund").remaining, 3);
    let d = limiter.peek("s").await.expect("peek");
    assert_eq!(d.policies[1].remaining, 3, "{}", brief(&d));
    let d = limiter.reset("s").await.expect("reset");
    assert_eq!(left(&d), [2, 3], "{}", brief(&d));
    // A reservation is a check: granted now, or refused, never queued.
    let r = limiter
        .reserve("s", 1, Duration::from_secs(60))
        .await
        .expect("reserve");
    assert!(r.decision().allowed);
    assert_eq!(charged(r.decision()), ["steady"]);
}

/// 40 tasks on two clients check one subject at once: exactly 10 pass on the steady rate and
/// 15 on the burst budget (neither refills within the test), each charged to one policy.
async fn checks_from_two_clients_charge_exactly_one_policy_each(fx: Fixture) {
    let policies = [
        Policy::gcra("steady", Rate::per_hour(10).expect("rate")).expect("policy"),
        Policy::gcra("burst", Rate::per_day(15).expect("rate")).expect("policy"),
    ];
    let other = fx.another_client().await;
    let limiters = [&fx.client, &other].map(|client| {
        client
            .rate_limiter_any(policies.clone())
            .build()
            .expect("valid limiter")
    });
    let counts = check_concurrently(&limiters, "shared", 40).await;
    assert_eq!(counts, [10, 15, 15]);
}

/// `tasks` tasks at once, alternating between `limiters`, each checking `subject` once: how
/// many were charged to the first policy, to the second, and denied.
async fn check_concurrently(limiters: &[RateLimiter], subject: &str, tasks: usize) -> [u64; 3] {
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let start = Arc::new(tokio::sync::Barrier::new(tasks));
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let limiter = limiters[i % limiters.len()].clone();
            let (counts, start, subject) = (counts.clone(), start.clone(), subject.to_owned());
            tokio::spawn(async move {
                start.wait().await;
                let d = limiter.check(&subject).await.expect("check");
                let charged: Vec<usize> = (0..d.policies.len())
                    .filter(|&i| d.policies[i].charged)
                    .collect();
                let slot = match charged.as_slice() {
                    [i] => {
                        assert!(d.allowed && d.granted == 1, "{}", brief(&d));
                        *i
                    }
                    [] => {
                        assert!(!d.allowed && d.granted == 0, "{}", brief(&d));
                        2
                    }
                    _ => panic!("several policies charged: {}", brief(&d)),
                };
                counts[slot].fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    for handle in handles {
        handle.await.expect("task");
    }
    [0, 1, 2].map(|i| counts[i].load(Ordering::SeqCst))
}

/// The deny cache must not answer while some policy would allow: the checks the burst budget
/// passes all reach the store, and only once both deny is the denial cached and served.
async fn a_denial_is_cached_only_when_no_policy_allows(fx: Fixture) {
    let limiter = fx
        .client
        .rate_limiter_any([
            Policy::gcra("steady", Rate::per_hour(1).expect("rate")).expect("policy"),
            Policy::gcra("burst", Rate::per_hour(3).expect("rate")).expect("policy"),
        ])
        // Long enough that a slow machine cannot age the denial out before it is served.
        .deny_cache_max_age(Duration::from_secs(600))
        .build()
        .expect("valid limiter");
    for (i, name) in ["steady", "burst", "burst", "burst"]
        .into_iter()
        .enumerate()
    {
        let d = limiter.check("s").await.expect("check");
        assert_eq!((d.origin, charged(&d)), (Origin::Store, vec![name]));
        if i < 3 {
            // The steady rate denies but the budget allows: a peek is allowed, not cached.
            let peek = limiter.peek("s").await.expect("peek");
            assert!(
                peek.allowed && !peek.policies[0].allowed,
                "{}",
                brief(&peek)
            );
            assert_eq!(peek.origin, Origin::Store);
            assert_eq!(limiter.__deny_cache_len(), 0, "{}", brief(&peek));
        }
    }
    let calls = limiter.__store_calls();
    let denied = limiter.check("s").await.expect("check");
    assert!(!denied.allowed && denied.origin == Origin::Store);
    assert_eq!(limiter.__deny_cache_len(), 1);
    let cached = limiter.check("s").await.expect("check");
    assert_eq!(cached.origin, Origin::DenyCache, "{}", brief(&cached));
    assert!(!cached.allowed && charged(&cached).is_empty());
    assert_eq!(&*cached.policy, &*denied.policy);
    assert!(cached.retry_after <= denied.retry_after);
    assert_eq!(limiter.__store_calls(), calls + 1, "the cache answered");
}

/// On a Cluster: subjects in different slots, 30 concurrent checks on two clients each,
/// split exactly between the steady rate and the burst budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_of_is_exact_on_a_cluster() {
    let cluster = RedisCluster::shared();
    let connect = async || {
        Client::builder()
            .prefix("anyof")
            .response_timeout(Duration::from_secs(5))
            .connect_cluster(cluster.seed_urls())
            .await
            .unwrap_or_else(|e| panic!("connect_cluster: {e}\n{}", cluster.logs()))
    };
    let clients = [connect().await, connect().await];
    let limiters = clients.each_ref().map(|client| {
        client
            .rate_limiter_any([
                Policy::sliding_log("steady", Rate::per_hour(8).expect("rate")).expect("policy"),
                Policy::gcra("burst", Rate::per_day(12).expect("rate")).expect("policy"),
            ])
            .build()
            .expect("valid limiter")
    });
    for subject in ["a", "user:{7}", "}{", "x:y:z"] {
        let counts = check_concurrently(&limiters, subject, 30).await;
        assert_eq!(counts, [8, 12, 10], "{subject}");
        let d = limiters[0].peek(subject).await.expect("peek");
        assert!(!d.allowed, "{subject}: {}", brief(&d));
        assert_eq!(left(&d), [0, 0], "{subject}: {}", brief(&d));
    }
}
