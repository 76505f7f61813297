//! A cost read from each request (issue 28 §5): charged as read, refused with `413` above the
//! layer's cap without spending anything, and a cap no policy can allow refused at build.
//! Over real TCP on both stores.

use distlock::ratelimit::{Policy, Rate};
use distlock_tower::ConfigError;
use distlock_tower::extract::Constant;
use distlock_tower::rate_limit::RateLimitLayer;
use http::StatusCode;

use crate::app::{Fixture, http_client, on_both_stores, parse_field, routes, serve};

on_both_stores!(each_request_pays_what_it_says_up_to_the_cap);

async fn each_request_pays_what_it_says_up_to_the_cap(fx: Fixture) {
    let batch_size = |head: &distlock_tower::rate_limit::RequestHead<'_>| {
        head.headers
            .get("x-batch-size")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(1)
    };
    let limiter = || {
        fx.client
            .rate_limiter(Policy::gcra("sends", Rate::per_hour(10).expect("rate")).expect("policy"))
            .build()
            .expect("limiter")
    };
    // A cap above what the policy allows at once could never pass: refused here.
    let err = RateLimitLayer::builder(limiter(), Constant::from_static("tenant"))
        .cost_by(11, batch_size)
        .build()
        .err();
    assert!(
        matches!(err, Some(ConfigError::CostTooLarge { cost: 11, .. })),
        "{err:?}"
    );

    let layer = RateLimitLayer::builder(limiter(), Constant::from_static("tenant"))
        .cost_by(5, batch_size)
        .build()
        .expect("layer");
    let (addr, _server) = serve(routes().layer(layer)).await;
    let http = http_client();
    let send = |size: Option<&'static str>| {
        let mut request = http.get(format!("http://{addr}/"));
        if let Some(size) = size {
            request = request.header("x-batch-size", size);
        }
        async move {
            let response = request.send().await.expect("request");
            let left = response
                .headers()
                .get("ratelimit")
                .map(|v| parse_field(v.to_str().expect("ASCII"))[0].1["r"]);
            (response.status(), left)
        }
    };
    assert_eq!(send(Some("4")).await, (StatusCode::OK, Some(6)));
    // Above the cap: 413 at once, nothing spent.
    assert_eq!(send(Some("6")).await.0, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(send(Some("5")).await, (StatusCode::OK, Some(1)));
    assert_eq!(
        send(Some("0")).await,
        (StatusCode::OK, Some(1)),
        "0 spends nothing"
    );
    assert_eq!(
        send(None).await,
        (StatusCode::OK, Some(0)),
        "no header costs 1"
    );
    assert_eq!(send(Some("1")).await.0, StatusCode::TOO_MANY_REQUESTS);
}
