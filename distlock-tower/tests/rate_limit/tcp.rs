//! The layer over real TCP: `axum::serve` with `ConnectInfo` on 127.0.0.1 and HTTP clients,
//! on both stores.

use std::time::Duration;

use distlock::ratelimit::{Algorithm, Lockout, Policy, Rate};
use distlock_tower::client_ip::ClientIp;
use distlock_tower::rate_limit::RateLimitLayer;
use http::StatusCode;

use crate::app::{Fixture, http_client, on_both_stores, parse_field, routes, serve};

on_both_stores!(
    hundred_connections_share_one_limit,
    policy_fields_state_the_real_rate_over_tcp,
    a_lockout_is_a_429_until_the_block_ends
);

/// TESTPLAN 21: 100 clients, each on its own connection (axum clones the service per
/// connection), all from 127.0.0.1, against a limit of 30: exactly 30 pass, and every
/// response carries parseable fields; refusals carry `Retry-After`.
async fn hundred_connections_share_one_limit(fx: Fixture) {
    let rate = Rate::per_hour(30).expect("valid");
    let limiter = fx
        .client
        .rate_limiter(Policy::gcra("per-ip", rate).expect("valid"))
        .build()
        .expect("valid limiter");
    let (addr, _server) =
        serve(routes().layer(RateLimitLayer::new(limiter, ClientIp::peer()))).await;
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let http = http_client();
            tokio::spawn(async move {
                let response = http
                    .get(format!("http://{addr}/"))
                    .send()
                    .await
                    .expect("request");
                let status = response.status();
                let field = |name: &str| {
                    response
                        .headers()
                        .get(name)
                        .map(|v| v.to_str().expect("ASCII").to_owned())
                };
                let state = parse_field(&field("ratelimit").expect("RateLimit is set"));
                parse_field(&field("ratelimit-policy").expect("RateLimit-Policy is set"));
                if status == StatusCode::TOO_MANY_REQUESTS {
                    let secs: u64 = field("retry-after")
                        .expect("Retry-After is set")
                        .parse()
                        .expect("whole seconds");
                    assert!((1..=120).contains(&secs), "Retry-After {secs}");
                }
                (status, state[0].1["r"])
            })
        })
        .collect();
    let mut passed = 0;
    let mut remaining_seen = Vec::new();
    for task in tasks {
        let (status, remaining) = task.await.expect("client task");
        match status {
            StatusCode::OK => {
                passed += 1;
                remaining_seen.push(remaining);
            }
            StatusCode::TOO_MANY_REQUESTS => assert_eq!(remaining, 0),
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(passed, 30);
    remaining_seen.sort_unstable();
    assert_eq!(
        remaining_seen,
        (0..30).collect::<Vec<i64>>(),
        "one shared count"
    );
}

/// Issue 28 §1 over TCP: a fast or sub-second policy advertises its real rate, with its burst
/// apart, for each algorithm; one per route of one layer.
async fn policy_fields_state_the_real_rate_over_tcp(fx: Fixture) {
    let limiter = |algorithm, rate: Rate| {
        fx.client
            .rate_limiter(Policy::new("p", algorithm, rate).expect("valid policy"))
            .build()
            .expect("valid limiter")
    };
    let per = |count, ms| Rate::per(count, Duration::from_millis(ms)).expect("valid rate");
    let fast = per(100, 1000).burst(1).expect("valid burst");
    let layer = RateLimitLayer::builder(limiter(Algorithm::Gcra, fast), ClientIp::peer())
        .route("/a", limiter(Algorithm::FixedWindow, per(5, 100)))
        .route("/b", limiter(Algorithm::SlidingWindow, per(10, 1500)))
        .route("/items/{id}", limiter(Algorithm::TokenBucket, per(1, 333)))
        .build()
        .expect("valid settings");
    let (addr, _server) = serve(routes().layer(layer)).await;
    let http = http_client();
    // `t`: back to full within a second, but the sliding window, whose request counts until
    // it has slid out of the previous window (two periods, 3 s).
    for (path, q, w, burst, full_within) in [
        ("/", 100, 1, 1, 1),
        ("/a", 50, 1, 5, 1),
        ("/b", 20, 3, 10, 3),
        ("/items/1", 3, 1, 1, 1),
    ] {
        let response = http
            .get(format!("http://{addr}{path}"))
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let field = |name: &str| {
            parse_field(
                response
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_else(|| panic!("{path}: {name} is set")),
            )
        };
        let (policy, state) = (field("ratelimit-policy"), field("ratelimit"));
        let params = &policy[0].1;
        assert_eq!(
            (params["q"], params["w"], params["distlock-burst"]),
            (q, w, burst),
            "{path}: {policy:?}"
        );
        assert_eq!(state[0].1["r"], burst - 1, "{path}: {state:?}");
        let t = state[0].1["t"];
        assert!((1..=full_within).contains(&t), "{path}: t={t}");
    }
}

/// Issue 28 §2 over TCP: a login route of 2 per minute that locks a client out for an hour
/// once it tries a third time: the breach and every request after it are `429` with
/// `Retry-After` the block's end (an hour, counting down), and `RateLimit` says nothing is
/// left until then.
async fn a_lockout_is_a_429_until_the_block_ends(fx: Fixture) {
    let hour = Duration::from_secs(3600);
    let login = Policy::sliding_log("login", Rate::per_minute(2).expect("valid"))
        .expect("valid")
        .with_lockout(Lockout::after_breach([hour, 24 * hour]))
        .expect("valid lockout");
    let limiter = fx
        .client
        .rate_limiter(login)
        .build()
        .expect("valid limiter");
    let (addr, _server) =
        serve(routes().layer(RateLimitLayer::new(limiter, ClientIp::peer()))).await;
    let http = http_client();
    let mut answers = Vec::new();
    for _ in 0..5 {
        let response = http
            .get(format!("http://{addr}/"))
            .send()
            .await
            .expect("request");
        let field = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|v| v.to_str().expect("ASCII").to_owned())
        };
        let retry_after: Option<u64> = field("retry-after").map(|v| v.parse().expect("seconds"));
        let state = parse_field(&field("ratelimit").expect("RateLimit is set"));
        answers.push((
            response.status(),
            retry_after,
            state[0].1["r"],
            state[0].1["t"],
        ));
    }
    let too_many = StatusCode::TOO_MANY_REQUESTS;
    assert_eq!(answers[0].0, StatusCode::OK, "{answers:?}");
    assert_eq!(answers[1].0, StatusCode::OK, "{answers:?}");
    // The breach: blocked for exactly the hour from the store's decision.
    assert_eq!(answers[2], (too_many, Some(3600), 0, 3600), "{answers:?}");
    for &(status, retry_after, remaining, reset) in &answers[3..] {
        assert_eq!((status, remaining), (too_many, 0), "{answers:?}");
        let secs = retry_after.expect("Retry-After is set");
        assert!((3599..=3600).contains(&secs), "{answers:?}");
        assert_eq!(reset, i64::try_from(secs).expect("fits"), "{answers:?}");
    }
}
