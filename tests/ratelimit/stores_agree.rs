//! The two stores against each other: the Redis scripts and the in-memory store run the same
//! random operations (checks, checks up to n, reservations, refunds, penalties, resets) at
//! the same injected times, with the subject's rate changing mid-trace for every algorithm
//! (the reference model covers rate changes for the GCRA family only), and must answer the
//! same to the microsecond. At each change of rate, the new rate must not hand out a burst:
//! what the subject had used carries over (for a sliding log, when its window grows: issue
//! 28). A third of the policies have a lockout (the same under each of the subject's rates),
//! so breaches, blocks and their ends are compared too.

use distlock::Client;
use distlock::ratelimit::{__TestOp as Op, Algorithm, Decision, Policy, RateLimiter};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{ALGORITHMS, OPERATION_GAPS, gap, random_cost, trace_start, us};
use crate::model::ModelPolicy;
use crate::model_check::{random_lockout, random_policy};
use crate::support::fixture::Fixture;

const TRACES_PER_ALGORITHM: usize = 4;
const MIXED_TRACES: usize = 6;
const STEPS: usize = 150;
/// Rates each trace switches between.
const RATES: usize = 3;

/// One rate of the subject, on both stores.
struct Rate {
    policies: Vec<Policy>,
    redis: RateLimiter,
    memory: RateLimiter,
}

/// Every verdict's (allowed, remaining, retry µs, reset µs, locked out), then applied, wait
/// µs and the units granted.
type Figures = (Vec<(bool, u64, i64, i64, bool)>, bool, u64, u32);

fn figures(d: &Decision, applied: bool, wait: u64) -> Figures {
    let verdicts = d
        .policies
        .iter()
        .map(|p| {
            (
                p.allowed,
                p.remaining,
                us(p.retry_after),
                us(p.reset_after),
                p.locked_out,
            )
        })
        .collect();
    (verdicts, applied, wait, d.granted)
}

/// Runs `op` on both stores at `now`; asserts they agree and returns the answer.
async fn both(
    rate: &Rate,
    subject: &str,
    op: Op,
    now: i64,
    context: &dyn Fn() -> String,
) -> Figures {
    let at = u64::try_from(now).expect("positive");
    let (d, applied, wait) = rate
        .redis
        .__operate_at(subject, op, at)
        .await
        .unwrap_or_else(|e| panic!("{}: redis: {e}", context()));
    let on_redis = figures(&d, applied, wait);
    let (d, applied, wait) = rate
        .memory
        .__operate_at(subject, op, at)
        .await
        .unwrap_or_else(|e| panic!("{}: memory: {e}", context()));
    let in_memory = figures(&d, applied, wait);
    assert_eq!(
        on_redis,
        in_memory,
        "{}: the stores differ ((allowed, remaining, retry µs, reset µs, locked out) per \
         policy, applied, wait µs, granted): redis left, memory right",
        context()
    );
    on_redis
}

/// One trace over `rates[0]`, switching among `rates` now and then.
async fn run_trace(rng: &mut StdRng, seed: u64, trace: usize, rates: &[Rate]) {
    let unit = rates
        .iter()
        .flat_map(|r| &r.policies)
        .map(|p| ModelPolicy::of(p).unit)
        .max()
        .unwrap_or(1);
    let mut now = trace_start(rng, unit);
    let subject = format!("agree:{seed}:{trace}");
    let mut current = 0;
    for step in 0..STEPS {
        now += gap(rng, unit, &OPERATION_GAPS);
        let rate = &rates[current];
        let min_limit = rate.policies.iter().map(Policy::limit).min().unwrap_or(1);
        let op = match rng.random_range(0..100) {
            0..50 => Op::Check(random_cost(rng, min_limit)),
            50..60 => Op::Refund(rng.random_range(0..=min_limit + 2)),
            60..70 => Op::Penalize(rng.random_range(0..=min_limit + 2)),
            70..73 => Op::Reset,
            73..80 => Op::Reserve(
                rng.random_range(1..=min_limit),
                rng.random_range(0..=u64::try_from(3 * unit).expect("fits")),
            ),
            80..85 => Op::CheckUpTo(rng.random_range(1..=min_limit + 3)),
            _ => {
                let next = (current + rng.random_range(1..RATES)) % RATES;
                switch(&subject, now, &rates[current], &rates[next], &|| {
                    format!(
                        "seed {seed} trace {trace} step {step} at {now}: from {:?} to {:?}",
                        rates[current].policies, rates[next].policies
                    )
                })
                .await;
                current = next;
                continue;
            }
        };
        both(rate, &subject, op, now, &|| {
            format!(
                "seed {seed} trace {trace} step {step} {op:?} at {now} on {:?}",
                rate.policies
            )
        })
        .await;
    }
}

/// A change of rate at `now`: a peek under the old rate, then under the new one. The new rate
/// leaves at most its limit less what the old one counted as used: for the algorithms that
/// count, always; for the sliding log, which judges the times of its requests by whatever
/// window is in force, when its window grows (a shorter one rightly forgets the older
/// entries; a longer one forgot them too before issue 28's fix).
async fn switch(subject: &str, now: i64, from: &Rate, to: &Rate, context: &dyn Fn() -> String) {
    let (before, _, _, _) = both(from, subject, Op::Check(0), now, context).await;
    let (after, _, _, _) = both(to, subject, Op::Check(0), now, context).await;
    assert_eq!(
        (
            from.policies.len(),
            to.policies.len(),
            before.len(),
            after.len()
        ),
        (
            from.policies.len(),
            from.policies.len(),
            from.policies.len(),
            from.policies.len()
        ),
        "{}: one answer per policy, under either rate",
        context()
    );
    for (i, ((old, new), (was, is))) in from
        .policies
        .iter()
        .zip(&to.policies)
        .zip(before.iter().zip(&after))
        .enumerate()
    {
        if old.algorithm() == Algorithm::SlidingLog && new.window() < old.window() {
            continue;
        }
        let used = u64::from(old.limit()) - was.1.min(u64::from(old.limit()));
        let most = u64::from(new.limit()).saturating_sub(used);
        assert!(
            is.1 <= most,
            "{}: policy {i} had {} of {} left (used {used}); the new rate leaves {} of {}: a \
             burst",
            context(),
            was.1,
            old.limit(),
            is.1,
            new.limit()
        );
    }
}

/// `RATES` random rates of the same policies (names and algorithms), on both stores, in any
/// order. Sliding logs are kept for the longest window of any of the rates
/// (`keep_logs_for`): a log expires that long after its newest entry, which with injected
/// time only the in-memory store follows (the Redis script under test adds an hour to every
/// ttl), and then no window of the trace can see its entries on either store.
fn rates(redis: &Client, memory: &Client, shapes: &[Algorithm], rng: &mut StdRng) -> Vec<Rate> {
    let sets: Vec<Vec<Policy>> = (0..RATES)
        .map(|_| {
            shapes
                .iter()
                .enumerate()
                .map(|(i, &algorithm)| random_policy(rng, algorithm, &format!("p{i}")))
                .collect()
        })
        .collect();
    // One policy's lockout is the same whatever the subject's rate.
    let lockouts: Vec<_> = sets[0]
        .iter()
        .map(|p| (rng.random_range(0..3) == 0).then(|| random_lockout(rng, p.window())))
        .collect();
    let sets: Vec<Vec<Policy>> = sets
        .into_iter()
        .map(|set| {
            set.into_iter()
                .zip(&lockouts)
                .map(|(p, lockout)| match lockout {
                    Some(lockout) => p.with_lockout(lockout.clone()).expect("valid lockout"),
                    None => p,
                })
                .collect()
        })
        .collect();
    let keep = sets
        .iter()
        .flatten()
        .map(Policy::window)
        .max()
        .expect("some policy");
    sets.into_iter()
        .map(|policies| Rate {
            redis: redis
                .rate_limiter_all(policies.clone())
                .keep_logs_for(keep)
                .build()
                .expect("valid policies"),
            memory: memory
                .rate_limiter_all(policies.clone())
                .keep_logs_for(keep)
                .build()
                .expect("valid policies"),
            policies,
        })
        .collect()
}

/// Every algorithm alone, then mixed policies, each trace switching among three rates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_stores_answer_alike_across_rate_changes() {
    let redis = Fixture::redis().await;
    let memory = Fixture::memory();
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    for (a, algorithm) in ALGORITHMS.into_iter().enumerate() {
        for trace in 0..TRACES_PER_ALGORITHM {
            let rates = rates(&redis.client, &memory.client, &[algorithm], &mut rng);
            run_trace(&mut rng, seed, a * 10 + trace, &rates).await;
        }
    }
    for trace in 0..MIXED_TRACES {
        let n = rng.random_range(2..=3);
        let shapes: Vec<Algorithm> = (0..n)
            .map(|_| ALGORITHMS[rng.random_range(0..ALGORITHMS.len())])
            .collect();
        let rates = rates(&redis.client, &memory.client, &shapes, &mut rng);
        run_trace(&mut rng, seed, 100 + trace, &rates).await;
    }
}
