//! What a check answers, on both stores: the `CL.THROTTLE` fields, peek, cost, several
//! policies all-or-nothing, the deny cache, shadow mode, ttls, and invalid input.

use std::time::Duration;

use distlock::ratelimit::{Algorithm, Origin, Policy, Rate};
use distlock::{InvalidName, InvalidPolicy, RateLimitError};

use crate::common::{ALGORITHMS, EPOCH_US, brief, policy};
use crate::support::fixture::{Fixture, on_both_stores};
use crate::traces::Capture;

on_both_stores!(
    gcra_answers_like_cl_throttle,
    peek_consumes_nothing,
    cost_weighs_and_an_impossible_cost_is_refused,
    several_policies_are_all_or_nothing,
    deny_cache_answers_without_a_round_trip,
    deny_cache_stays_bounded,
    shadow_mode_reports_and_never_denies,
    keys_expire_once_their_state_stops_mattering,
    invalid_subjects_are_refused,
    subjects_that_look_alike_are_different,
);

const MS: u64 = 1000;
const S: u64 = 1_000_000;

/// The sequence of redis-cell's own `CL.THROTTLE` example (burst 5, 1 per second), at
/// injected times: every field must be what `CL.THROTTLE` answers.
async fn gcra_answers_like_cl_throttle(fx: Fixture) {
    let rate = Rate::per_second(1).and_then(|r| r.burst(5)).expect("valid");
    let limiter = fx
        .client
        .rate_limiter(Policy::gcra("cell", rate).expect("valid"))
        .build()
        .expect("valid limiter");
    // (offset µs, cost, allowed, remaining, reset µs, retry µs)
    let cases: [(u64, u32, bool, u64, u64, u64); 14] = [
        (0, 1, true, 4, S, 0),
        (0, 1, true, 3, 2 * S, 0),
        (0, 1, true, 2, 3 * S, 0),
        (0, 1, true, 1, 4 * S, 0),
        (0, 1, true, 0, 5 * S, 0),
        (0, 1, false, 0, 5 * S, S),
        (3000 * MS, 1, true, 2, 3 * S, 0),
        (3100 * MS, 1, true, 1, 3900 * MS, 0),
        (4000 * MS, 1, true, 1, 4 * S, 0),
        (8000 * MS, 1, true, 4, S, 0),
        (9500 * MS, 1, true, 4, S, 0),
        (9500 * MS, 0, true, 4, S, 0),
        (9500 * MS, 2, true, 2, 3 * S, 0),
        (9500 * MS, 5, false, 2, 3 * S, 3 * S),
    ];
    for (i, (offset, cost, allowed, remaining, reset, retry)) in cases.into_iter().enumerate() {
        let d = limiter
            .__check_at("cell", cost, EPOCH_US + offset)
            .await
            .expect("check");
        let got = (
            d.allowed,
            d.limit,
            d.remaining,
            d.reset_after,
            d.retry_after,
        );
        let want = (
            allowed,
            5,
            remaining,
            Duration::from_micros(reset),
            Duration::from_micros(retry),
        );
        assert_eq!(got, want, "case {i}");
    }
}

/// A peek answers for a cost of 1 and changes nothing, on every algorithm.
async fn peek_consumes_nothing(fx: Fixture) {
    for algorithm in ALGORITHMS {
        let limiter = fx
            .client
            .rate_limiter(policy(algorithm, 3, Duration::from_secs(10)))
            .build()
            .expect("valid limiter");
        let at = EPOCH_US;
        for _ in 0..5 {
            let d = limiter.__check_at("peek", 0, at).await.expect("peek");
            assert!(d.allowed && d.remaining == 3, "{algorithm}: {}", brief(&d));
        }
        for _ in 0..3 {
            assert!(
                limiter
                    .__check_at("peek", 1, at)
                    .await
                    .expect("check")
                    .allowed
            );
        }
        let d = limiter.__check_at("peek", 0, at).await.expect("peek");
        assert!(
            !d.allowed,
            "{algorithm}: a peek says the next one would be denied"
        );
        assert!(d.retry_after > Duration::ZERO, "{algorithm}");
        // In real time (the memory store expires injected-time state on its own timeline).
        let inspect = fx.client.__inspect();
        let made = limiter.__keys("made").expect("keys");
        let fresh = limiter.__keys("untouched").expect("keys");
        limiter.check("made").await.expect("check");
        limiter.peek("untouched").await.expect("peek");
        assert!(inspect.pttl(&made[0]).await.expect("pttl").is_some());
        assert!(
            inspect.pttl(&fresh[0]).await.expect("pttl").is_none(),
            "{algorithm}: a peek created a key"
        );
    }
}

async fn cost_weighs_and_an_impossible_cost_is_refused(fx: Fixture) {
    for algorithm in ALGORITHMS {
        let limiter = fx
            .client
            .rate_limiter(policy(algorithm, 10, Duration::from_secs(10)))
            .build()
            .expect("valid limiter");
        let d = limiter
            .__check_at("cost", 7, EPOCH_US)
            .await
            .expect("check");
        assert!(d.allowed && d.remaining == 3, "{algorithm}: {}", brief(&d));
        let d = limiter
            .__check_at("cost", 4, EPOCH_US)
            .await
            .expect("check");
        assert!(!d.allowed && d.remaining == 3, "{algorithm}: {}", brief(&d));
        let d = limiter
            .__check_at("cost", 3, EPOCH_US)
            .await
            .expect("check");
        assert!(d.allowed && d.remaining == 0, "{algorithm}: {}", brief(&d));

        let calls = limiter.__store_calls();
        match limiter.check_n("cost", 11).await {
            Err(RateLimitError::CostTooLarge {
                cost: 11,
                capacity: 10,
                ..
            }) => {}
            other => panic!("{algorithm}: expected CostTooLarge, got {other:?}"),
        }
        assert_eq!(limiter.__store_calls(), calls, "no round trip for it");
    }
}

/// 10 per second (burst 10) and 15 per hour on one subject: when either denies, neither
/// consumes.
async fn several_policies_are_all_or_nothing(fx: Fixture) {
    let limiter = fx
        .client
        .rate_limiter_all([
            Policy::gcra("per-second", Rate::per_second(10).expect("valid")).expect("valid"),
            Policy::fixed_window("per-hour", Rate::per_hour(15).expect("valid")).expect("valid"),
        ])
        .build()
        .expect("valid");
    // Start of an hour window, so the fixed window does not roll over during the test.
    let t0 = EPOCH_US / 3_600_000_000 * 3_600_000_000 + 3_600_000_000;
    for i in 0..10 {
        let d = limiter.__check_at("both", 1, t0).await.expect("check");
        assert!(d.allowed, "request {i}: {}", brief(&d));
    }
    // The per-second policy denies: the hourly count must stay at 10.
    let d = limiter.__check_at("both", 1, t0).await.expect("check");
    assert!(!d.allowed);
    assert_eq!(&*d.policy, "per-second");
    assert!(d.policies[1].allowed, "per-hour alone would allow");
    assert_eq!(d.policies[1].remaining, 5, "and was not consumed");
    // One second later both allow, five times; then the hourly one denies and the
    // per-second one must not be consumed.
    let t1 = t0 + S;
    for _ in 0..5 {
        assert!(
            limiter
                .__check_at("both", 1, t1)
                .await
                .expect("check")
                .allowed
        );
    }
    let before = limiter.__check_at("both", 0, t1).await.expect("peek");
    let d = limiter.__check_at("both", 1, t1).await.expect("check");
    assert!(!d.allowed);
    assert_eq!(&*d.policy, "per-hour");
    assert!(d.policies[0].allowed, "per-second alone would allow");
    let after = limiter.__check_at("both", 0, t1).await.expect("peek");
    assert_eq!(
        before.policies[0].remaining, after.policies[0].remaining,
        "the per-second policy was consumed by a denied check"
    );
    assert_eq!(after.policies[0].remaining, 5);
    // The binding policy of an allowed check is the one with the fewest left.
    let d = limiter.__check_at("other", 1, t1).await.expect("check");
    assert_eq!((&*d.policy, d.remaining), ("per-second", 9));
}

/// After a denial the same subject is denied locally until retry_after, without a round
/// trip; a smaller cost GCRA still denies gets its own, shorter wait, locally too.
async fn deny_cache_answers_without_a_round_trip(fx: Fixture) {
    let rate = Rate::per(2, Duration::from_secs(10)).expect("valid");
    let limiter = fx
        .client
        .rate_limiter(Policy::gcra("slow", rate).expect("valid"))
        .build()
        .expect("valid limiter");
    assert!(limiter.check_n("dc", 2).await.expect("check").allowed);
    let d = limiter.check_n("dc", 2).await.expect("check");
    assert!(!d.allowed && d.origin == Origin::Store, "{}", brief(&d));
    let calls = limiter.__store_calls();
    for _ in 0..50 {
        let d = limiter.check_n("dc", 2).await.expect("check");
        assert!(!d.allowed, "{}", brief(&d));
        assert_eq!(d.origin, Origin::DenyCache);
        assert!(d.retry_after <= Duration::from_secs(10) && d.retry_after > Duration::ZERO);
    }
    assert_eq!(limiter.__store_calls(), calls, "the cache made round trips");
    // One emission interval (5 s) less to wait for one unit less.
    let d = limiter.check_n("dc", 1).await.expect("check");
    assert!(!d.allowed && d.origin == Origin::DenyCache, "{}", brief(&d));
    assert!(d.retry_after <= Duration::from_secs(5), "{}", brief(&d));
    assert_eq!(
        limiter.__store_calls(),
        calls,
        "the cache made a round trip"
    );
    // Clones share the cache.
    let clone = limiter.clone();
    assert_eq!(
        clone.check("dc").await.expect("check").origin,
        Origin::DenyCache
    );
    // Off when asked.
    let uncached = fx
        .client
        .rate_limiter(Policy::gcra("slow", rate).expect("valid"))
        .deny_cache(0)
        .build()
        .expect("valid limiter");
    assert_eq!(
        uncached.check("dc").await.expect("check").origin,
        Origin::Store
    );
    assert_eq!(uncached.__deny_cache_len(), 0);
}

async fn deny_cache_stays_bounded(fx: Fixture) {
    // Denials last an hour, so none leaves the cache while the loop runs on a busy machine
    // (at one per 10 s, a loaded run's first entries expired and the cache held 6).
    let rate = Rate::per(1, Duration::from_secs(3600)).expect("valid");
    let limiter = fx
        .client
        .rate_limiter(Policy::gcra("bounded", rate).expect("valid"))
        .deny_cache(8)
        .build()
        .expect("valid limiter");
    for i in 0..100 {
        let subject = format!("s{i}");
        limiter.check(&subject).await.expect("check");
        assert!(!limiter.check(&subject).await.expect("check").allowed);
        assert!(limiter.__deny_cache_len() <= 8);
    }
    assert_eq!(limiter.__deny_cache_len(), 8);
}

/// Shadow mode counts as usual but lets everything through, flags the requests it would
/// have denied, and logs them.
async fn shadow_mode_reports_and_never_denies(fx: Fixture) {
    let capture = Capture::start(tracing::Level::INFO);

    let rate = Rate::per(3, Duration::from_secs(10)).expect("valid");
    let limiter = fx
        .client
        .rate_limiter(Policy::sliding_log("shadowed", rate).expect("valid"))
        .shadow(true)
        .build()
        .expect("valid limiter");
    assert!(limiter.is_shadow());
    let decisions = {
        let mut out = Vec::new();
        for _ in 0..6 {
            out.push(limiter.check("tenant:1").await.expect("check"));
        }
        out
    };
    assert!(decisions.iter().all(|d| d.allowed), "shadow mode denied");
    let shadowed = decisions.iter().filter(|d| d.shadowed).count();
    assert_eq!(shadowed, 3, "the last three would have been denied");
    assert!(decisions[5].retry_after > Duration::ZERO);
    // It counted only what enforcement would have let through.
    let peek = limiter.peek("tenant:1").await.expect("peek");
    assert_eq!(peek.policies[0].remaining, 0);
    let log = capture.text();
    assert_eq!(
        log.matches("shadow mode: the rate limit would have denied")
            .count(),
        4,
        "three checks and one peek would have been denied:\n{log}"
    );
    assert!(
        log.contains("tenant:1") && log.contains("shadowed"),
        "{log}"
    );
}

/// Real time: a key's ttl is its state's reset time, and once it has passed the key is
/// gone and the subject starts afresh.
async fn keys_expire_once_their_state_stops_mattering(fx: Fixture) {
    let inspect = fx.client.__inspect();
    for algorithm in ALGORITHMS {
        let limiter = fx
            .client
            .rate_limiter(policy(algorithm, 4, Duration::from_millis(200)))
            .deny_cache(0)
            .build()
            .expect("valid limiter");
        let subject = format!("ttl:{algorithm}");
        let key = limiter.__keys(&subject).expect("keys").remove(0);
        let mut last = None;
        for _ in 0..3 {
            last = Some(limiter.check(&subject).await.expect("check"));
        }
        let last = last.expect("checked");
        let pttl = inspect
            .pttl(&key)
            .await
            .expect("pttl")
            .expect("the key has a ttl");
        assert!(
            pttl <= last.reset_after + Duration::from_millis(2),
            "{algorithm}: ttl {pttl:?} outlives reset {:?}",
            last.reset_after
        );
        // A sliding window's state matters for two windows; everything else for one.
        tokio::time::sleep(last.reset_after + Duration::from_millis(30)).await;
        assert_eq!(inspect.pttl(&key).await.expect("pttl"), None, "{algorithm}");
        let d = limiter.check(&subject).await.expect("check");
        assert_eq!(d.remaining, 3, "{algorithm}: starts afresh: {}", brief(&d));
    }
}

async fn invalid_subjects_are_refused(fx: Fixture) {
    let limiter = fx
        .client
        .rate_limiter(policy(Algorithm::Gcra, 1, Duration::from_secs(1)))
        .build()
        .expect("valid limiter");
    assert!(matches!(
        limiter.check("").await,
        Err(RateLimitError::InvalidSubject(InvalidName::Empty))
    ));
    assert!(matches!(
        limiter.check(&"x".repeat(513)).await,
        Err(RateLimitError::InvalidSubject(InvalidName::TooLong { .. }))
    ));
    assert!(
        limiter
            .check(&"x".repeat(512))
            .await
            .expect("check")
            .allowed
    );
    let p = || policy(Algorithm::Gcra, 1, Duration::from_secs(1));
    assert!(matches!(
        fx.client.rate_limiter_all([p(), p()]).build(),
        Err(RateLimitError::InvalidPolicy(
            InvalidPolicy::DuplicateName { .. }
        ))
    ));
    assert!(matches!(
        fx.client.rate_limiter_all([]).build(),
        Err(RateLimitError::InvalidPolicy(InvalidPolicy::NoPolicies))
    ));
}

/// Subjects with braces, percent signs and separators are distinct and cannot pick the
/// hash tag; every policy of one subject shares its slot.
async fn subjects_that_look_alike_are_different(fx: Fixture) {
    let limiter = fx
        .client
        .rate_limiter_all([
            policy(Algorithm::Gcra, 1, Duration::from_secs(10)),
            policy(Algorithm::SlidingLog, 5, Duration::from_secs(10)),
        ])
        .build()
        .expect("valid");
    let subjects = ["a}b", "a%7Db", "{a}", "a", "a:b", "a%", "a%25", "}{"];
    for s in subjects {
        assert!(limiter.check(s).await.expect("check").allowed, "{s:?}");
        let keys = limiter.__keys(s).expect("keys");
        assert_eq!(distlock::hash_tag(&keys[0]), distlock::hash_tag(&keys[1]));
    }
    for s in subjects {
        assert!(!limiter.check(s).await.expect("check").allowed, "{s:?}");
    }
}
