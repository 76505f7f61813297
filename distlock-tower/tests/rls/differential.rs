//! The service answers a configured descriptor decision for decision as the in-process
//! limiter with the same policy: random traces of descriptors and hits over every algorithm,
//! the service on one prefix of a Redis server, in-process limiters built from the same
//! parsed policies on another.

use distlock::Client;
use distlock::ratelimit::RateLimiter;
use distlock_tower::rls::{Bound, RateLimitServer, RlsConfig, Settings};
use envoy_types::pb::google::protobuf::UInt64Value;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{ask, descriptor, ok, serve};
use crate::support::RedisServer;

/// Day-long windows and slow refills, so that the two answers to one step, a few
/// milliseconds apart, cannot straddle a window's end or a refill.
const CONFIG: &str = r#"
domain: diff
descriptors:
  - key: fixed
    rate_limit: { unit: day, requests_per_unit: 7 }
  - key: gcra
    rate_limit: { unit: day, requests_per_unit: 50 }
    distlock: { algorithm: gcra, burst: 6 }
  - key: bucket
    rate_limit: { unit: day, requests_per_unit: 40 }
    distlock: { algorithm: token_bucket, burst: 5 }
  - key: sliding
    rate_limit: { unit: day, requests_per_unit: 8 }
    distlock: { algorithm: sliding_window }
  - key: log
    rate_limit: { unit: day, requests_per_unit: 6 }
    distlock: { algorithm: sliding_log }
  - key: two
    rate_limit: { unit: day, requests_per_unit: 9 }
    distlock: { extra_limits: [{ unit: week, requests_per_unit: 5 }] }
  - key: either
    rate_limit: { unit: day, requests_per_unit: 2 }
    distlock: { extra_limits: [{ unit: week, requests_per_unit: 3 }], any_of: true }
"#;

const KEYS: [&str; 7] = ["fixed", "gcra", "bucket", "sliding", "log", "two", "either"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_decides_as_the_in_process_limiter() {
    let redis = RedisServer::start();
    let connect = |prefix: &'static str| {
        let url = redis.url();
        async move {
            Client::builder()
                .prefix(prefix)
                .connect(&url)
                .await
                .expect("connect")
        }
    };
    let config = RlsConfig::from_texts([("diff.yaml", CONFIG)]).expect("valid");
    // The twins: the same policies, in process, on another prefix.
    let local = connect("twin").await;
    let mut twins: Vec<(String, RateLimiter)> = Vec::new();
    for limit in config.limits() {
        let Bound::Policies { policies, any_of } = &limit.bound else {
            panic!("every limit counts");
        };
        let builder = if *any_of {
            local.rate_limiter_any(policies.clone())
        } else {
            local.rate_limiter_all(policies.clone())
        };
        let key = limit.full_key.trim_start_matches("diff.").to_owned();
        twins.push((key, builder.build().expect("limiter")));
    }
    let server =
        RateLimitServer::new(connect("rls").await, config, Settings::default()).expect("server");
    let served = serve(server).await;
    let mut c = served.client.clone();

    let seed: u64 = rand::random();
    eprintln!("differential trace seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut compared = 0;
    for step in 0..400 {
        let key = KEYS[rng.random_range(0..KEYS.len())];
        let value = format!("s{}", rng.random_range(0..3));
        let hits: u32 = rng.random_range(1..=3);
        let mut d = descriptor(&[(key, &value)]);
        d.hits_addend = Some(UInt64Value {
            value: u64::from(hits),
        });
        let answer = ask(&mut c, "diff", vec![d], 0).await.expect("answer");
        let twin = &twins.iter().find(|(k, _)| k == key).expect("twin").1;
        let subject = format!("{key}_{value}");
        let decision = twin.check_n(&subject, hits).await;
        let (allowed, remaining) = match decision {
            Ok(d) => (d.allowed, u32::try_from(d.remaining).expect("small")),
            // More than the policy ever allows at once: the service answers OVER_LIMIT.
            Err(distlock::RateLimitError::CostTooLarge { .. }) => (false, 0),
            Err(err) => panic!("step {step}: {err}"),
        };
        assert_eq!(
            ok(&answer),
            allowed,
            "step {step} (seed {seed}): {key}={value} x{hits}: service {answer:?}"
        );
        if allowed {
            assert_eq!(
                answer.statuses[0].limit_remaining, remaining,
                "step {step} (seed {seed}): {key}={value} x{hits}"
            );
        }
        compared += 1;
    }
    assert_eq!(compared, 400);
}
