//! A readiness route: whether the store answers, for a load balancer or Kubernetes probe.
//!
//! ```no_run
//! use axum::Router;
//!
//! fn app(client: distlock::Client) -> Router {
//!     // 200 when the client can work (its primary, every Cluster master or a quorum's
//!     // majority answered a PING), 503 otherwise; a JSON body lists each server.
//!     Router::new().route("/ready", distlock_tower::health::readiness(client))
//! }
//! ```
//!
//! The body: `{"ready":true,"store":"redis","nodes":[{"node":"primary","up":true,
//! "latency_ms":0.21,"maxmemory_policy":"noeviction"}]}`, with `"error"` in place of
//! `"latency_ms"` for a server that did not answer (its reason, never a password), and
//! `"evicts_keys":true` beside a `maxmemory_policy` that can delete lock keys before their
//! ttl (any but `noeviction`; the probe stays ready, the operator is told). Each probe pings within the client's
//! `response_timeout`; nothing is cached, so give the probe a period, not a tight loop.

use std::fmt::Write as _;

use axum::body::Body;
use axum::routing::{MethodRouter, get};
use distlock::{Client, Health};
use http::{HeaderValue, Response, StatusCode, header};

use crate::refusal::push_json_string;

/// A `GET` route answering [`Client::ping`]: `200 OK` when [`Health::ready`], `503 Service
/// Unavailable` otherwise, with the report as JSON (`Cache-Control: no-store`).
pub fn readiness<S>(client: Client) -> MethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    get(move || {
        let client = client.clone();
        async move { respond(&client.ping().await) }
    })
}

fn respond(health: &Health) -> Response<Body> {
    let status = if health.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut response = Response::new(Body::from(document(health)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The report as JSON.
pub fn document(health: &Health) -> String {
    let mut json = String::with_capacity(64 + 64 * health.nodes.len());
    let _ = write!(json, "{{\"ready\":{},\"store\":", health.ready);
    push_json_string(&mut json, health.store.as_str());
    json.push_str(",\"nodes\":[");
    for (i, node) in health.nodes.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        json.push_str("{\"node\":");
        push_json_string(&mut json, &node.node);
        match &node.answer {
            Ok(latency) => {
                let _ = write!(
                    json,
                    ",\"up\":true,\"latency_ms\":{:.3}",
                    latency.as_secs_f64() * 1000.0
                );
                if let Some(policy) = &node.eviction_policy {
                    json.push_str(",\"maxmemory_policy\":");
                    push_json_string(&mut json, policy);
                    if policy != "noeviction" {
                        json.push_str(",\"evicts_keys\":true");
                    }
                }
                json.push('}');
            }
            Err(why) => {
                json.push_str(",\"up\":false,\"error\":");
                push_json_string(&mut json, why);
                json.push('}');
            }
        }
    }
    json.push_str("]}");
    json
}
