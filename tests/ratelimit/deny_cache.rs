//! The deny cache answers what the store would, for every cost, in real time on both stores:
//! each answer of a cached limiter is compared with the same check on a limiter without a
//! cache (same client and policies, so the same keys), made right after it. A denied check
//! consumes nothing, so the second check sees the state the first one did.
//!
//! The exhaustive comparison (every algorithm, every field, mixed costs, several policies,
//! to the microsecond) is `cached_model_check.rs`, on the in-memory store in paused time;
//! here the two ways the cache once went wrong are pinned down on Redis too.

use std::time::Duration;

use distlock::ratelimit::{Algorithm, Decision, Origin, Policy, RateLimiter};

use crate::common::{ALGORITHMS, brief, here_and_elsewhere, policy};
use crate::support::fixture::{Fixture, on_both_stores};

on_both_stores!(
    a_larger_cost_waits_its_own_time,
    a_smaller_allowed_cost_refreshes_the_figures,
    several_policies_report_each_policy_exactly,
    a_reset_through_another_replica_is_seen_within_the_max_age,
);

/// Five per hour: one every 12 minutes for GCRA and the token bucket, and no window
/// boundary in the few milliseconds a test takes (but for bad luck once an hour).
const HOUR: Duration = Duration::from_secs(3600);

/// Real time between a check and the uncached check it is compared with, plus a round trip
/// (the cache counts from when its check was sent, the store from when it decided).
const SLACK: Duration = Duration::from_millis(250);

/// Two limiters of `p` on the fixture's client: one with the deny cache (the default), one
/// without (`deny_cache(0)`), whose answers are the reference.
fn cached_and_uncached(fx: &Fixture, p: Policy) -> (RateLimiter, RateLimiter) {
    let cached = fx
        .client
        .rate_limiter(p.clone())
        .build()
        .expect("valid limiter");
    let uncached = fx
        .client
        .rate_limiter(p)
        .deny_cache(0)
        .build()
        .expect("valid limiter");
    (cached, uncached)
}

/// Checks `cost` on both limiters and asserts the cached answer is the store's, figure by
/// figure and policy by policy. Returns the cached answer.
async fn compare(
    cached: &RateLimiter,
    uncached: &RateLimiter,
    subject: &str,
    cost: u32,
    what: &str,
) -> Decision {
    let got = cached.check_n(subject, cost).await.expect("cached check");
    let want = uncached
        .check_n(subject, cost)
        .await
        .expect("uncached check");
    assert!(
        !want.allowed || got.allowed,
        "{what}: the store would allow cost {cost} ({}), the cache denied it ({})",
        brief(&want),
        brief(&got)
    );
    assert_eq!(got.policies.len(), want.policies.len());
    for (g, w) in got.policies.iter().zip(&want.policies) {
        let context = || {
            format!(
                "{what}, cost {cost}, policy {}: cached {g:?} ({:?}), store {w:?}",
                w.policy, got.origin
            )
        };
        assert_eq!(g.allowed, w.allowed, "{}", context());
        assert_eq!(g.remaining, w.remaining, "{}", context());
        assert!(
            g.retry_after + SLACK >= w.retry_after,
            "{}: told to retry too early",
            context()
        );
        assert!(
            g.retry_after.abs_diff(w.retry_after) <= SLACK,
            "{}",
            context()
        );
        assert!(
            g.reset_after.abs_diff(w.reset_after) <= SLACK,
            "{}",
            context()
        );
    }
    assert_eq!(got.allowed, want.allowed, "{what}");
    assert_eq!(&*got.policy, &*want.policy, "{what}: binding policy");
    got
}

/// A denial cached for cost 1 must not answer cost 3 with cost 1's wait: GCRA and the token
/// bucket earn one unit per interval, so cost 3 waits two intervals (24 minutes) longer.
async fn a_larger_cost_waits_its_own_time(fx: Fixture) {
    for algorithm in [Algorithm::Gcra, Algorithm::TokenBucket] {
        let (cached, uncached) = cached_and_uncached(&fx, policy(algorithm, 5, HOUR));
        let what = format!("{algorithm} on {}", store_name(&fx));
        assert!(cached.check_n("larger", 5).await.expect("check").allowed);
        let first = compare(&cached, &uncached, "larger", 1, &what).await;
        assert_eq!(first.origin, Origin::Store, "{what}: the first denial");
        let hit = compare(&cached, &uncached, "larger", 3, &what).await;
        assert_eq!(
            hit.origin,
            Origin::DenyCache,
            "{what}: exact, so served locally"
        );
        // And back down: a smaller cost than the one cached gets its own, shorter wait.
        compare(&cached, &uncached, "larger", 2, &what).await;
        compare(&cached, &uncached, "larger", 0, &what).await;
    }
}

/// A denial cached for cost 3 must not survive a cost-2 request the store then allows:
/// later answers report what is left after it, on every algorithm.
async fn a_smaller_allowed_cost_refreshes_the_figures(fx: Fixture) {
    for algorithm in ALGORITHMS {
        let (cached, uncached) = cached_and_uncached(&fx, policy(algorithm, 5, HOUR));
        let what = format!("{algorithm} on {}", store_name(&fx));
        assert!(cached.check_n("smaller", 3).await.expect("check").allowed);
        let denied = compare(&cached, &uncached, "smaller", 3, &what).await;
        assert!(
            !denied.allowed && denied.remaining == 2,
            "{what}: {}",
            brief(&denied)
        );
        let allowed = cached.check_n("smaller", 2).await.expect("check");
        assert!(allowed.allowed, "{what}: cost 2 fits: {}", brief(&allowed));
        assert_eq!(allowed.origin, Origin::Store, "{what}");
        for cost in [3, 3, 1, 0, 5] {
            let d = compare(&cached, &uncached, "smaller", cost, &what).await;
            assert!(!d.allowed && d.remaining == 0, "{what}: {}", brief(&d));
        }
    }
}

/// Two policies; only the first denies. A hit reports every policy's figures, and each
/// must be the store's, for the cost asked.
async fn several_policies_report_each_policy_exactly(fx: Fixture) {
    let policies = [
        policy(Algorithm::Gcra, 5, HOUR),
        Policy::new(
            "hourly-log",
            Algorithm::SlidingLog,
            distlock::ratelimit::Rate::per(20, HOUR).expect("valid"),
        )
        .expect("valid"),
    ];
    let cached = fx
        .client
        .rate_limiter_all(policies.clone())
        .build()
        .expect("valid");
    let uncached = fx
        .client
        .rate_limiter_all(policies)
        .deny_cache(0)
        .build()
        .expect("valid");
    let what = format!("gcra and sliding log on {}", store_name(&fx));
    assert!(cached.check_n("several", 5).await.expect("check").allowed);
    for cost in [1, 3, 1, 0, 5, 2] {
        let d = compare(&cached, &uncached, "several", cost, &what).await;
        assert!(!d.allowed, "{what}: {}", brief(&d));
        assert!(d.policies[1].allowed, "{what}: the log alone would allow");
    }
}

fn store_name(fx: &Fixture) -> &'static str {
    if fx.server.is_some() {
        "redis"
    } else {
        "memory"
    }
}

/// Issue 28 §1: a reset made through another replica (its own client and limiter, so its own
/// deny cache) reaches this replica's cache within `deny_cache_max_age`, although the cached
/// denial would otherwise answer for its whole `retry_after` (minutes here).
async fn a_reset_through_another_replica_is_seen_within_the_max_age(fx: Fixture) {
    const MAX_AGE: Duration = Duration::from_millis(300);
    let policy = "login: 1 per 10min".parse::<Policy>().expect("policy");
    let (here, elsewhere) = here_and_elsewhere(&fx, policy, MAX_AGE).await;
    assert!(here.check("alice").await.expect("check").allowed);
    let denied = here.check("alice").await.expect("check");
    assert!(
        !denied.allowed && denied.origin == Origin::Store,
        "{}",
        brief(&denied)
    );
    let cached = here.check("alice").await.expect("check");
    assert!(
        !cached.allowed && cached.origin == Origin::DenyCache,
        "the denial is cached: {}",
        brief(&cached)
    );
    assert!(cached.retry_after > Duration::from_secs(60));

    elsewhere.reset("alice").await.expect("reset");
    // The entry was made before the reset; once MAX_AGE has passed since, it answers no more
    // (whatever the machine's load: a sleep is never shorter than asked).
    tokio::time::sleep(MAX_AGE).await;
    let after = here.check("alice").await.expect("check");
    assert!(
        after.allowed && after.origin == Origin::Store,
        "the reset is seen here: {}",
        brief(&after)
    );
}
