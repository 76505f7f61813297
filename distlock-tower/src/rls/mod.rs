//! Envoy's rate-limit service on distlock's limiters (feature `rls`): one budget for the mesh
//! and for in-process checks.
//!
//! Envoy, Istio, Emissary and kgateway call an external service,
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, with a domain and a list of
//! descriptors (`[("remote_address", "10.0.0.1"), ("path", "/login")]`). [`RateLimitServer`]
//! answers it from the configuration format of envoyproxy/ratelimit, the reference server,
//! so its files move over unchanged; each configured limit is counted by a distlock limiter
//! on the client's store (a Redis primary, Sentinel, a Cluster, or memory), so the same
//! budget can also be checked in process. The `distlock-rls` binary runs it in one command.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::path::PathBuf;
//! use std::time::Duration;
//! use distlock_tower::rls::{RateLimitServer, RlsConfig, Settings, watch};
//!
//! let client = distlock::Client::connect("redis://127.0.0.1:6379/").await?;
//! let dir = PathBuf::from("/srv/ratelimit/config");
//! let server = RateLimitServer::new(client, RlsConfig::from_dir(&dir)?, Settings::default())?;
//! let _reload = watch(server.clone(), dir, Duration::from_secs(5));
//! tonic::transport::Server::builder()
//!     .add_service(server.into_service())
//!     .serve("0.0.0.0:8081".parse()?)
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! # The configuration
//!
//! One YAML file per domain, as envoyproxy/ratelimit reads them:
//!
//! ```yaml
//! domain: edge
//! descriptors:
//!   - key: remote_address          # any value: one counter per address
//!     rate_limit:
//!       unit: minute               # second, minute, hour, day, week, month (30 d), year
//!       requests_per_unit: 60
//!     descriptors:
//!       - key: path
//!         value: /login            # this value only; `/api/*` matches by prefix
//!         rate_limit: { unit: minute, requests_per_unit: 5, name: login }
//!   - key: generic_key
//!     value: health
//!     rate_limit: { unlimited: true }
//!   - key: tenant
//!     value: beta
//!     shadow_mode: true            # counted and reported, never refused
//!     detailed_metric: true        # metrics per value
//!     rate_limit: { unit: second, requests_per_unit: 100, replaces: [{ name: login }] }
//! ```
//!
//! A request descriptor gets the limit of the node its last entry reaches, walking level by
//! level (`key_value` first, then a `key_value*` prefix, then the bare `key`); one with more
//! entries than the configuration is deep gets none. A limit named in another matched
//! limit's `replaces` does not apply to that request. `requests_per_unit: 0` refuses every
//! request. Unknown keys, a bad unit, an empty or repeated domain or key are refused when the
//! files are read, with the file and the line ([`RlsConfigError`]); [`watch`] reloads when
//! the files change and keeps the configuration in use when the new one is wrong.
//!
//! distlock's own settings live under a key of their own, `distlock`, beside a descriptor's
//! `rate_limit`:
//!
//! ```yaml
//!   - key: api_key
//!     rate_limit: { unit: second, requests_per_unit: 10 }
//!     distlock:
//!       algorithm: gcra            # fixed_window (the default, as envoyproxy/ratelimit counts),
//!                                  # gcra, token_bucket, sliding_window, sliding_log
//!       burst: 20                  # gcra and token_bucket
//!       lockout: ["15m", "1h"]     # block a key that breaches, escalating
//!       extra_limits:              # more rates on the same counter, all must allow...
//!         - { unit: hour, requests_per_unit: 1000 }
//!       any_of: false              # ...or any one of them (a steady rate and a burst budget)
//!       hidden: true               # never in the response headers
//! ```
//!
//! # The answers
//!
//! Each descriptor is checked on its own (concurrently), charging the request's
//! `hits_addend` (at least 1) or the descriptor's own; `is_negative_hits` gives the hits back.
//! The response has `overall_code` (`OVER_LIMIT` if any descriptor is), a `DescriptorStatus`
//! per descriptor (`code`, `current_limit` with its `name` unless hidden, `limit_remaining`,
//! `duration_until_reset`), and in `response_headers_to_add` the `x-ratelimit-limit`,
//! `x-ratelimit-remaining` and `x-ratelimit-reset` of the visible limit with the fewest
//! requests left ([`Settings::response_headers`]). A descriptor with its own `limit` override
//! is counted at that rate, in fixed windows. Unlike envoyproxy/ratelimit, a refused hit is
//! not counted: a client held at its limit gets through again as soon as the window allows.
//! While the store does not answer, [`Settings::outage`] decides: a gRPC `UNAVAILABLE` (the
//! default; Envoy's `failure_mode_deny` then decides), `OVER_LIMIT`, `OK`, or an in-process
//! limiter. [`Settings`] also takes the limiters' deny cache and hybrid mode. The metrics are
//! in [`metrics`]'s table.

mod config;
pub mod metrics;
mod reload;
mod service;

pub use self::config::{Bound, Limit, RlsConfig, RlsConfigError, Unit};
pub use self::reload::watch;
pub use self::service::{OutageAnswer, RateLimitServer, RlsError, Settings, limit_policy_name};
