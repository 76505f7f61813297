//! The model check through the deny cache: random traces with mixed costs go through the
//! real `check_n` path with the cache on, and every field of every decision (the verdict,
//! the binding policy's figures, and each policy's own) must be the reference model's at
//! the same instant, to the microsecond, whether the store or the cache answered.
//!
//! `model_check.rs` injects time through `__check_at`, which bypasses the cache. Here time is
//! tokio's, paused: the in-memory store and the deny cache both read it, so a trace is
//! deterministic and moves only when the test calls `tokio::time::advance`. The store's
//! timeline is wall-clock microseconds at its creation plus tokio's elapsed time
//! (`Rates::now_us` in `src/store/memory.rs`); the test learns that start once, from a
//! fixed window's reset, and from then on knows the store's clock exactly.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock::Client;
use distlock::ratelimit::{Origin, Policy, Rate};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::common::{ALGORITHMS, us};
use crate::model::{Expected, Models};
use crate::model_check::{random_lockout, random_policies, random_policy};

const TRACES_PER_ALGORITHM: usize = 6;
const MIXED_TRACES: usize = 10;
const STEPS: usize = 200;

/// The store's clock, in µs on its timeline, as tokio's (paused) clock moves.
struct StoreClock {
    at_start: i64,
    start: Instant,
}

impl StoreClock {
    /// Reads the store's clock once. A fixed window of one day resets at the next multiple
    /// of a day on the store's timeline, which gives the time modulo a day exactly; the
    /// wall clock (which the store started from, milliseconds ago) picks the day.
    async fn of(client: &Client) -> Self {
        const DAY: i64 = 86_400_000_000;
        let day = Duration::from_micros(u64::try_from(DAY).expect("fits"));
        let probe =
            Policy::fixed_window("clock-probe", Rate::per(1, day).expect("valid")).expect("valid");
        let start = Instant::now();
        let d = client
            .rate_limiter(probe)
            .deny_cache(0)
            .build()
            .expect("valid limiter")
            .check("clock-probe")
            .await
            .expect("probe");
        assert!(d.allowed, "the probe counts one");
        let residue = (DAY - us(d.reset_after)).rem_euclid(DAY);
        let wall = i64::try_from(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("after 1970")
                .as_micros(),
        )
        .expect("fits");
        let near = wall - wall.rem_euclid(DAY) + residue;
        let at_start = [near - DAY, near, near + DAY]
            .into_iter()
            .min_by_key(|t| (t - wall).abs())
            .expect("three candidates");
        Self { at_start, start }
    }

    fn now_us(&self) -> i64 {
        self.at_start + us(Instant::now() - self.start)
    }

    /// Moves tokio's clock (and so the store's and the cache's) by `us` µs.
    async fn advance(&self, us: i64) {
        tokio::time::advance(Duration::from_micros(u64::try_from(us).expect("forward"))).await;
    }
}

/// The binding policy the model's verdicts imply (as `Decision` documents it): the denier
/// with the longest wait, else the policy with the fewest left; the first one on ties.
fn binding(expected: &[Expected]) -> usize {
    let allowed = expected.iter().all(|e| e.allowed);
    let mut best = 0;
    for (i, e) in expected.iter().enumerate() {
        let b = &expected[best];
        let better = if allowed {
            e.remaining < b.remaining
        } else {
            !e.allowed && (b.allowed || e.retry_us > b.retry_us)
        };
        if better {
            best = i;
        }
    }
    best
}

/// The binding policy of an any-of limiter's verdicts: the first that allows, else the
/// denier with the shortest wait; the first one on ties.
fn binding_any(expected: &[Expected]) -> usize {
    expected.iter().position(|e| e.allowed).unwrap_or_else(|| {
        (0..expected.len())
            .min_by_key(|&i| (expected[i].retry_us, i))
            .unwrap_or(0)
    })
}

/// How the trace's limiter combines its policies.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Combine {
    All,
    Any,
}

/// Runs one trace of `STEPS` checks through the cache and compares every decision with the
/// model. Returns how many the deny cache answered, and how many of those were lockouts.
async fn run_trace(
    client: &Client,
    clock: &StoreClock,
    rng: &mut StdRng,
    label: &str,
    policies: Vec<Policy>,
) -> (usize, usize) {
    run_combined_trace(client, clock, rng, label, policies, Combine::All).await
}

/// [`run_trace`], with the policies combined as `combine` says.
async fn run_combined_trace(
    client: &Client,
    clock: &StoreClock,
    rng: &mut StdRng,
    label: &str,
    policies: Vec<Policy>,
    combine: Combine,
) -> (usize, usize) {
    let limiter = match combine {
        Combine::All => client.rate_limiter_all(policies.clone()),
        Combine::Any => client.rate_limiter_any(policies.clone()),
    }
    .build()
    .expect("valid policies");
    let mut models = Models::of(&policies);
    let unit = models.0.iter().map(|m| m.policy.unit).max().unwrap_or(1);
    let min_limit = policies.iter().map(Policy::limit).min().unwrap_or(1);
    // Start just before a multiple of the largest unit, so the first steps cross a boundary.
    let now = clock.now_us();
    let target = (now / unit + 1) * unit - rng.random_range(0..unit / 2 + 1);
    clock.advance((target - now).max(0)).await;
    let subject = format!("cached:{label}");
    let (mut hits, mut locked_hits) = (0, 0);
    // An any-of trace ends with checks of 1 at one instant, two more than the policies hold
    // between them: a denial by every policy, then a check the cache may answer.
    let steps = match combine {
        Combine::All => STEPS,
        Combine::Any => {
            STEPS
                + policies
                    .iter()
                    .map(|p| usize::try_from(p.limit()).expect("fits"))
                    .sum::<usize>()
                + 2
        }
    };
    for step in 0..steps {
        // Mostly short steps, so that many checks land while a denial is cached.
        let dt = match rng.random_range(0..100) {
            _ if step >= STEPS => 0,
            0..35 => 0,
            35..75 => rng.random_range(0..unit / 8 + 1),
            75..93 => rng.random_range(0..2 * unit),
            _ => rng.random_range(0..10 * unit),
        };
        clock.advance(dt).await;
        let now = clock.now_us();
        let cost = match rng.random_range(0..10) {
            _ if step >= STEPS => 1,
            0 => 0,
            1..5 => 1,
            _ => rng.random_range(1..=min_limit),
        };
        let (charged, expected) = match combine {
            Combine::All => (None, models.check(now, i64::from(cost))),
            Combine::Any => models.check_any(now, i64::from(cost)),
        };
        let d = limiter
            .check_n(&subject, cost)
            .await
            .unwrap_or_else(|e| panic!("{label} step {step}: {e}"));
        let at = || format!("{label} step {step} at {now} cost {cost} ({:?})", d.origin);
        assert!(
            matches!(d.origin, Origin::Store | Origin::DenyCache),
            "{}",
            at()
        );
        hits += usize::from(d.origin == Origin::DenyCache);
        locked_hits += usize::from(d.origin == Origin::DenyCache && d.locked_out);
        for (i, (want, got)) in crate::model::paired(&expected, &d.policies, &at()).enumerate() {
            let got_tuple = (
                got.allowed,
                i64::try_from(got.remaining).expect("fits"),
                us(got.retry_after),
                us(got.reset_after),
                got.locked_out,
            );
            let want_tuple = (
                want.allowed,
                want.remaining,
                want.retry_us,
                want.reset_us,
                want.locked_us > 0,
            );
            assert_eq!(
                got_tuple,
                want_tuple,
                "{} policy {i} ({:?}): (allowed, remaining, retry µs, reset µs, locked out) \
                 differs from the model",
                at(),
                policies[i]
            );
        }
        let (allowed, b) = match combine {
            Combine::All => (expected.iter().all(|e| e.allowed), binding(&expected)),
            Combine::Any => {
                let got = d.policies.iter().position(|p| p.charged);
                assert_eq!(got, charged, "{}: the policy charged", at());
                (expected.iter().any(|e| e.allowed), binding_any(&expected))
            }
        };
        // An any-of decision is locked out only when denied (another policy may pass).
        assert_eq!(
            d.locked_out,
            (combine == Combine::All || !allowed) && expected.iter().any(|e| e.locked_us > 0),
            "{}: locked out",
            at()
        );
        let want = &expected[b];
        let got = (
            d.allowed,
            &*d.policy,
            d.limit,
            i64::try_from(d.remaining).expect("fits"),
            us(d.retry_after),
            us(d.reset_after),
        );
        let want = (
            allowed,
            policies[b].name(),
            u64::from(policies[b].limit()),
            want.remaining,
            if allowed { 0 } else { want.retry_us },
            want.reset_us,
        );
        assert_eq!(
            got,
            want,
            "{}: (allowed, policy, limit, remaining, retry µs, reset µs) differs from the model",
            at()
        );
    }
    (hits, locked_hits)
}

/// Each algorithm alone, mixed costs, through the cache.
#[tokio::test(start_paused = true)]
async fn every_algorithm_matches_the_model_through_the_cache() {
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    let client = Client::in_memory();
    let clock = StoreClock::of(&client).await;
    for algorithm in ALGORITHMS {
        let mut hits = 0;
        for trace in 0..TRACES_PER_ALGORITHM {
            let policy = random_policy(&mut rng, algorithm, "p");
            let label = format!("seed {seed} {algorithm} trace {trace}");
            hits += run_trace(&client, &clock, &mut rng, &label, vec![policy])
                .await
                .0;
        }
        eprintln!(
            "{algorithm}: {hits} of {} answered by the deny cache",
            TRACES_PER_ALGORITHM * STEPS
        );
        assert!(
            hits > 0,
            "seed {seed} {algorithm}: the cache never answered"
        );
    }
}

/// Two or three policies of random algorithms on one subject, all-or-nothing, through the
/// cache: a hit must get every policy's figures right, or not be served.
#[tokio::test(start_paused = true)]
async fn mixed_policies_match_the_model_through_the_cache() {
    combined_traces_match_the_model(Combine::All, "mixed").await;
}

/// Issue 28 §4: any of two or three policies of random algorithms (some with a lockout),
/// through the cache: a hit needs every policy to deny, and must get every figure right.
#[tokio::test(start_paused = true)]
async fn any_of_matches_the_model_through_the_cache() {
    combined_traces_match_the_model(Combine::Any, "any of").await;
}

/// `MIXED_TRACES` traces of [`random_policies`] combined as `combine` says, through the
/// cache, each checked against the model; the cache must have answered some checks.
async fn combined_traces_match_the_model(combine: Combine, name: &str) {
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    let client = Client::in_memory();
    let clock = StoreClock::of(&client).await;
    let mut hits = 0;
    for trace in 0..MIXED_TRACES {
        let policies = random_policies(&mut rng);
        let label = format!("seed {seed} {name} trace {trace}");
        hits += run_combined_trace(&client, &clock, &mut rng, &label, policies, combine)
            .await
            .0;
    }
    eprintln!(
        "{name}: {hits} of {} answered by the deny cache",
        MIXED_TRACES * STEPS
    );
    assert!(hits > 0, "seed {seed}: the cache never answered");
}

/// Issue 28 §2: every algorithm with a lockout, alone and beside a policy without one,
/// through the cache: a blocked subject is answered from the cache until its block ends
/// (every figure as the model's), and a check that would breach always reaches the store.
#[tokio::test(start_paused = true)]
async fn lockouts_match_the_model_through_the_cache() {
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    let client = Client::in_memory();
    let clock = StoreClock::of(&client).await;
    let mut locked_hits = 0;
    for algorithm in ALGORITHMS {
        for trace in 0..TRACES_PER_ALGORITHM {
            let policy = random_policy(&mut rng, algorithm, "p");
            let lockout = random_lockout(&mut rng, policy.window());
            let mut policies = vec![policy.with_lockout(lockout).expect("valid lockout")];
            if trace % 2 == 1 {
                let other = ALGORITHMS[rng.random_range(0..ALGORITHMS.len())];
                policies.push(random_policy(&mut rng, other, "q"));
            }
            let label = format!("seed {seed} {algorithm} with a lockout, trace {trace}");
            locked_hits += run_trace(&client, &clock, &mut rng, &label, policies)
                .await
                .1;
        }
    }
    eprintln!("lockouts: {locked_hits} blocked checks answered by the deny cache");
    assert!(
        locked_hits > 0,
        "seed {seed}: the cache never answered a blocked subject"
    );
}
