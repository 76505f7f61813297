//! The console's JSON API and page routes, through `oneshot`, on Redis and in memory.

use std::time::Duration;

use axum::Router;
use distlock::ratelimit::{Policy, Rate};
use distlock::{Lease, LockState};
use distlock_tower::console::{Action, Console};
use http::StatusCode;
use serde_json::Value;

use crate::mounted::{MOUNT, app, body_of, send};
use crate::support::fixture::{Fixture, on_both_stores};

on_both_stores!(
    it_lists_a_hierarchy_levels_holders,
    with_public_reads_it_lists_and_reads_but_changes_nothing,
    with_a_hook_it_forces_a_lock_and_resets_a_subject,
    a_refusing_hook_refuses_reads_too,
);

/// A lock name that needs encoding in a path and in a key.
const AWKWARD: &str = "orders/{42} 100%";

/// `method path` answered `status` with a JSON body, which it returns.
async fn json(
    app: &Router,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    status: StatusCode,
) -> Value {
    let response = send(app, method, path, headers).await;
    let got = response.status();
    let text = body_of(response).await;
    assert_eq!(got, status, "{method} {path}: {text}");
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text}"))
}

fn encoded(name: &str) -> String {
    percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// A lease on `name` held by another client of the store, named `identity`.
async fn held_elsewhere(fx: &Fixture, name: &str, identity: &str) -> Lease {
    fx.another_client()
        .await
        .lock(name)
        .identity(identity)
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire")
}

async fn with_public_reads_it_lists_and_reads_but_changes_nothing(fx: Fixture) {
    let _lease = held_elsewhere(&fx, AWKWARD, "api-holder").await;
    let app = app(Console::new(fx.client.clone()).public_reads());

    let listing = json(&app, "GET", "/api/locks", &[], StatusCode::OK).await;
    assert_eq!(listing["complete"], true);
    let locks = listing["locks"].as_array().expect("a list");
    assert_eq!(locks.len(), 1, "{listing}");
    let lock = &locks[0];
    assert_eq!(lock["name"], AWKWARD);
    assert_eq!(lock["state"], "held");
    assert_eq!(lock["holder"], "api-holder");
    let ttl = lock["remaining_ttl_ms"].as_u64().expect("ms");
    assert!(ttl > 0 && ttl <= 30_000, "{lock}");
    let since = lock["since_ms"].as_u64().expect("unix ms");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64;
    assert!(
        since <= now && now - since < 600_000,
        "since {since}, now {now}"
    );

    let one = json(
        &app,
        "GET",
        &format!("/api/locks/{}", encoded(AWKWARD)),
        &[],
        StatusCode::OK,
    )
    .await;
    assert_eq!(one["holder"], "api-holder");
    assert_eq!(one["fair_queue"], 0, "nobody waits fairly: {one}");
    // A fair waiter behind a fair holder is counted.
    let fair_holder = fx
        .client
        .lock("fair-row")
        .fair()
        .acquire()
        .await
        .expect("fair holder");
    let waiter = tokio::spawn({
        let client = fx.client.clone();
        async move {
            client
                .lock("fair-row")
                .fair()
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        }
    });
    let queued_by = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let row = json(&app, "GET", "/api/locks/fair-row", &[], StatusCode::OK).await;
        if row["fair_queue"] == 1 {
            break;
        }
        assert!(std::time::Instant::now() < queued_by, "never queued: {row}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    fair_holder.release().await.expect("release");
    waiter
        .await
        .expect("task")
        .expect("the waiter is granted")
        .release()
        .await
        .expect("release");
    let free = json(
        &app,
        "GET",
        "/api/locks/nobody-holds-this",
        &[],
        StatusCode::OK,
    )
    .await;
    assert_eq!(free["state"], "free");
    assert_eq!(free["holder"], Value::Null);

    for bad in ["0", "1001", "many", "-1"] {
        json(
            &app,
            "GET",
            &format!("/api/locks?limit={bad}"),
            &[],
            StatusCode::BAD_REQUEST,
        )
        .await;
    }

    // No hook, no mutations: even with the console's header.
    let refused = json(
        &app,
        "POST",
        &format!("/api/locks/{}/force-unlock", encoded(AWKWARD)),
        &[("x-distlock-console", "1")],
        StatusCode::FORBIDDEN,
    )
    .await;
    assert!(
        refused["detail"]
            .as_str()
            .expect("detail")
            .contains("changes nothing"),
        "{refused}"
    );
    assert!(
        matches!(
            fx.client.lock_state(AWKWARD).await.expect("state"),
            LockState::Held { .. }
        ),
        "still held"
    );

    let overview = json(&app, "GET", "/api/overview", &[], StatusCode::OK).await;
    assert_eq!(overview["mutations"], false);
    assert_eq!(overview["health"]["ready"], true);
    assert_eq!(overview["health"]["store"], fx.client.store_kind().as_str());
    assert_eq!(overview["identity"], fx.client.identity());
    assert_eq!(overview["limiters"], Value::Array(Vec::new()));

    // The page points at its script and style under the path it was asked for.
    let page = send(&app, "GET", "", &[]).await;
    assert_eq!(page.status(), StatusCode::OK);
    let csp = page
        .headers()
        .get("content-security-policy")
        .expect("a CSP")
        .to_str()
        .expect("ASCII")
        .to_owned();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    let html = body_of(page).await;
    assert!(
        html.contains(&format!("src=\"{MOUNT}/console.js\"")),
        "{html}"
    );
    assert!(
        html.contains(&format!("href=\"{MOUNT}/console.css\"")),
        "{html}"
    );
    let script = send(&app, "GET", "/console.js", &[]).await;
    assert_eq!(script.status(), StatusCode::OK);
    assert_eq!(script.headers()["content-type"], "text/javascript");
}

async fn with_a_hook_it_forces_a_lock_and_resets_a_subject(fx: Fixture) {
    let lease = held_elsewhere(&fx, AWKWARD, "api-holder").await;
    let logins = fx
        .client
        .rate_limiter(Policy::gcra("login", Rate::per_minute(3).expect("rate")).expect("policy"))
        .build()
        .expect("limiter");
    let console = Console::new(fx.client.clone())
        .rate_limiter("login", logins.clone())
        .expect("a unique name")
        .authorize(|request, action| {
            !action.is_mutation()
                || request
                    .headers
                    .get("authorization")
                    .is_some_and(|v| v.as_bytes() == b"Bearer t0ken")
        });
    let app = app(console);
    let force = format!("/api/locks/{}/force-unlock", encoded(AWKWARD));
    const MARKED: (&str, &str) = ("x-distlock-console", "1");
    const TOKEN: (&str, &str) = ("authorization", "Bearer t0ken");

    // The header a cross-site form cannot send, then the hook's token: both needed.
    let no_header = json(&app, "POST", &force, &[TOKEN], StatusCode::FORBIDDEN).await;
    assert!(
        no_header["detail"]
            .as_str()
            .expect("detail")
            .contains("X-Distlock-Console")
    );
    json(&app, "POST", &force, &[MARKED], StatusCode::FORBIDDEN).await;
    json(
        &app,
        "POST",
        &force,
        &[MARKED, ("authorization", "Bearer wrong")],
        StatusCode::FORBIDDEN,
    )
    .await;
    assert!(matches!(
        fx.client.lock_state(AWKWARD).await.expect("state"),
        LockState::Held { .. }
    ));

    let forced = json(&app, "POST", &force, &[MARKED, TOKEN], StatusCode::OK).await;
    assert_eq!(forced["forced"], true);
    assert_eq!(
        fx.client.lock_state(AWKWARD).await.expect("state"),
        LockState::Free
    );
    tokio::time::timeout(Duration::from_secs(15), lease.handle().lost())
        .await
        .expect("the forced holder is told within a renewal");
    let again = json(&app, "POST", &force, &[MARKED, TOKEN], StatusCode::OK).await;
    assert_eq!(again["forced"], false);
    let listing = json(&app, "GET", "/api/locks", &[], StatusCode::OK).await;
    assert_eq!(listing["locks"], Value::Array(Vec::new()));

    // A subject's state, then its reset.
    for _ in 0..3 {
        assert!(logins.check("user:7").await.expect("check").allowed);
    }
    let subject = "/api/rate-limits/login/user%3A7";
    let spent = json(&app, "GET", subject, &[], StatusCode::OK).await;
    assert_eq!(spent["subject"], "user:7");
    assert_eq!(spent["allowed"], false);
    assert_eq!(spent["remaining"], 0);
    assert_eq!(spent["limit"], 3);
    assert!(spent["retry_after_ms"].as_u64().expect("ms") > 0);
    assert_eq!(spent["policies"][0]["policy"], "login");
    // Looking consumed nothing; resetting needs the same as forcing.
    assert!(!logins.peek("user:7").await.expect("peek").allowed);
    json(
        &app,
        "POST",
        &format!("{subject}/reset"),
        &[MARKED],
        StatusCode::FORBIDDEN,
    )
    .await;
    let reset = json(
        &app,
        "POST",
        &format!("{subject}/reset"),
        &[MARKED, TOKEN],
        StatusCode::OK,
    )
    .await;
    assert_eq!(reset["allowed"], true);
    assert_eq!(reset["remaining"], 3);
    assert!(logins.check("user:7").await.expect("check").allowed);
    json(
        &app,
        "GET",
        "/api/rate-limits/nope/user%3A7",
        &[],
        StatusCode::NOT_FOUND,
    )
    .await;

    let overview = json(&app, "GET", "/api/overview", &[], StatusCode::OK).await;
    assert_eq!(overview["mutations"], true);
    assert_eq!(overview["limiters"][0]["name"], "login");
    // Every limiter has a breaker unless built without one; nothing failed, so closed.
    assert_eq!(overview["limiters"][0]["breaker"], "closed");
    assert_eq!(overview["limiters"][0]["shadow"], false);
}

async fn a_refusing_hook_refuses_reads_too(fx: Fixture) {
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = asked.clone();
    let app = app(Console::new(fx.client.clone()).authorize(move |_, action| {
        seen.lock().expect("not poisoned").push(action);
        false
    }));
    for path in ["", "/api/locks", "/api/overview", "/api/locks/a"] {
        let response = send(&app, "GET", path, &[]).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "GET {path}");
    }
    json(
        &app,
        "POST",
        "/api/locks/a/force-unlock",
        &[("x-distlock-console", "1")],
        StatusCode::FORBIDDEN,
    )
    .await;
    let asked = asked.lock().expect("not poisoned").clone();
    assert_eq!(
        asked,
        [
            Action::Page,
            Action::Read,
            Action::Read,
            Action::Read,
            Action::ForceUnlock
        ]
    );
}

#[test]
fn limiter_names_are_checked() {
    let client = distlock::Client::in_memory();
    let limiter = || {
        client
            .rate_limiter(Policy::gcra("p", Rate::per_second(1).expect("rate")).expect("policy"))
            .build()
            .expect("limiter")
    };
    for bad in ["", "a b", "x/y", &"n".repeat(65)] {
        let err = Console::new(client.clone())
            .rate_limiter(bad, limiter())
            .expect_err(bad);
        assert_eq!(err.name, bad);
    }
    let twice = Console::new(client.clone())
        .rate_limiter("login", limiter())
        .expect("first")
        .rate_limiter("login", limiter());
    assert!(twice.is_err());
    assert!(
        Console::new(client.clone())
            .rate_limiter("login.v2-eu_1", limiter())
            .is_ok()
    );
}

/// A hierarchy level's holders, with their modes: a row's holder is IX on the table, a
/// table reader S; a bad path is a 4xx, not a panic.
async fn it_lists_a_hierarchy_levels_holders(fx: Fixture) {
    let other = fx.another_client().await;
    let _row = other
        .hierarchy_lock("db/orders/42")
        .identity("row-holder")
        .exclusive()
        .await
        .expect("row");
    let _readers = other
        .hierarchy_lock("db/orders")
        .identity("table-reader")
        .intent_shared()
        .await
        .expect("table IS");
    let app = app(Console::new(fx.client.clone()).public_reads());
    let level = json(
        &app,
        "GET",
        &format!("/api/hierarchy/{}", encoded("db/orders")),
        &[],
        StatusCode::OK,
    )
    .await;
    assert_eq!(level["path"], "db/orders");
    let holders = level["holders"].as_array().expect("a list");
    let modes: Vec<(&str, &str)> = holders
        .iter()
        .map(|h| {
            (
                h["mode"].as_str().expect("mode"),
                h["holder"].as_str().expect("holder"),
            )
        })
        .collect();
    assert_eq!(
        modes,
        [("IS", "table-reader"), ("IX", "row-holder")],
        "{level}"
    );
    let bad = send(
        &app,
        "GET",
        &format!("/api/hierarchy/{}", encoded("a//b")),
        &[],
    )
    .await;
    assert!(bad.status().is_client_error(), "{}", bad.status());
}
