//! Responses users own: a refusal hook answers every kind of refusal, RFC 9457 problem
//! documents, the decisions in the response's extensions for outer layers, the `debug` events
//! of refusals and of requests without a key, and `ClientIp` without axum's `ConnectInfo`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::Request as AxumRequest;
use axum::middleware::{self, Next};
use axum::response::Response as AxumResponse;
use distlock::ratelimit::Origin;
use distlock_tower::client_ip::ClientIp;
use distlock_tower::extract::{ExtractKey, Extracted, Header};
use distlock_tower::rate_limit::{Checks, MissingKey, RateLimitLayer};
use distlock_tower::refusal::{ProblemDetails, Reason, Refusal, RefusedBy};
use http::{Request, Response, StatusCode};

use crate::app::{
    Fixture, PEER, call, fields, gcra, gcra_limiter, header, on_both_stores, request_from, routes,
    text,
};
use crate::traces::Capture;

on_both_stores!(
    a_custom_hook_answers_every_refusal_kind,
    problem_details_are_json_with_the_rfc_9457_members,
    an_outer_layer_reads_subject_policy_and_origin,
    stacked_layers_each_record_their_check,
);

/// A hook that answers every refusal `599`-style with its own JSON: nothing of the default
/// response is left, so whatever the client gets is the hook's.
fn hook(refusal: &Refusal) -> Response<String> {
    Response::builder()
        .status(match refusal.reason() {
            Reason::TooManyRequests => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::IM_A_TEAPOT,
        })
        .header("content-type", "application/vnd.test+json")
        .header("x-refusal", refusal.reason().code())
        .body(format!(
            r#"{{"by":"{:?}","status":{},"retry":{}}}"#,
            refusal.refused_by(),
            refusal.status().as_u16(),
            refusal.retry_after_secs().unwrap_or(0)
        ))
        .expect("response")
}

async fn a_custom_hook_answers_every_refusal_kind(fx: Fixture) {
    let limiter = gcra_limiter(&fx, "api", 60, 1);
    let app = routes().layer(
        RateLimitLayer::builder(limiter.clone(), Header::from_static("x-api-key"))
            .refusal(hook)
            .build()
            .expect("valid settings"),
    );
    let with_key = |key: &str| request_from("/", PEER, &[("x-api-key", key)]);

    // Allowed: the inner service's response, untouched by the hook.
    let ok = call(&app, with_key("k1")).await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert!(header(&ok, "x-refusal").is_none());

    // 429: the hook's status, type and body; the layer adds Retry-After and the fields.
    let refused = call(&app, with_key("k1")).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&refused, "x-refusal"), Some("too-many-requests"));
    assert_eq!(
        header(&refused, "content-type"),
        Some("application/vnd.test+json")
    );
    assert_eq!(header(&refused, "retry-after"), Some("1"));
    let (policy, state) = fields(&refused);
    assert_eq!((policy[0].0.as_str(), state[0].1["r"]), ("api", 0));
    let why = refused
        .extensions()
        .get::<Refusal>()
        .expect("the refusal is in the extensions")
        .clone();
    assert_eq!(why.key(), Some("k1"));
    assert_eq!(why.decision().map(|d| d.allowed), Some(false));
    assert_eq!(
        text(refused).await,
        r#"{"by":"RateLimit","status":429,"retry":1}"#
    );

    // 400, no key.
    let response = call(&app, request_from("/", PEER, &[])).await;
    assert_eq!(response.status(), StatusCode::IM_A_TEAPOT);
    assert_eq!(header(&response, "x-refusal"), Some("missing-key"));
    assert!(header(&response, "retry-after").is_none());
    assert_eq!(
        text(response).await,
        r#"{"by":"RateLimit","status":400,"retry":0}"#
    );

    // 400, a malformed key.
    let mut twice = with_key("k2");
    twice
        .headers_mut()
        .append("x-api-key", http::HeaderValue::from_static("k3"));
    let response = call(&app, twice).await;
    assert_eq!(header(&response, "x-refusal"), Some("invalid-key"));
    assert_eq!(
        response
            .extensions()
            .get::<Refusal>()
            .map(|r| r.reason().clone()),
        Some(Reason::InvalidKey(
            distlock_tower::extract::InvalidKey::Repeated
        ))
    );

    // 400, a key the limiter cannot use as a subject (longer than a name may be).
    let too_long = |_: &Request<Body>| Some("k".repeat(distlock::MAX_NAME_LEN + 1));
    let app = routes().layer(
        RateLimitLayer::builder(limiter, too_long)
            .refusal(hook)
            .build()
            .expect("valid settings"),
    );
    let response = call(&app, request_from("/", PEER, &[])).await;
    assert_eq!(header(&response, "x-refusal"), Some("unusable-key"));
    let why = response.extensions().get::<Refusal>().expect("refusal");
    assert!(
        why.error()
            .and_then(|e| e.downcast_ref::<distlock::RateLimitError>())
            .is_some(),
        "the runtime's error comes along"
    );
    assert_eq!(
        text(response).await,
        r#"{"by":"RateLimit","status":400,"retry":0}"#
    );
}

async fn problem_details_are_json_with_the_rfc_9457_members(fx: Fixture) {
    let limiter = gcra_limiter(&fx, "api", 2, 1);
    let app = routes().layer(
        RateLimitLayer::builder(limiter, ClientIp::peer())
            .refusal(ProblemDetails::new().type_base("https://errors.example/"))
            .build()
            .expect("valid settings"),
    );
    assert_eq!(
        call(&app, request_from("/", PEER, &[])).await.status(),
        StatusCode::OK
    );
    let refused = call(&app, request_from("/", PEER, &[])).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&refused, "content-type"),
        Some("application/problem+json")
    );
    assert_eq!(header(&refused, "retry-after"), Some("30"));
    assert!(header(&refused, "ratelimit").is_some());
    let json: serde_json::Value = serde_json::from_str(&text(refused).await).expect("JSON");
    assert_eq!(json["type"], "https://errors.example/too-many-requests");
    assert_eq!(json["title"], "Too Many Requests");
    assert_eq!(json["status"], 429);
    assert_eq!(json["detail"], "too many requests; retry in 30 s");
    assert_eq!(json["retry_after"], 30);

    // No peer address: 400, as a problem too.
    let bare = Request::get("/").body(Body::empty()).expect("request");
    let response = call(&app, bare).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let json: serde_json::Value = serde_json::from_str(&text(response).await).expect("JSON");
    assert_eq!(json["type"], "https://errors.example/missing-key");
    assert_eq!(json["status"], 400);
    assert!(json.get("retry_after").is_none());
}

/// What an outer middleware saw of each response: status, subject, policy, origin.
type Seen = Arc<Mutex<Vec<(StatusCode, String, String, Origin)>>>;

/// An outer layer that reads the rate-limit checks of every response, as a logging layer
/// would.
fn observed(app: Router, seen: &Seen) -> Router {
    let seen = Arc::clone(seen);
    app.layer(middleware::from_fn(
        move |request: AxumRequest, next: Next| {
            let seen = Arc::clone(&seen);
            async move {
                let response: AxumResponse = next.run(request).await;
                if let Some(check) = response
                    .extensions()
                    .get::<Checks>()
                    .and_then(Checks::binding)
                {
                    seen.lock().expect("seen").push((
                        response.status(),
                        check.subject.clone(),
                        check.decision.policy.to_string(),
                        check.decision.origin,
                    ));
                }
                response
            }
        },
    ))
}

async fn an_outer_layer_reads_subject_policy_and_origin(fx: Fixture) {
    let limiter = gcra_limiter(&fx, "api", 6, 1);
    let seen = Seen::default();
    let app = observed(
        routes().layer(RateLimitLayer::new(limiter, ClientIp::peer())),
        &seen,
    );
    for _ in 0..3 {
        call(&app, request_from("/", PEER, &[])).await;
    }
    let seen = seen.lock().expect("seen").clone();
    let subject = "203.0.113.9".to_owned();
    let api = "api".to_owned();
    assert_eq!(
        seen,
        [
            (StatusCode::OK, subject.clone(), api.clone(), Origin::Store),
            (
                StatusCode::TOO_MANY_REQUESTS,
                subject.clone(),
                api.clone(),
                Origin::Store
            ),
            // Denied again within the retry-after: the deny cache answers, no round trip.
            (
                StatusCode::TOO_MANY_REQUESTS,
                subject,
                api,
                Origin::DenyCache
            ),
        ]
    );
}

async fn stacked_layers_each_record_their_check(fx: Fixture) {
    let inner = gcra_limiter(&fx, "per-key", 60, 1);
    let outer = gcra_limiter(&fx, "per-ip", 60, 5);
    let app = routes()
        .layer(RateLimitLayer::new(inner, Header::from_static("x-api-key")))
        .layer(RateLimitLayer::new(outer, ClientIp::peer()));
    let request = || request_from("/", PEER, &[("x-api-key", "k1")]);
    let ok = call(&app, request()).await;
    let checks = ok.extensions().get::<Checks>().expect("checks");
    let layers: Vec<(&str, &str, bool)> = checks
        .iter()
        .map(|c| (c.subject.as_str(), &*c.decision.policy, c.decision.allowed))
        .collect();
    assert_eq!(
        layers,
        [("k1", "per-key", true), ("203.0.113.9", "per-ip", true)],
        "innermost first, as in the RateLimit field"
    );
    assert_eq!(
        checks.binding().map(|c| &*c.decision.policy),
        Some("per-key"),
        "fewest left"
    );

    let refused = call(&app, request()).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let checks = refused.extensions().get::<Checks>().expect("checks");
    assert_eq!(checks.len(), 2);
    let binding = checks.binding().expect("binding");
    assert_eq!(
        (&*binding.decision.policy, binding.decision.allowed),
        ("per-key", false),
        "the refusing layer binds"
    );
    assert_eq!(
        refused
            .extensions()
            .get::<Refusal>()
            .map(Refusal::refused_by),
        Some(RefusedBy::RateLimit)
    );
}

/// A `debug` event for every refusal, with subject, policy and `Retry-After`, and for every
/// request without a key, with a hint when `ClientIp` finds no peer; no `distlock-tower:`
/// prefix (the target says it).
#[tokio::test]
async fn refusals_and_keyless_requests_are_debug_events() {
    let capture = Capture::start(tracing::Level::DEBUG);
    let client = distlock::Client::in_memory();
    let limiter = client
        .rate_limiter(gcra("api", 60, 1))
        .build()
        .expect("valid limiter");
    let app = routes().layer(RateLimitLayer::new(limiter.clone(), ClientIp::peer()));
    call(&app, request_from("/", PEER, &[])).await;
    call(&app, request_from("/", PEER, &[])).await;
    let logged = capture.text();
    let refusal = logged
        .lines()
        .find(|l| l.contains("request refused"))
        .unwrap_or_else(|| panic!("no refusal event in {logged:?}"));
    assert!(refusal.contains("DEBUG"), "{refusal}");
    assert!(refusal.contains("distlock_tower::rate_limit"), "{refusal}");
    for field in ["subject=#", "policy=\"api\"", "retry_after=1", "status=429"] {
        assert!(refusal.contains(field), "{field} in {refusal}");
    }
    // The subject (an address, maybe an API key) is redacted: logs travel further than the
    // store does.
    assert!(!logged.contains("203.0.113.9"), "{logged}");

    // No ConnectInfo: the hint says how to serve the router.
    let bare = || Request::get("/").body(Body::empty()).expect("request");
    call(&app, bare()).await;
    let lenient = routes().layer(
        RateLimitLayer::builder(limiter, ClientIp::peer())
            .on_missing_key(MissingKey::Allow)
            .build()
            .expect("valid settings"),
    );
    call(&lenient, bare()).await;
    let logged = capture.text();
    let keyless: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("without a rate-limit key"))
        .collect();
    assert_eq!(keyless.len(), 2, "{logged}");
    for line in keyless {
        assert!(
            line.contains("into_make_service_with_connect_info"),
            "{line}"
        );
    }
    assert!(
        !logged.contains("distlock-tower:"),
        "no prefix in the messages: {logged}"
    );
}

/// A server started without `ConnectInfo` makes every request keyless: `ClientIp` says so
/// once at `warn` (visible at the usual `info` filter), with the fix, not once per request.
#[tokio::test]
async fn a_missing_peer_address_is_warned_once() {
    let capture = Capture::start(tracing::Level::INFO);
    let client = distlock::Client::in_memory();
    let limiter = client
        .rate_limiter(gcra("api", 60, 10))
        .build()
        .expect("valid limiter");
    let app = routes().layer(RateLimitLayer::new(limiter, ClientIp::peer()));
    let bare = || Request::get("/").body(Body::empty()).expect("request");
    for _ in 0..3 {
        let response = call(&app, bare()).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }
    let logged = capture.text();
    let warnings: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("found no peer address"))
        .collect();
    assert_eq!(warnings.len(), 1, "{logged}");
    assert!(warnings[0].contains("WARN"), "{}", warnings[0]);
    assert!(
        warnings[0].contains("into_make_service_with_connect_info"),
        "the fix is named: {}",
        warnings[0]
    );
    // A request with a peer address is keyed as before.
    let response = call(&app, request_from("/", PEER, &[])).await;
    assert_eq!(response.status(), StatusCode::OK);
}

/// Without axum's `ConnectInfo`, `ClientIp` reads a plain `SocketAddr` extension, which any
/// server can insert; `ConnectInfo` wins when both are there.
#[test]
fn client_ip_reads_a_plain_socket_addr() {
    let mut request = Request::get("/")
        .header("x-forwarded-for", "198.51.100.2")
        .body(())
        .expect("request");
    assert_eq!(ClientIp::peer().extract_key(&request), Extracted::Absent);
    let peer: SocketAddr = "10.0.0.1:443".parse().expect("address");
    request.extensions_mut().insert(peer);
    assert_eq!(
        ClientIp::peer().extract_key(&request).key(),
        Some("10.0.0.1")
    );
    let behind_lb = ClientIp::trusting(["10.0.0.0/8".parse().expect("CIDR")]);
    assert_eq!(behind_lb.extract_key(&request).key(), Some("198.51.100.2"));
    let connect_info: SocketAddr = "192.0.2.9:1".parse().expect("address");
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo(connect_info));
    assert_eq!(
        ClientIp::peer().extract_key(&request).key(),
        Some("192.0.2.9")
    );
    assert!(ExtractKey::<()>::absent_hint(&ClientIp::peer()).is_some());
}
