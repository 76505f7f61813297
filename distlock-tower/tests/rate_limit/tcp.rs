//! The layer over real TCP: `axum::serve` with `ConnectInfo` on 127.0.0.1 and HTTP clients,
//! on both stores.

use distlock::ratelimit::{Policy, Rate};
use distlock_tower::client_ip::ClientIp;
use distlock_tower::rate_limit::RateLimitLayer;
use http::StatusCode;

use crate::app::{Fixture, http_client, on_both_stores, parse_field, routes, serve};

on_both_stores!(hundred_connections_share_one_limit);

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
