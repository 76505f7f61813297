//! The router on the in-memory store, driven in process with `ServiceExt::oneshot`.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response, StatusCode};
use distlock_example_ticket_shop::job::{self, Schedule};
use distlock_example_ticket_shop::store::{Fenced, JobRun, Log, Sale};
use distlock_example_ticket_shop::{AppState, Settings, app};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

fn state(seats: u32) -> AppState {
    let mut settings = Settings::new(seats, "test");
    settings.reindex_time = Duration::from_millis(300);
    settings.job_work_time = Duration::from_millis(20);
    AppState::in_memory(settings).expect("valid policies")
}

/// A request from `peer`, as `into_make_service_with_connect_info` would deliver it.
fn request(method: &str, uri: &str, peer: &str, body: Option<Value>) -> Request<Body> {
    let builder = Request::builder().method(method).uri(uri);
    let mut request = match body {
        Some(json) => builder
            .header("content-type", "application/json")
            .body(Body::from(json.to_string())),
        None => builder.body(Body::empty()),
    }
    .expect("request");
    let peer: SocketAddr = format!("{peer}:50000").parse().expect("peer");
    request.extensions_mut().insert(ConnectInfo(peer));
    request
}

async fn send(app: &Router, request: Request<Body>) -> (StatusCode, Response<Body>, Value) {
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, Response::from_parts(parts, Body::empty()), json)
}

fn checkout(seat: &str, buyer: &str, peer: &str) -> Request<Body> {
    request(
        "POST",
        &format!("/api/seats/{seat}/checkout"),
        peer,
        Some(json!({ "buyer": buyer })),
    )
}

#[tokio::test]
async fn health_says_which_store_and_replica() {
    let app = app(state(50));
    let (status, _, body) = send(&app, request("GET", "/health", "127.0.0.1", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["store"], "memory");
    assert_eq!(body["replica"], "test");
    assert_eq!(body["seats"], 50);
    assert_eq!(body["seats_sold"], 0);
}

#[tokio::test]
async fn a_seat_is_sold_once_with_its_fence() {
    let app = app(state(50));
    let (status, response, sale) = send(&app, checkout("7", "ada", "192.0.2.1")).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(sale["seat"], 7);
    assert_eq!(sale["buyer"], "ada");
    assert!(sale["fence"].as_u64().expect("fence") > 0);
    assert!(response.headers().contains_key("ratelimit"));

    let (status, _, body) = send(&app, checkout("7", "bob", "192.0.2.2")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["error"], "seat 7 is already sold");

    let (status, _, seat) = send(&app, request("GET", "/api/seats/7", "192.0.2.3", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(seat["sale"]["buyer"], "ada");
    assert_eq!(seat["sale"]["fence"], sale["fence"]);

    let (_, _, seats) = send(&app, request("GET", "/api/seats", "192.0.2.3", None)).await;
    assert_eq!(seats["sold"], 1);
    assert!(
        !seats["available"]
            .as_array()
            .expect("list")
            .contains(&json!(7))
    );
}

#[tokio::test]
async fn racing_buyers_of_one_seat_sell_it_once() {
    let app = app(state(50));
    let buyers = (0..20).map(|i| {
        let app = app.clone();
        tokio::spawn(async move {
            let peer = format!("192.0.2.{}", i + 10);
            send(&app, checkout("3", &format!("buyer-{i}"), &peer))
                .await
                .0
        })
    });
    let mut statuses = Vec::new();
    for buyer in buyers {
        statuses.push(buyer.await.expect("task"));
    }
    let sold = statuses
        .iter()
        .filter(|s| **s == StatusCode::CREATED)
        .count();
    assert_eq!(sold, 1, "{statuses:?}");
    assert!(
        statuses
            .iter()
            .all(|s| *s == StatusCode::CREATED || *s == StatusCode::CONFLICT),
        "{statuses:?}"
    );
}

#[tokio::test]
async fn bad_input_is_an_error_response() {
    let app = app(state(50));
    let cases = [
        (checkout("0", "ada", "192.0.2.1"), StatusCode::NOT_FOUND),
        (checkout("51", "ada", "192.0.2.2"), StatusCode::NOT_FOUND),
        (checkout("-1", "ada", "192.0.2.3"), StatusCode::BAD_REQUEST),
        (
            checkout("99999999999", "ada", "192.0.2.4"),
            StatusCode::BAD_REQUEST,
        ),
        (
            checkout("5", "", "192.0.2.5"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            checkout("5", "\u{7}", "192.0.2.6"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            checkout("5", &"x".repeat(65), "192.0.2.7"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            request(
                "POST",
                "/api/seats/5/checkout",
                "192.0.2.8",
                Some(json!({"who": 1})),
            ),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            request("POST", "/api/seats/5/checkout", "192.0.2.9", None),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (
            request("GET", "/api/seats/5/checkout", "192.0.2.10", None),
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            request("GET", "/nowhere", "192.0.2.11", None),
            StatusCode::NOT_FOUND,
        ),
    ];
    for (request, expected) in cases {
        let uri = request.uri().clone();
        let (status, _, _) = send(&app, request).await;
        assert_eq!(status, expected, "{uri}");
    }
    let (_, _, health) = send(&app, request("GET", "/health", "127.0.0.1", None)).await;
    assert_eq!(health["seats_sold"], 0);
}

#[tokio::test]
async fn one_client_past_its_limit_gets_429_with_retry_after() {
    let app = app(state(50));
    let mut allowed = 0;
    let mut refused = 0;
    for _ in 0..40 {
        let (status, response, _) =
            send(&app, request("GET", "/api/seats", "198.51.100.1", None)).await;
        assert!(response.headers().contains_key("ratelimit-policy"));
        match status {
            StatusCode::OK => allowed += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                refused += 1;
                let retry: u64 = response.headers()["retry-after"]
                    .to_str()
                    .expect("ascii")
                    .parse()
                    .expect("seconds");
                assert!(retry >= 1);
            }
            other => panic!("unexpected {other}"),
        }
    }
    // The `api` policy: a burst of 20, then 10 per second.
    assert!((20..=25).contains(&allowed), "allowed {allowed}");
    assert!(refused >= 15);

    // Another client has its own budget.
    let (status, _, _) = send(&app, request("GET", "/api/seats", "198.51.100.2", None)).await;
    assert_eq!(status, StatusCode::OK);
    // Health checks are not limited.
    let (status, _, _) = send(&app, request("GET", "/health", "198.51.100.1", None)).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn checkout_has_a_stricter_all_or_nothing_policy() {
    let app = app(state(50));
    let mut statuses = Vec::new();
    let mut last = None;
    // Seats that do not exist: the limits count them all the same, and no seat is sold.
    for _ in 0..6 {
        let (status, response, _) = send(&app, checkout("404", "ada", "198.51.100.7")).await;
        statuses.push(status);
        last = Some(response);
    }
    // The `checkout` policy allows a burst of 3, then 2 per second.
    assert_eq!(&statuses[..3], &[StatusCode::NOT_FOUND; 3]);
    assert!(
        statuses[3..].contains(&StatusCode::TOO_MANY_REQUESTS),
        "{statuses:?}"
    );
    let last = last.expect("responses");
    let policy = last.headers()["ratelimit-policy"].to_str().expect("ascii");
    // q per w is the sustained rate; the burst goes apart (distlock-burst).
    assert!(
        policy.contains("\"checkout\";q=2;w=1;distlock-burst=3"),
        "{policy}"
    );
    assert!(
        policy.contains("\"checkout-per-minute\";q=10;w=60"),
        "{policy}"
    );
    // Refused checkouts took nothing from the client's `api` budget: all or nothing.
    let fields = last.headers()["ratelimit"].to_str().expect("ascii");
    let allowed = statuses
        .iter()
        .filter(|s| **s != StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert!(
        fields.contains(&format!("\"api\";r={}", 20 - allowed)),
        "{fields}"
    );
}

#[tokio::test]
async fn forwarded_addresses_count_only_from_trusted_proxies() {
    let mut settings = Settings::new(50, "test");
    settings.trusted_proxies = vec!["10.0.0.0/8".parse().expect("cidr")];
    let app = app(AppState::in_memory(settings).expect("policies"));
    let from = |peer: &str, forwarded: &str| {
        let mut r = request("GET", "/api/seats", peer, None);
        r.headers_mut()
            .insert("x-forwarded-for", forwarded.parse().expect("header"));
        r
    };
    // Through the load balancer (10.0.0.1): each client has its own budget.
    for _ in 0..20 {
        assert_eq!(
            send(&app, from("10.0.0.1", "203.0.113.1")).await.0,
            StatusCode::OK
        );
    }
    assert_eq!(
        send(&app, from("10.0.0.1", "203.0.113.1")).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        send(&app, from("10.0.0.1", "203.0.113.2")).await.0,
        StatusCode::OK
    );
    // A client connecting directly cannot pick its bucket with a made-up header.
    for i in 0..20 {
        let status = send(&app, from("192.0.2.50", &format!("203.0.113.{}", 100 + i)))
            .await
            .0;
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(
        send(&app, from("192.0.2.50", "203.0.113.200")).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn reindex_runs_one_at_a_time() {
    let app = app(state(50));
    send(&app, checkout("1", "ada", "192.0.2.1")).await;
    let first = tokio::spawn({
        let app = app.clone();
        async move { send(&app, request("POST", "/admin/reindex", "127.0.0.1", None)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (status, response, _) =
        send(&app, request("POST", "/admin/reindex", "127.0.0.1", None)).await;
    assert_eq!(status, StatusCode::LOCKED);
    assert!(response.headers().contains_key("retry-after"));

    let (status, _, report) = first.await.expect("task");
    assert_eq!(status, StatusCode::OK);
    assert_eq!(report["seats_sold"], 1);
    assert!(report["fence"].as_u64().expect("fence") > 0);
    // Once the first is done, the next one runs, under a greater fence.
    let (status, _, next) = send(&app, request("POST", "/admin/reindex", "127.0.0.1", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(next["fence"].as_u64() > report["fence"].as_u64());
}

#[tokio::test]
async fn the_job_runs_once_per_period_and_records_its_fence() {
    let state = state(50);
    let schedule = Schedule {
        period: Duration::from_millis(400),
        min_hold: Duration::from_millis(300),
        max_hold: Duration::from_secs(5),
    };
    // Two "replicas" due at the same moment: one runs, the other skips.
    let (a, b) = tokio::join!(
        job::run_once(&state, &schedule),
        job::run_once(&state, &schedule)
    );
    let runs: Vec<JobRun> = [a, b]
        .into_iter()
        .filter_map(|r| r.expect("no error"))
        .collect();
    assert_eq!(runs.len(), 1);
    // The run is over, but its lock is kept for the minimum hold: a replica due now skips.
    assert!(
        job::run_once(&state, &schedule)
            .await
            .expect("run")
            .is_none()
    );
    tokio::time::sleep(schedule.min_hold + Duration::from_millis(20)).await;

    // The next period. The minimum hold: a replica waking 100 ms late, after the 20 ms job,
    // still skips.
    let late = tokio::spawn({
        let state = state.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            job::run_once(&state, &schedule).await
        }
    });
    let on_time = job::run_once(&state, &schedule).await.expect("run");
    assert!(on_time.is_some());
    assert!(late.await.expect("task").expect("run").is_none());

    let recorded: Vec<JobRun> = state.store.records(Log::JobRuns).await.expect("records");
    assert_eq!(recorded.len(), 2);
    assert!(recorded[1].fence > recorded[0].fence);
    assert!(recorded[1].started_ms >= recorded[0].ended_ms);
}

#[tokio::test]
async fn a_holder_whose_lease_expired_cannot_sell() {
    let mut settings = Settings::new(50, "test");
    settings.payment_time = Duration::from_millis(300);
    let state = AppState::in_memory(settings).expect("policies");

    // A replica takes the seat's lock and holds the seat, then stalls (a GC pause, a frozen
    // VM) until its lease has expired.
    let stalled = state
        .locks
        .lock("seat:9")
        .ttl(Duration::from_millis(50))
        .watchdog(false)
        .acquire()
        .await
        .expect("lock");
    let old_fence = stalled.fence().await.expect("fence");
    assert_eq!(
        state.store.hold(9, old_fence).await.expect("store"),
        Fenced::Ok
    );
    tokio::time::sleep(Duration::from_millis(100)).await;

    // Meanwhile a buyer's checkout takes the lock (a newer fence) and holds the seat...
    let checkout = tokio::spawn({
        let app = app(state.clone());
        async move { send(&app, checkout("9", "ada", "192.0.2.1")).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;

    // ...so when the stalled replica wakes up and confirms, the store refuses it.
    let stale = Sale {
        seat: 9,
        buyer: "mallory".into(),
        fence: old_fence,
        replica: "stalled".into(),
        sold_at_ms: 0,
    };
    let refused = state.store.confirm(&stale).await.expect("store");
    assert!(
        matches!(refused, Fenced::Stale { newer } if newer > old_fence),
        "{refused:?}"
    );

    let (status, _, sale) = checkout.await.expect("task");
    assert_eq!(status, StatusCode::CREATED);
    let kept = state.store.sale(9).await.expect("store").expect("sold");
    assert_eq!(kept.buyer, "ada");
    assert_eq!(Some(kept.fence), sale["fence"].as_u64());
    drop(stalled);
}

/// A retried checkout with the same `Idempotency-Key` gets the first answer, replayed, and
/// the seat is sold once; a reused key with another body is refused.
#[tokio::test]
async fn a_retried_checkout_with_its_key_is_answered_once() {
    let app = app(state(50));
    let keyed = |buyer: &str, key: &str| {
        let mut request = checkout("7", buyer, "192.0.2.70");
        request
            .headers_mut()
            .insert("idempotency-key", key.parse().expect("header"));
        request
    };
    let (status, first, sale) = send(&app, keyed("ada", "\"order-1\"")).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let (status, again, replayed) = send(&app, keyed("ada", "\"order-1\"")).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "the first answer, not 409 sold"
    );
    assert_eq!(
        again
            .headers()
            .get("idempotent-replayed")
            .and_then(|v| v.to_str().ok()),
        Some("true")
    );
    assert_eq!(replayed, sale, "byte for byte the first sale");
    // The same key for another request is a client error, not a second sale.
    let (status, _, _) = send(&app, keyed("grace", "\"order-1\"")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    // Without a key, a second buyer finds the seat sold.
    let (status, _, _) = send(&app, checkout("7", "grace", "192.0.2.71")).await;
    assert_eq!(status, StatusCode::CONFLICT);
}

/// The periodic job is kept by an elected leader: `GET /admin/leader` names this replica
/// once it leads, with its term.
#[tokio::test]
async fn the_job_has_an_elected_leader() {
    let state = state(50);
    let app = app(state.clone());
    let (status, _, body) = send(&app, request("GET", "/admin/leader", "127.0.0.1", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({ "replica": null, "term": null }),
        "nobody leads yet"
    );
    let keeper = tokio::spawn(job::run_forever(
        state.clone(),
        Schedule::every(Duration::from_secs(3600)),
    ));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let body = loop {
        let (_, _, body) = send(&app, request("GET", "/admin/leader", "127.0.0.1", None)).await;
        if body["replica"] == json!("test") {
            break body;
        }
        assert!(tokio::time::Instant::now() < deadline, "no leader: {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(body["term"].as_u64().is_some_and(|t| t > 0), "{body}");
    keeper.abort();
}

/// The console at `/admin/console`: its API answers nobody without the configured token,
/// reads included (the page, static, loads); with it, it lists the reindex lock while one
/// runs, shows a client address's checkout budget, and forces a lock.
#[tokio::test]
async fn the_console_shows_the_reindex_lock_and_wants_the_token_to_force_it() {
    let mut settings = Settings::new(50, "test");
    // Longer than the console's listing cache (2 s), so that a listing made after the lock
    // was taken shows it.
    settings.reindex_time = Duration::from_secs(5);
    settings.console_token = Some("op-secret".to_owned());
    let app = app(AppState::in_memory(settings).expect("valid policies"));
    let with_token = |mut r: Request<Body>| {
        r.headers_mut()
            .insert("authorization", "Bearer op-secret".parse().expect("header"));
        r
    };
    for path in ["/admin/console/api/locks", "/admin/console/api/overview"] {
        let (status, _, _) = send(&app, request("GET", path, "127.0.0.1", None)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path} without the token");
    }
    // The page itself holds no data: a browser opens it, then sends the token it is given.
    let (status, page, _) = send(&app, request("GET", "/admin/console", "127.0.0.1", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .expect("ASCII")
            .starts_with("text/html")
    );

    let reindex = tokio::spawn({
        let app = app.clone();
        async move { send(&app, request("POST", "/admin/reindex", "127.0.0.1", None)).await }
    });
    let mut listed = Value::Null;
    for _ in 0..200 {
        let (_, _, locks) = send(
            &app,
            with_token(request(
                "GET",
                "/admin/console/api/locks",
                "127.0.0.1",
                None,
            )),
        )
        .await;
        listed = locks;
        if listed["locks"].as_array().is_some_and(|l| !l.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(listed["locks"][0]["name"], "admin/reindex", "{listed}");

    let force = |token: Option<&str>| {
        let mut r = request(
            "POST",
            "/admin/console/api/locks/admin%2Freindex/force-unlock",
            "127.0.0.1",
            None,
        );
        r.headers_mut()
            .insert("x-distlock-console", "1".parse().expect("header"));
        if let Some(token) = token {
            let value = format!("Bearer {token}").parse().expect("header");
            r.headers_mut().insert("authorization", value);
        }
        r
    };
    let (status, _, _) = send(&app, force(None)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _) = send(&app, force(Some("guess"))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, forced) = send(&app, force(Some("op-secret"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(forced["forced"], true);
    reindex.await.expect("task");

    // A client address's checkout budget, spent by one purchase.
    send(&app, checkout("1", "ada", "192.0.2.7")).await;
    let (status, _, budget) = send(
        &app,
        with_token(request(
            "GET",
            "/admin/console/api/rate-limits/checkout/192.0.2.7",
            "127.0.0.1",
            None,
        )),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{budget}");
    assert!(
        budget["remaining"].as_u64().expect("remaining") < budget["limit"].as_u64().expect("limit"),
        "{budget}"
    );
}
