//! The service's metrics, through the `metrics` facade, named as envoyproxy/ratelimit names
//! its stats so that dashboards carry over: the domain and the descriptor's key are labels
//! here where its statsd names embed them (`ratelimit.service.rate_limit.<domain>.<key>.
//! over_limit` is `ratelimit.service.rate_limit.over_limit{domain, key}`; a Prometheus
//! exporter writes `ratelimit_service_rate_limit_over_limit{domain="...",key="..."}`).
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `ratelimit.service.rate_limit.total_hits` | counter | `domain`, `key` | hits (each request's `hits_addend`) on a limit |
//! | `ratelimit.service.rate_limit.over_limit` | counter | `domain`, `key` | hits answered `OVER_LIMIT` |
//! | `ratelimit.service.rate_limit.near_limit` | counter | `domain`, `key` | hits allowed with the limit at least `near_limit_ratio` used |
//! | `ratelimit.service.rate_limit.within_limit` | counter | `domain`, `key` | hits allowed |
//! | `ratelimit.service.rate_limit.shadow_mode` | counter | `domain`, `key` | hits over a shadow-mode limit, answered `OK` |
//! | `ratelimit.service.config_load_success` | counter | | configurations taken |
//! | `ratelimit.service.config_load_error` | counter | | configurations refused (the one in use kept) |
//! | `ratelimit_server.ShouldRateLimit.total_requests` | counter | | requests answered |
//! | `ratelimit_server.ShouldRateLimit.response_time` | histogram | | seconds per request |
//!
//! The `key` is the configured descriptor's (`database_users`, `remote_address`), not the
//! request's values, so a key-only descriptor is one series however many values it sees;
//! with `detailed_metric: true` the request's value is added, one series per value.

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;

use super::config::{Limit, descriptor_key};

/// The `key` label of a hit on `limit` by `descriptor`.
pub(crate) fn key(limit: &Limit, descriptor: &RateLimitDescriptor) -> String {
    let configured = limit
        .full_key
        .split_once('.')
        .map_or(limit.full_key.as_str(), |(_, key)| key);
    if !limit.detailed_metric {
        return configured.to_owned();
    }
    // The configured key with each level's value, as the request sent it.
    descriptor_key(descriptor)
}

fn add(name: &'static str, domain: &str, key: &str, n: u32) {
    metrics::counter!(name, "domain" => domain.to_owned(), "key" => key.to_owned())
        .increment(u64::from(n));
}

pub(crate) fn hits(domain: &str, key: &str, n: u32) {
    add("ratelimit.service.rate_limit.total_hits", domain, key, n);
}

pub(crate) fn over_limit(domain: &str, key: &str, n: u32) {
    add("ratelimit.service.rate_limit.over_limit", domain, key, n);
}

pub(crate) fn near_limit(domain: &str, key: &str, n: u32) {
    add("ratelimit.service.rate_limit.near_limit", domain, key, n);
}

pub(crate) fn within_limit(domain: &str, key: &str, n: u32) {
    add("ratelimit.service.rate_limit.within_limit", domain, key, n);
}

pub(crate) fn shadowed(domain: &str, key: &str, n: u32) {
    add("ratelimit.service.rate_limit.shadow_mode", domain, key, n);
}

pub(crate) fn config_loaded(ok: bool) {
    let name = if ok {
        "ratelimit.service.config_load_success"
    } else {
        "ratelimit.service.config_load_error"
    };
    metrics::counter!(name).increment(1);
}

pub(crate) fn request_answered(took: Duration) {
    metrics::counter!("ratelimit_server.ShouldRateLimit.total_requests").increment(1);
    metrics::histogram!("ratelimit_server.ShouldRateLimit.response_time")
        .record(took.as_secs_f64());
}
