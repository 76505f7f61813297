//! TESTPLAN 31: rate-limit layers composed with each other and with tower middleware. Two
//! stacked layers both show in the rate-limit fields; a request waiting in the limiter holds
//! no readiness of the inner service (an inner `ConcurrencyLimitLayer(1)` still serves
//! another request meanwhile), also when one service instance is driven with `ready` and
//! `call` in a loop.

use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use distlock::ratelimit::{Policy, Rate};
use distlock_tower::client_ip::ClientIp;
use distlock_tower::extract::Header;
use distlock_tower::rate_limit::RateLimitLayer;
use http::{Request, Response, StatusCode};
use tower::limit::ConcurrencyLimitLayer;
use tower::{Service, ServiceBuilder, ServiceExt};

use crate::app::{
    FieldItem, Fixture, PEER, call, gcra_limiter, on_both_stores, parse_field, request_from,
    retry_after, routes, text,
};

on_both_stores!(
    stacked_layers_show_every_policy_that_judged_the_request,
    stacked_legacy_fields_show_the_binding_layer,
    a_request_waiting_in_the_limiter_holds_no_readiness_of_the_inner_service,
    one_instance_driven_with_ready_and_call_in_a_loop,
);

/// All lines of a list field, combined as HTTP combines them (RFC 9110 §5.3), then parsed
/// as a structured-field List.
fn list_field<B>(response: &Response<B>, name: &str) -> Vec<FieldItem> {
    let lines: Vec<&str> = response
        .headers()
        .get_all(name)
        .iter()
        .map(|v| v.to_str().expect("ASCII field"))
        .collect();
    assert!(!lines.is_empty(), "{name} is set");
    parse_field(&lines.join(", "))
}

fn names(items: &[FieldItem]) -> Vec<&str> {
    let mut names: Vec<&str> = items.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    names
}

/// `inner` allows 2 at once, `outer` 5. The outer layer judges first and counts every
/// request it lets through, including those the inner one then refuses.
async fn stacked_layers_show_every_policy_that_judged_the_request(fx: Fixture) {
    let inner = gcra_limiter(&fx, "inner", 60, 2);
    let outer = gcra_limiter(&fx, "outer", 60, 5);
    let app = routes()
        .layer(RateLimitLayer::new(inner, ClientIp::peer()))
        .layer(RateLimitLayer::new(outer, ClientIp::peer()));
    let mut seen = Vec::new();
    for i in 0..6 {
        let response = call(&app, request_from("/", PEER, &[])).await;
        let status = response.status();
        let policy = list_field(&response, "ratelimit-policy");
        let state = list_field(&response, "ratelimit");
        if status == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(retry_after(&response), 1, "request {i}");
        }
        let left: Vec<(String, i64)> = state.iter().map(|(n, p)| (n.clone(), p["r"])).collect();
        seen.push((status, names(&policy).join(" "), left.clone()));
        assert_eq!(names(&policy), names(&state), "request {i}: {left:?}");
        // The burst each policy lets go at once: both are 60/min (q=60;w=60), with their own
        // burst in `distlock-burst`.
        let burst = |name: &str| {
            policy
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, p)| (p["q"], p["w"], p["distlock-burst"]))
        };
        match i {
            // Allowed by both, then refused by the inner policy: both judged it.
            0..=4 => {
                assert_eq!(names(&policy), ["inner", "outer"], "request {i}: {seen:?}");
                assert_eq!(
                    (burst("inner"), burst("outer")),
                    (Some((60, 60, 2)), Some((60, 60, 5)))
                );
                let outer_left = state
                    .iter()
                    .find(|(n, _)| n == "outer")
                    .map(|(_, p)| p["r"]);
                assert_eq!(outer_left, Some(4 - i64::from(i)), "request {i}: {seen:?}");
                let want = if i < 2 {
                    StatusCode::OK
                } else {
                    StatusCode::TOO_MANY_REQUESTS
                };
                assert_eq!(status, want, "request {i}: {seen:?}");
            }
            // Refused by the outer policy: the inner one never saw it.
            _ => {
                assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{seen:?}");
                assert_eq!(names(&policy), ["outer"], "{seen:?}");
            }
        }
        text(response).await;
    }
}

async fn stacked_legacy_fields_show_the_binding_layer(fx: Fixture) {
    let inner = gcra_limiter(&fx, "inner", 60, 2);
    let outer = gcra_limiter(&fx, "outer", 60, 5);
    let app = routes()
        .layer(
            RateLimitLayer::builder(inner, ClientIp::peer())
                .legacy_headers(true)
                .build()
                .expect("valid settings"),
        )
        .layer(
            RateLimitLayer::builder(outer, ClientIp::peer())
                .legacy_headers(true)
                .build()
                .expect("valid settings"),
        );
    let response = call(&app, request_from("/", PEER, &[])).await;
    let one = |name: &str| {
        let values: Vec<_> = response.headers().get_all(name).iter().collect();
        assert_eq!(values.len(), 1, "{name}: {values:?}");
        values[0].to_str().expect("ASCII").to_owned()
    };
    // inner: 1 of 2 left; outer: 4 of 5 left. The inner policy binds.
    assert_eq!(one("x-ratelimit-limit"), "2");
    assert_eq!(one("x-ratelimit-remaining"), "1");
}

/// A request over its budget waits in the limiter (wait mode) while another client's request
/// goes through the same route, whose inner service admits one request at a time.
async fn a_request_waiting_in_the_limiter_holds_no_readiness_of_the_inner_service(fx: Fixture) {
    let rate = Rate::per(1, Duration::from_secs(1)).expect("valid rate");
    let limiter = fx
        .client
        .rate_limiter(Policy::gcra("queue", rate).expect("valid policy"))
        .build()
        .expect("valid limiter");
    // `with_state(())` builds each route's service once, as `into_make_service` does for a
    // served app; without it, axum layers a handler anew for every request, and each request
    // would get a concurrency limit of its own.
    let app: Router = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(
            ServiceBuilder::new()
                .layer(
                    RateLimitLayer::builder(limiter, ClientIp::peer())
                        .wait(Duration::from_secs(3))
                        .build()
                        .expect("valid settings"),
                )
                .layer(ConcurrencyLimitLayer::new(1)),
        )
        .with_state(());
    let first = call(&app, request_from("/", PEER, &[])).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(text(first).await, "ok");

    // Over budget: waits about a second in the limiter.
    let waiting = tokio::spawn({
        let app = app.clone();
        async move {
            let started = tokio::time::Instant::now();
            let response = call(&app, request_from("/", PEER, &[])).await;
            (response.status(), started.elapsed())
        }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!waiting.is_finished(), "the second request waits");

    let other = tokio::time::timeout(
        Duration::from_millis(600),
        call(&app, request_from("/", "198.51.100.1:1", &[])),
    )
    .await
    .expect("another client is served while the first waits in the limiter");
    assert_eq!(other.status(), StatusCode::OK);
    assert!(
        !waiting.is_finished(),
        "the waiting request is still waiting"
    );

    let (status, waited) = waiting.await.expect("waiting request");
    assert_eq!(status, StatusCode::OK, "served after its wait");
    assert!(waited >= Duration::from_millis(500), "waited {waited:?}");
}

/// One service instance driven the way tower's own combinators drive it (`ready().await`,
/// then `call`, in a loop, the calls running concurrently): a request waiting in the limiter
/// must not keep the next `ready()` from completing.
async fn one_instance_driven_with_ready_and_call_in_a_loop(fx: Fixture) {
    let rate = Rate::per(1, Duration::from_secs(1)).expect("valid rate");
    let limiter = fx
        .client
        .rate_limiter(Policy::gcra("loop", rate).expect("valid policy"))
        .build()
        .expect("valid limiter");
    let mut service = ServiceBuilder::new()
        .layer(
            RateLimitLayer::builder(limiter, Header::from_static("x-key"))
                .wait(Duration::from_secs(3))
                .build()
                .expect("valid settings"),
        )
        .layer(ConcurrencyLimitLayer::new(1))
        .service_fn(|request: Request<Body>| async move {
            let key = request.headers()["x-key"]
                .to_str()
                .unwrap_or("?")
                .to_owned();
            Ok::<_, Infallible>(Response::new(Body::from(key)))
        });
    let request = |key: &str| {
        Request::get("/")
            .header("x-key", key)
            .body(Body::empty())
            .expect("request")
    };
    let started = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    // `a` twice: the second waits about a second in the limiter while `b` and `c` pass.
    for key in ["a", "a", "b", "c"] {
        let ready = tokio::time::timeout(Duration::from_millis(500), service.ready())
            .await
            .unwrap_or_else(|_| panic!("`ready()` for {key} waited on another request"));
        let future = ready.expect("infallible").call(request(key));
        tasks.push(tokio::spawn(async move {
            let response = future.await.expect("infallible");
            (response.status(), started.elapsed())
        }));
    }
    let mut finished = Vec::new();
    for task in tasks {
        finished.push(task.await.expect("request task"));
    }
    assert!(
        finished.iter().all(|(s, _)| *s == StatusCode::OK),
        "{finished:?}"
    );
    // `b` and `c` did not wait behind the second `a`.
    assert!(
        finished[2].1 < finished[1].1 && finished[3].1 < finished[1].1,
        "{finished:?}"
    );
}
