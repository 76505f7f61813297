//! Lockout after a breach, escalating (issue 28 §2), on both stores and a Cluster: a check a
//! policy denies while the subject is not blocked blocks it for the step of the breach's
//! number; while blocked every check is denied without spending, with `retry_after` the
//! block's end; breaches are forgotten a memory window after the latest block ends; `reset`
//! clears it. The model check and the stores' differential run lockouts on random traces too
//! (`model_check.rs`, `stores_agree.rs`, `cached_model_check.rs`).

use std::time::Duration;

use distlock::ratelimit::{__TestOp as Op, Decision, Lockout, Origin, Policy, Rate, RateLimiter};

use crate::common::{ALGORITHMS, EPOCH_US, brief, here_and_elsewhere, policy};
use crate::support::RedisServer;
use crate::support::child::{self, ChildProcess};
use crate::support::fixture::{Fixture, connect, on_both_stores, shared_cluster_client};

on_both_stores!(
    breaches_escalate_end_and_are_forgotten_on_every_algorithm,
    only_denied_attempts_breach,
    a_lockout_belongs_to_its_policy,
    a_cached_lockout_is_cleared_by_reset,
);

on_both_stores!(paused_memory: the_server_clock_times_the_blocks);

const MS: u64 = 1000;
const S: u64 = 1_000_000;
const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);

/// One operation at `EPOCH_US + at` µs, straight to the store.
async fn at(limiter: &RateLimiter, subject: &str, op: Op, at: u64) -> Decision {
    limiter
        .__operate_at(subject, op, EPOCH_US + at)
        .await
        .unwrap_or_else(|e| panic!("{op:?} at +{at} µs: {e}"))
        .0
}

/// `(allowed, locked out, remaining, retry µs)` of a decision.
fn seen(d: &Decision) -> (bool, bool, u64, u64) {
    let retry = u64::try_from(d.retry_after.as_micros()).expect("fits");
    (d.allowed, d.locked_out, d.remaining, retry)
}

/// Checks of cost 1 at `t` until one is denied: how many passed, and the denial.
async fn exhaust(limiter: &RateLimiter, subject: &str, t: u64) -> (u64, Decision) {
    for passed in 0..100 {
        let d = at(limiter, subject, Op::Check(1), t).await;
        if !d.allowed {
            return (passed, d);
        }
    }
    panic!("{subject}: 100 checks passed at +{t} µs");
}

/// 3 per second on every algorithm, blocked 1.5 s on the first breach and 3.5 s on every
/// later one, breaches remembered 10 s past the latest block, at injected instants (the
/// store's clock to the microsecond): the first breach blocks for step 1, with `retry_after`
/// exactly the block's end, and denies without spending (a twin subject that made no checks
/// during the block has the same figures when it ends); the second breach blocks for step 2,
/// and so does the third (the last step repeats); once the memory has passed, a breach is a
/// first one again; `reset` clears the block and the breaches.
async fn breaches_escalate_end_and_are_forgotten_on_every_algorithm(fx: Fixture) {
    let (step1, step2, memory) = (1500 * MS, 3500 * MS, 10 * S);
    let lockout =
        Lockout::after_breach([Duration::from_micros(step1), Duration::from_micros(step2)])
            .remember_for(Duration::from_micros(memory));
    for algorithm in ALGORITHMS {
        let p = policy(algorithm, 3, SECOND)
            .with_lockout(lockout.clone())
            .expect("valid lockout");
        let limiter = fx
            .client
            .rate_limiter(p)
            .deny_cache(0)
            .build()
            .expect("valid limiter");
        let what = |t: u64, d: &Decision| format!("{algorithm:?} at +{t} µs: {}", brief(d));
        let (s, twin) = (format!("s-{algorithm:?}"), format!("twin-{algorithm:?}"));

        // The first breach: blocked for step 1 from the breach.
        for subject in [&s, &twin] {
            let (passed, d) = exhaust(&limiter, subject, 0).await;
            assert_eq!(passed, 3, "{}", what(0, &d));
            assert_eq!(seen(&d), (false, true, 0, step1), "{}", what(0, &d));
        }
        // While blocked: denied, nothing left, retry_after the block's end, even where the
        // policy alone would allow (a second on, every algorithm has room again).
        for t in [S, 1200 * MS, step1 - 1] {
            let d = at(&limiter, &s, Op::Check(1), t).await;
            assert_eq!(seen(&d), (false, true, 0, step1 - t), "{}", what(t, &d));
            assert!(d.policies[0].locked_out, "{}", what(t, &d));
            let peek = at(&limiter, &s, Op::Check(0), t).await;
            assert_eq!(
                seen(&peek),
                (false, true, 0, step1 - t),
                "{}",
                what(t, &peek)
            );
        }
        // The block ends: nothing was spent during it.
        let d = at(&limiter, &s, Op::Check(0), step1).await;
        let control = at(&limiter, &twin, Op::Check(0), step1).await;
        assert!(d.allowed && !d.locked_out, "{}", what(step1, &d));
        assert_eq!(
            (d.remaining, d.reset_after),
            (control.remaining, control.reset_after),
            "{}: the checks during the block spent nothing",
            what(step1, &d)
        );

        // The second breach: step 2, from that breach.
        let t2 = step1;
        let (passed, d) = exhaust(&limiter, &s, t2).await;
        assert_eq!(passed, control.remaining, "{}", what(t2, &d));
        assert_eq!(seen(&d), (false, true, 0, step2), "{}", what(t2, &d));
        let end2 = t2 + step2;
        let d = at(&limiter, &s, Op::Check(1), end2 - 1).await;
        assert_eq!(seen(&d), (false, true, 0, 1), "{}", what(end2 - 1, &d));
        let d = at(&limiter, &s, Op::Check(1), end2).await;
        assert!(d.allowed && !d.locked_out, "{}", what(end2, &d));

        // The third, just before breach 2 is forgotten: the last step again.
        let t3 = end2 + memory - 1;
        let (_, d) = exhaust(&limiter, &s, t3).await;
        assert_eq!(seen(&d), (false, true, 0, step2), "{}", what(t3, &d));
        // Once its memory has passed since its block ended: a first breach again.
        let t4 = t3 + step2 + memory;
        let (passed, d) = exhaust(&limiter, &s, t4).await;
        assert_eq!(passed, 3, "{}", what(t4, &d));
        assert_eq!(seen(&d), (false, true, 0, step1), "{}", what(t4, &d));

        // A reset clears the block and the breaches.
        let d = at(&limiter, &s, Op::Reset, t4 + 1).await;
        assert!(
            d.allowed && !d.locked_out && d.remaining == 3,
            "{}",
            what(t4, &d)
        );
        let (passed, d) = exhaust(&limiter, &s, t4 + 1).await;
        assert_eq!(passed, 3, "{}", what(t4 + 1, &d));
        assert_eq!(seen(&d), (false, true, 0, step1), "{}", what(t4 + 1, &d));
    }
}

/// Only a check that a policy denies is a breach: peeks, refunds and penalties never are,
/// a check up to n that fits nothing is. While blocked, a check up to n grants nothing and a
/// refund lifts nothing; a reservation is a check.
async fn only_denied_attempts_breach(fx: Fixture) {
    let min = 60 * S;
    // The start of a minute on the store's clock: the window's boundaries are the minutes.
    let t0 = min - EPOCH_US % min;
    let login = Policy::fixed_window("login", Rate::per_minute(2).expect("rate"))
        .expect("policy")
        .with_lockout(Lockout::after_breach([MINUTE, 10 * MINUTE]))
        .expect("lockout");
    let limiter = fx
        .client
        .rate_limiter(login)
        .deny_cache(0)
        .build()
        .expect("limiter");
    let what = |d: &Decision| brief(d);
    for _ in 0..2 {
        assert!(at(&limiter, "a", Op::Check(1), t0).await.allowed);
    }
    // A denied peek is no attempt.
    for _ in 0..3 {
        let d = at(&limiter, "a", Op::Check(0), t0).await;
        assert_eq!(seen(&d), (false, false, 0, min), "{}", what(&d));
    }
    // Penalties and refunds are no attempts either.
    let d = at(&limiter, "a", Op::Penalize(5), t0).await;
    assert!(!d.allowed && !d.locked_out, "{}", what(&d));
    let d = at(&limiter, "a", Op::Refund(1), t0).await;
    assert!(
        d.allowed && !d.locked_out && d.remaining == 1,
        "{}",
        what(&d)
    );
    // A check up to n takes what fits; fitting nothing is a breach.
    let d = at(&limiter, "a", Op::CheckUpTo(5), t0).await;
    assert_eq!((d.granted, d.locked_out), (1, false), "{}", what(&d));
    let d = at(&limiter, "a", Op::CheckUpTo(5), t0).await;
    assert_eq!(d.granted, 0, "{}", what(&d));
    assert_eq!(seen(&d), (false, true, 0, min), "{}", what(&d));
    // Blocked: a refund lifts nothing, up to n grants nothing, a penalty adds no breach.
    let d = at(&limiter, "a", Op::Refund(2), t0 + 10 * S).await;
    assert_eq!(seen(&d), (false, true, 0, 50 * S), "{}", what(&d));
    let d = at(&limiter, "a", Op::CheckUpTo(1), t0 + 10 * S).await;
    assert_eq!(
        (d.granted, seen(&d)),
        (0, (false, true, 0, 50 * S)),
        "{}",
        what(&d)
    );
    let d = at(&limiter, "a", Op::Penalize(1), t0 + 20 * S).await;
    assert_eq!(seen(&d), (false, true, 0, 40 * S), "{}", what(&d));
    // The block ends when the first step says; the next breach is the second.
    let d = at(&limiter, "a", Op::Check(1), t0 + min).await;
    assert!(d.allowed, "{}", what(&d));
    let (_, d) = exhaust(&limiter, "a", t0 + min).await;
    assert_eq!(seen(&d), (false, true, 0, 10 * min), "{}", what(&d));

    // A reservation under a lockout is a check: no turn to queue for, and a breach.
    let gcra = Policy::gcra("otp", Rate::per_minute(1).expect("rate"))
        .expect("policy")
        .with_lockout(Lockout::after_breach([MINUTE * 5]))
        .expect("lockout");
    let limiter = fx
        .client
        .rate_limiter(gcra)
        .deny_cache(0)
        .build()
        .expect("limiter");
    assert!(at(&limiter, "b", Op::Reserve(1, 120 * S), 0).await.allowed);
    let d = at(&limiter, "b", Op::Reserve(1, 120 * S), 0).await;
    assert_eq!(seen(&d), (false, true, 0, 5 * min), "{}", what(&d));

    // Shadow mode counts the breach and lets the request through, saying so.
    let shadow = fx
        .client
        .rate_limiter(
            Policy::sliding_log("shadow", Rate::per_minute(1).expect("rate"))
                .expect("policy")
                .with_lockout(Lockout::after_breach([MINUTE]))
                .expect("lockout"),
        )
        .shadow(true)
        .build()
        .expect("limiter");
    assert!(shadow.check("c").await.expect("check").allowed);
    let d = shadow.check("c").await.expect("check");
    assert!(d.allowed && d.shadowed && d.locked_out, "{}", what(&d));
    assert_eq!(d.retry_after, MINUTE, "{}", what(&d));
}

/// With several policies, a lockout belongs to its own policy: a check another policy denies
/// does not breach it, and its block denies the check without spending from the others.
async fn a_lockout_belongs_to_its_policy(fx: Fixture) {
    let locked = Policy::sliding_log("attempts", Rate::per_minute(3).expect("rate"))
        .expect("policy")
        .with_lockout(Lockout::after_breach([MINUTE]))
        .expect("lockout");
    let burst = Policy::gcra("burst", Rate::per_second(1).expect("rate")).expect("policy");
    let limiter = fx
        .client
        .rate_limiter_all([locked, burst])
        .deny_cache(0)
        .build()
        .expect("limiter");
    let what = |d: &Decision| brief(d);
    assert!(at(&limiter, "a", Op::Check(1), 0).await.allowed);
    // Denied by `burst` only: no breach of `attempts`.
    let d = at(&limiter, "a", Op::Check(1), 0).await;
    assert!(!d.allowed && !d.locked_out, "{}", what(&d));
    assert_eq!(&*d.policy, "burst");
    assert!(d.policies[0].allowed && !d.policies[0].locked_out);
    assert!(at(&limiter, "a", Op::Check(1), S).await.allowed);
    assert!(at(&limiter, "a", Op::Check(1), 2 * S).await.allowed);
    // Denied by both: `attempts` is breached, and binds with its block.
    let d = at(&limiter, "a", Op::Check(1), 2 * S).await;
    assert_eq!(seen(&d), (false, true, 0, 60 * S), "{}", what(&d));
    assert_eq!(&*d.policy, "attempts");
    assert!(d.policies[0].locked_out && !d.policies[1].locked_out);
    // While blocked, `burst` allows but spends nothing.
    let d = at(&limiter, "a", Op::Check(1), 10 * S).await;
    assert!(
        !d.allowed && d.locked_out && d.policies[1].allowed,
        "{}",
        what(&d)
    );
    assert_eq!(d.policies[1].remaining, 1, "{}", what(&d));
}

/// The deny cache answers a blocked subject locally until the block ends (`retry_after`
/// counting down, `locked_out` set); a reset through the same limiter is seen at once, one
/// through another replica within the cache's max age (as for any denial).
async fn a_cached_lockout_is_cleared_by_reset(fx: Fixture) {
    const MAX_AGE: Duration = Duration::from_millis(300);
    let otp = Policy::sliding_log("otp", Rate::per(1, 10 * MINUTE).expect("rate"))
        .expect("policy")
        .with_lockout(Lockout::after_breach([10 * MINUTE]))
        .expect("lockout");
    let (here, elsewhere) = here_and_elsewhere(&fx, otp, MAX_AGE).await;
    // The first round uses the one attempt; the second starts with the one the first round's
    // last check took.
    assert!(here.check("alice").await.expect("check").allowed);
    for round in ["here", "elsewhere"] {
        let breach = here.check("alice").await.expect("check");
        assert_eq!(
            (breach.allowed, breach.locked_out, breach.origin),
            (false, true, Origin::Store),
            "{round}: {}",
            brief(&breach)
        );
        assert_eq!(breach.retry_after, 10 * MINUTE, "{round}: the first step");
        let cached = here.check("alice").await.expect("check");
        assert_eq!(
            (cached.allowed, cached.locked_out, cached.origin),
            (false, true, Origin::DenyCache),
            "{round}: {}",
            brief(&cached)
        );
        assert!(cached.retry_after <= breach.retry_after);
        assert!(cached.retry_after > 9 * MINUTE);
        if round == "here" {
            here.reset("alice").await.expect("reset");
        } else {
            elsewhere.reset("alice").await.expect("reset");
            // The entry was made before the reset; once MAX_AGE has passed since, it answers
            // no more (a sleep is never shorter than asked).
            tokio::time::sleep(MAX_AGE).await;
        }
        let after = here.check("alice").await.expect("check");
        assert!(
            after.allowed && after.origin == Origin::Store,
            "{round}: the reset is seen: {}",
            brief(&after)
        );
    }
}

/// On the store's own clock (Redis `TIME`; tokio's paused clock for memory): the breach
/// answers `retry_after` = its step exactly (the block starts at the breach, on the clock
/// that decided it); waiting that long ends it; the next breach is longer; once the memory
/// has passed, the first step again.
async fn the_server_clock_times_the_blocks(fx: Fixture) {
    // What a real clock may add to a sleep before the server sees its end.
    const MARGIN: Duration = Duration::from_millis(30);
    let (step1, step2, memory) = (SECOND, 2 * SECOND, Duration::from_millis(1500));
    let limiter = fx
        .client
        .rate_limiter(
            Policy::sliding_log("pin", Rate::per_second(3).expect("rate"))
                .expect("policy")
                .with_lockout(Lockout::after_breach([step1, step2]).remember_for(memory))
                .expect("lockout"),
        )
        .deny_cache(0)
        .build()
        .expect("limiter");
    // Checks until one is denied (3 pass, or more on a machine so slow that the first left
    // the log's second): that one is the breach.
    let breach = async |expected: Duration| {
        let mut passed = 0;
        let d = loop {
            let d = limiter.check("card").await.expect("check");
            if !d.allowed {
                break d;
            }
            passed += 1;
            assert!(passed < 100, "{}", brief(&d));
        };
        assert!(passed >= 3, "{passed} passed before the breach");
        assert_eq!(
            (d.allowed, d.locked_out, d.retry_after),
            (false, true, expected),
            "{}",
            brief(&d)
        );
    };
    breach(step1).await;
    let d = limiter.check("card").await.expect("check");
    assert!(d.locked_out && d.retry_after <= step1, "{}", brief(&d));
    tokio::time::sleep(d.retry_after + MARGIN).await;
    // The block is over (and the log's entries a second old): the second breach.
    breach(step2).await;
    tokio::time::sleep(step2 + memory + MARGIN).await;
    breach(step1).await;
    let d = limiter.reset("card").await.expect("reset");
    assert!(d.allowed && !d.locked_out, "{}", brief(&d));
}

/// The test: a brute-force loop of 1000 attempts on one account, from two OS
/// processes (4 tasks of 125 attempts each), against "5 per minute, then blocked for an
/// hour": exactly 5 pass in all. A sliding log, so no window boundary can let a second 5
/// through before the breach; the hour-long block does the rest.
const ENTRY: &str = "lockout::child_entry";
const ATTEMPT_PROCESSES: usize = 2;
const ATTEMPT_TASKS: usize = 4;
const ATTEMPTS_PER_TASK: usize = 125;
const PASSES: usize = 5;

fn login_policy() -> Policy {
    Policy::sliding_log("login", Rate::per_minute(5).expect("rate"))
        .expect("policy")
        .with_lockout(Lockout::after_breach([60 * MINUTE]))
        .expect("lockout")
}

/// What a child runs: its share of the attempts; reports how many passed.
async fn attempt_logins(url: &str) -> usize {
    let limiter = connect(url)
        .await
        .rate_limiter(login_policy())
        .build()
        .expect("limiter");
    let tasks: Vec<_> = (0..ATTEMPT_TASKS)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut passed = 0;
                for _ in 0..ATTEMPTS_PER_TASK {
                    let d = limiter.check("account:alice").await.expect("check");
                    if d.allowed {
                        passed += 1;
                    } else {
                        assert!(d.locked_out, "a denial is the lockout: {}", brief(&d));
                    }
                }
                passed
            })
        })
        .collect();
    let mut passed = 0;
    for task in tasks {
        passed += task.await.expect("task");
    }
    passed
}

/// Entry point of the child processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as a child process of `brute_force_from_two_processes_passes_exactly_five`"]
async fn child_entry() {
    let Some((role, url)) = child::role() else {
        return;
    };
    assert_eq!(role, "attempts", "unknown role");
    let passed = attempt_logins(&url).await;
    child::say(&format!("DONE {passed}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brute_force_from_two_processes_passes_exactly_five() {
    let server = RedisServer::start();
    let children: Vec<ChildProcess> = (0..ATTEMPT_PROCESSES)
        .map(|_| ChildProcess::spawn(ENTRY, "attempts", &server.url()))
        .collect();
    let mut passed = 0;
    for child in &children {
        let line = child.expect_line("DONE", Duration::from_secs(240));
        passed += line["DONE ".len()..]
            .parse::<usize>()
            .expect("a count of passed attempts");
    }
    for child in children {
        child.wait_success(Duration::from_secs(10));
    }
    assert_eq!(
        passed,
        PASSES,
        "attempts that passed of {}\n{}",
        ATTEMPT_PROCESSES * ATTEMPT_TASKS * ATTEMPTS_PER_TASK,
        server.log()
    );
    // The account is still blocked, for about the hour.
    let limiter = connect(&server.url())
        .await
        .rate_limiter(login_policy())
        .build()
        .expect("limiter");
    let d = limiter.check("account:alice").await.expect("check");
    assert!(!d.allowed && d.locked_out, "{}", brief(&d));
    assert!(d.retry_after > 59 * MINUTE, "{}", brief(&d));
}

/// On a Cluster: each subject's block lives in its own slot beside its counter (one script
/// call), breaches escalate, and a reset clears them; subjects in different slots are
/// independent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockouts_block_and_reset_on_a_cluster() {
    const STEP1: Duration = Duration::from_millis(200);
    const STEP2: Duration = Duration::from_secs(1);
    let client = shared_cluster_client("lockout").await;
    let limiter = client
        .rate_limiter_all([
            Policy::sliding_log(
                "tries",
                Rate::per(2, Duration::from_millis(100)).expect("rate"),
            )
            .expect("policy")
            .with_lockout(Lockout::after_breach([STEP1, STEP2]))
            .expect("lockout"),
            Policy::gcra("daily", Rate::per_day(100).expect("rate")).expect("policy"),
        ])
        .deny_cache(0)
        .build()
        .expect("limiter");
    // Checks until one is denied (2 pass, more on a machine so slow that the first left the
    // log's 100 ms): that one is the breach. Returns it and the daily units spent.
    let breach = async |subject: &str, step: Duration, spent: u64| {
        let (mut spent, mut passed) = (spent, 0);
        let d = loop {
            let d = limiter.check(subject).await.expect("check");
            if !d.allowed {
                break d;
            }
            (spent, passed) = (spent + 1, passed + 1);
            assert!(passed < 100, "{subject}: {}", brief(&d));
        };
        assert!(passed >= 2, "{subject}: {passed} passed before the breach");
        assert_eq!(
            (d.allowed, d.locked_out, d.retry_after),
            (false, true, step),
            "{subject}: {}",
            brief(&d)
        );
        assert_eq!(
            d.policies[1].remaining,
            100 - spent,
            "{subject}: nothing spent"
        );
        (d, spent)
    };
    for subject in ["a", "user:{7}", "}{", "x:y:z"] {
        let keys = limiter.__keys(subject).expect("keys");
        assert_eq!(keys.len(), 3, "{subject}: counter, lock, counter");
        assert!(keys[1].contains(":lock:"), "{keys:?}");
        let (d, spent) = breach(subject, STEP1, 0).await;
        tokio::time::sleep(d.retry_after + Duration::from_millis(30)).await;
        breach(subject, STEP2, spent).await;
        let d = limiter.reset(subject).await.expect("reset");
        assert!(d.allowed && !d.locked_out, "{subject}: {}", brief(&d));
        breach(subject, STEP1, 0).await;
    }
}
