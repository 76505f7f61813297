//! Store faults through the layer (Redis only): fail closed answers 503 with `Retry-After`
//! within the limiter's deadline; fail open passes without rate-limit fields.

use std::time::Duration;

use distlock::Client;
use distlock::ratelimit::{Origin, Outage, Policy, Rate};
use distlock_tower::client_ip::ClientIp;
use distlock_tower::rate_limit::{Checks, RateLimitLayer};
use distlock_tower::refusal::{ProblemDetails, Reason, Refusal};
use http::{Response, StatusCode};
use tokio::time::Instant;

use crate::app::{call, header, request_from, retry_after, routes, text};
use crate::support::lateness::LatenessProbe;
use crate::support::{Proxy, RedisServer};

const DEADLINE: Duration = Duration::from_millis(150);
/// Allowed on top of the deadline for the work around it (the request through the layer,
/// the response), besides how late this runtime ran its timers meanwhile: the deadline is a
/// timer, kept to within that lateness (the README's limits).
const SLACK: Duration = Duration::from_millis(150);

async fn client_via(proxy: &Proxy) -> Client {
    Client::builder()
        .response_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(300))
        .reconnect_retries(1)
        .connect(&proxy.url())
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_trouble_becomes_the_outage_policys_response() {
    let mut server = RedisServer::start();
    let proxy = Proxy::start(server.addr()).await;
    let client = client_via(&proxy).await;
    let policy = Policy::gcra("api", Rate::per_minute(60).expect("valid")).expect("valid");
    let closed = routes().layer(RateLimitLayer::new(
        client
            .rate_limiter(policy.clone())
            .deadline(DEADLINE)
            .build()
            .expect("valid limiter"),
        ClientIp::peer(),
    ));
    let open = routes().layer(RateLimitLayer::new(
        client
            .rate_limiter(policy)
            .deadline(DEADLINE)
            .on_outage(Outage::FailOpen)
            .build()
            .expect("valid limiter"),
        ClientIp::peer(),
    ));
    let peer = "192.0.2.1:1";
    assert_eq!(
        call(&closed, request_from("/", peer, &[])).await.status(),
        StatusCode::OK
    );

    let probe = LatenessProbe::start();
    for fault in ["slow", "killed"] {
        if fault == "slow" {
            proxy.delay(Duration::from_secs(1));
        } else {
            proxy.pass();
            server.kill();
        }
        let mark = probe.mark();
        let start = Instant::now();
        let response = call(&closed, request_from("/", peer, &[])).await;
        let took = start.elapsed();
        let late = probe.since(mark);
        assert_eq!(
            response.status(),
            StatusCode::SERVICE_UNAVAILABLE,
            "{fault}"
        );
        assert_eq!(retry_after(&response), 1);
        assert!(
            took <= DEADLINE + SLACK + late,
            "{fault}: 503 after {took:?} (timers {late:?} late meanwhile)"
        );

        let mark = probe.mark();
        let start = Instant::now();
        let response = call(&open, request_from("/", peer, &[])).await;
        let took = start.elapsed();
        let late = probe.since(mark);
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "{fault}: fail open passes"
        );
        assert!(header(&response, "ratelimit").is_none(), "{fault}");
        assert!(
            took <= DEADLINE + SLACK + late,
            "{fault}: passed after {took:?} (timers {late:?} late meanwhile)"
        );
    }
}

/// With the store down: a hook answers the `503` (the layer adds `Retry-After: 1`), a problem
/// document parses, and a fail-open pass says so in its check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_trouble_through_a_hook_and_in_the_checks() {
    let mut server = RedisServer::start();
    let proxy = Proxy::start(server.addr()).await;
    let client = client_via(&proxy).await;
    let policy = Policy::gcra("api", Rate::per_minute(60).expect("valid")).expect("valid");
    let limiter_with = |outage: Outage| {
        client
            .rate_limiter(policy.clone())
            .deadline(DEADLINE)
            .on_outage(outage)
            .build()
            .expect("valid limiter")
    };
    let limiter = || limiter_with(Outage::default());
    let hook = |refusal: &Refusal| {
        let mut response = Response::new(format!("down: {}", refusal.reason()));
        *response.status_mut() = refusal.status();
        response
    };
    let hooked = routes().layer(
        RateLimitLayer::builder(limiter(), ClientIp::peer())
            .refusal(hook)
            .build()
            .expect("valid settings"),
    );
    let problem = routes().layer(
        RateLimitLayer::builder(limiter(), ClientIp::peer())
            .refusal(ProblemDetails::new())
            .build()
            .expect("valid settings"),
    );
    let open = routes().layer(RateLimitLayer::new(
        limiter_with(Outage::FailOpen),
        ClientIp::peer(),
    ));
    let peer = "192.0.2.1:1";
    let ok = call(&open, request_from("/", peer, &[])).await;
    let origin = |response: &http::Response<_>| {
        response
            .extensions()
            .get::<Checks>()
            .and_then(Checks::binding)
            .map(|c| c.decision.origin)
    };
    assert_eq!(origin(&ok), Some(Origin::Store));

    server.kill();
    let response = call(&hooked, request_from("/", peer, &[])).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry_after(&response), 1, "added by the layer");
    let why = response.extensions().get::<Refusal>().expect("refusal");
    assert_eq!(why.reason(), &Reason::StoreUnavailable);
    assert!(why.error().is_some());
    assert_eq!(text(response).await, "down: store-unavailable");

    let response = call(&problem, request_from("/", peer, &[])).await;
    assert_eq!(
        header(&response, "content-type"),
        Some("application/problem+json")
    );
    let json: serde_json::Value = serde_json::from_str(&text(response).await).expect("JSON");
    assert_eq!(json["status"], 503);
    assert_eq!(json["title"], "Service Unavailable");
    assert_eq!(json["retry_after"], 1);

    let passed = call(&open, request_from("/", peer, &[])).await;
    assert_eq!(passed.status(), StatusCode::OK);
    assert_eq!(
        origin(&passed),
        Some(Origin::FailOpen),
        "the outage policy decided"
    );
}

/// While the store is down, what the layers write at `WARN` on every request names no
/// subject and no idempotency key: they can be API keys or bearer secrets, and logs travel
/// further than the store does (TESTPLAN 57). The lines are there, redacted.
#[tokio::test(flavor = "current_thread")]
async fn a_store_outage_logs_no_subject_and_no_key() {
    use axum::Router;
    use axum::body::Body;
    use axum::routing::post;
    use distlock_tower::IdempotencyLayer;
    use distlock_tower::extract::Header;
    use http::Request;
    use tower::ServiceExt;

    let mut server = RedisServer::start();
    let client = Client::builder()
        .response_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(200))
        .reconnect_retries(0)
        .connect(&server.url())
        .await
        .expect("connect");
    let limiter = client
        .rate_limiter(Policy::gcra("api", Rate::per_minute(60).expect("valid")).expect("valid"))
        .deadline(DEADLINE)
        .build()
        .expect("valid limiter");
    let limited = routes().layer(RateLimitLayer::new(
        limiter,
        Header::from_static("x-api-key"),
    ));
    let idempotent = Router::new()
        .route("/pay", post(|| async { "paid" }))
        .layer(
            IdempotencyLayer::builder(client.clone(), "outage")
                .scope(Header::from_static("x-account"))
                .build()
                .expect("valid settings"),
        );
    server.kill();

    let capture = crate::traces::Capture::start(tracing::Level::WARN);
    for _ in 0..3 {
        let request = Request::get("/")
            .header("x-api-key", "sk_live_SUBJECT_SECRET")
            .body(Body::empty())
            .expect("request");
        let response = limited.clone().oneshot(request).await.expect("infallible");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        let request = Request::post("/pay")
            .header("x-account", "acct-9")
            .header("idempotency-key", "KEY_SECRET_0001")
            .body(Body::from("10 EUR"))
            .expect("request");
        let response = idempotent
            .clone()
            .oneshot(request)
            .await
            .expect("infallible");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    let logged = capture.text();
    assert!(logged.contains("WARN"), "the outage is logged: {logged:?}");
    assert!(logged.contains("idempotency store unavailable"), "{logged}");
    for secret in ["sk_live_SUBJECT_SECRET", "KEY_SECRET_0001", "acct-9"] {
        assert!(!logged.contains(secret), "{secret} in {logged}");
    }
}
