//! The console is closed to strangers (TESTPLAN 56): without an authorize hook every route
//! answers `403`; a cross-site `POST` is refused whatever the hook says; concurrent listings
//! share one scan; idempotency claims never appear in a listing.

use std::sync::Arc;
use std::time::Duration;

use distlock::idempotency::{Begin, Scope};
use distlock::ratelimit::{Policy, Rate};
use distlock_tower::console::{Action, Console};
use http::StatusCode;
use serde_json::Value;

use crate::mounted::{app, body_of, send};
use crate::support::RedisServer;
use crate::support::fixture::{Fixture, connect, on_both_stores};

on_both_stores!(
    without_a_hook_every_route_is_forbidden,
    public_reads_is_a_choice_made_by_name,
    a_cross_site_post_is_refused_whatever_the_hook_says,
    idempotency_claims_never_appear_in_a_listing,
);

fn limiter(client: &distlock::Client) -> distlock::ratelimit::RateLimiter {
    client
        .rate_limiter(Policy::gcra("login", Rate::per_second(5).expect("rate")).expect("policy"))
        .build()
        .expect("limiter")
}

/// Lock `orders/42`, held by the fixture's client: what a stranger must not see or force.
async fn hold_order_42(fx: &Fixture) -> distlock::Lease {
    fx.client
        .lock("orders/42")
        .acquire()
        .await
        .expect("acquire")
}

/// Every route a stranger could try, reads first.
const EVERY_ROUTE: [(&str, &str); 8] = [
    ("GET", ""),
    ("GET", "/console.js"),
    ("GET", "/api/overview"),
    ("GET", "/api/locks"),
    ("GET", "/api/locks/orders%2F42"),
    ("GET", "/api/rate-limits/login/user-7"),
    ("POST", "/api/locks/orders%2F42/force-unlock"),
    ("POST", "/api/rate-limits/login/user-7/reset"),
];

async fn without_a_hook_every_route_is_forbidden(fx: Fixture) {
    let lease = fx
        .client
        .lock("orders/42")
        .identity("host-a/pid-7")
        .acquire()
        .await
        .expect("acquire");
    let console = Console::new(fx.client.clone())
        .rate_limiter("login", limiter(&fx.client))
        .expect("a unique name");
    let app = app(console);
    for (method, path) in EVERY_ROUTE {
        let response = send(&app, method, path, &[("x-distlock-console", "1")]).await;
        let status = response.status();
        let body = body_of(response).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {body}");
        assert!(
            !body.contains("orders") && !body.contains("host-a"),
            "{method} {path} tells a stranger something: {body}"
        );
    }
    assert!(!lease.is_lost(), "nothing was forced");
}

async fn public_reads_is_a_choice_made_by_name(fx: Fixture) {
    let _lease = hold_order_42(&fx).await;
    let app = app(Console::new(fx.client.clone()).public_reads());
    let listing = send(&app, "GET", "/api/locks", &[]).await;
    assert_eq!(listing.status(), StatusCode::OK);
    assert!(body_of(listing).await.contains("orders/42"));
    // Reads only: a mutation still needs a hook.
    let forced = send(
        &app,
        "POST",
        "/api/locks/orders%2F42/force-unlock",
        &[("x-distlock-console", "1")],
    )
    .await;
    assert_eq!(forced.status(), StatusCode::FORBIDDEN);
}

async fn a_cross_site_post_is_refused_whatever_the_hook_says(fx: Fixture) {
    let lease = hold_order_42(&fx).await;
    let app = app(Console::new(fx.client.clone()).authorize(|_, _| true));
    let path = "/api/locks/orders%2F42/force-unlock";
    let marked = ("x-distlock-console", "1");
    for headers in [
        vec![marked, ("origin", "https://evil.example")],
        vec![marked, ("sec-fetch-site", "cross-site")],
        vec![marked, ("sec-fetch-site", "same-site")],
        vec![
            marked,
            ("host", "ops.example"),
            ("origin", "https://ops.example.evil.example"),
        ],
    ] {
        let response = send(&app, "POST", path, &headers).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{headers:?}");
        assert!(!lease.is_lost(), "forced by {headers:?}");
    }
    // The page's own request (same origin) goes through.
    let response = send(
        &app,
        "POST",
        path,
        &[
            marked,
            ("host", "ops.example"),
            ("origin", "https://ops.example"),
            ("sec-fetch-site", "same-origin"),
        ],
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = serde_json::from_str(&body_of(response).await).expect("JSON");
    assert_eq!(body["forced"], true);
}

async fn idempotency_claims_never_appear_in_a_listing(fx: Fixture) {
    let keys = fx.client.idempotency("payments").expect("namespace");
    let Begin::Run(_claim) = keys
        .begin(Scope::caller("acct-1"), "secret-key-123", b"fp")
        .await
        .expect("begin")
    else {
        panic!("a new key runs");
    };
    let _lease = hold_order_42(&fx).await;
    let app = app(Console::new(fx.client.clone()).authorize(|_, _| true));
    let listing = body_of(send(&app, "GET", "/api/locks", &[]).await).await;
    assert!(listing.contains("orders/42"), "{listing}");
    assert!(
        !listing.contains("idempotency") && !listing.contains("secret-key-123"),
        "{listing}"
    );
}

/// `SCAN` calls the server has answered so far.
async fn scan_calls(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    crate::support::server::command_calls(conn, "scan").await
}

/// 20 held locks among 20,000 other keys: one listing costs some `SCAN` calls; 50 concurrent
/// listings on a fresh console cost no more than that one did (one scan in flight, its
/// result shared).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_listings_cost_one_scan() {
    let server = RedisServer::start();
    let client = connect(&server.url()).await;
    let mut conn = server.conn().await;
    for chunk in 0..20 {
        let mut pipe = redis::pipe();
        for i in 0..1000 {
            pipe.set(format!("other:{chunk}:{i}"), 1).ignore();
        }
        let () = pipe.query_async(&mut conn).await.expect("fill");
    }
    let mut leases = Vec::new();
    for i in 0..20 {
        leases.push(
            client
                .lock(format!("job-{i}"))
                .ttl(Duration::from_secs(60))
                .acquire()
                .await
                .expect("acquire"),
        );
    }
    let allow = |_: &http::request::Parts, _: Action| true;

    let before = scan_calls(&mut conn).await;
    let one = app(Console::new(client.clone()).authorize(allow));
    let listing = body_of(send(&one, "GET", "/api/locks", &[]).await).await;
    assert_eq!(listing.matches("\"job-").count(), 20, "{listing}");
    let for_one = scan_calls(&mut conn).await - before;
    assert!(for_one > 1, "a listing among 20,000 keys scans: {for_one}");

    let fresh = app(Console::new(client.clone()).authorize(allow));
    let before = scan_calls(&mut conn).await;
    let barrier = Arc::new(tokio::sync::Barrier::new(50));
    let listings: Vec<_> = (0..50)
        .map(|_| {
            let (app, barrier) = (fresh.clone(), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                let response = send(&app, "GET", "/api/locks", &[]).await;
                assert_eq!(response.status(), StatusCode::OK);
                body_of(response).await
            })
        })
        .collect();
    for listing in listings {
        let listing = listing.await.expect("task");
        assert_eq!(listing.matches("\"job-").count(), 20, "{listing}");
    }
    let for_fifty = scan_calls(&mut conn).await - before;
    assert!(
        for_fifty <= for_one,
        "50 concurrent listings made {for_fifty} SCAN calls, one listing {for_one}"
    );
}
