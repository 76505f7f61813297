//! The `RateLimitService` itself: each descriptor of a request to its configured limit, each
//! limit to its distlock limiter, and the answers back in Envoy's terms.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use distlock::ratelimit::{Decision, Outage, Policy, Rate, RateLimiter};
use distlock::{Client, RateLimitError};
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as CurrentLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use sha2::{Digest as _, Sha256};

use super::config::{Bound, Entry, Limit, RlsConfig, Unit, descriptor_key, policy_name};
use super::metrics;

/// What the service answers while the store does not (a limiter's outage policy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutageAnswer {
    /// A gRPC `UNAVAILABLE` error: Envoy's own `failure_mode_deny` decides (it lets the
    /// request through by default). The default, as envoyproxy/ratelimit answers.
    #[default]
    Unavailable,
    /// `OVER_LIMIT`: nothing gets through unmetered.
    OverLimit,
    /// `OK`: availability over protection.
    Ok,
    /// Decided by an in-memory limiter with the same policies in this process: with `n`
    /// replicas of the service, up to `n` times the limit gets through while the store is
    /// away.
    LocalFallback,
}

/// The service's settings besides its configuration files.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settings {
    /// What to answer while the store is down (default [`OutageAnswer::Unavailable`]).
    pub outage: OutageAnswer,
    /// The deadline of one limiter check (default 250 ms).
    pub deadline: Duration,
    /// The size of each limiter's local deny cache, in subjects (0: none, the default). A
    /// denied subject is then answered `OVER_LIMIT` without a round trip until its wait ends.
    pub deny_cache: usize,
    /// The hybrid mode (`share`, `sync`): each replica answers from leased shares (see
    /// distlock's `RateLimiterBuilder::hybrid`); `None`, the default: every check is exact.
    pub hybrid: Option<(u32, Duration)>,
    /// Whether to answer `x-ratelimit-limit`, `x-ratelimit-remaining` and
    /// `x-ratelimit-reset` in `response_headers_to_add` (default `true`); hidden limits are
    /// never in them.
    pub response_headers: bool,
    /// From which share of a limit used a request counts as `near_limit` in the metrics
    /// (default 0.8, as envoyproxy/ratelimit's `NEAR_LIMIT_RATIO`).
    pub near_limit_ratio: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            outage: OutageAnswer::default(),
            deadline: Duration::from_millis(250),
            deny_cache: 0,
            hybrid: None,
            response_headers: true,
            near_limit_ratio: 0.8,
        }
    }
}

/// Why the service could not take a configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RlsError {
    /// A configuration file is wrong (the one in use is kept).
    #[error(transparent)]
    Config(#[from] super::RlsConfigError),
    /// A limiter could not be built on the client's store (a Redlock quorum, say), or the
    /// settings are out of range.
    #[error("limit {key}: {error}")]
    Limiter {
        /// The limit's full key.
        key: String,
        /// The runtime's refusal.
        #[source]
        error: RateLimitError,
    },
}

/// The configuration in use and a limiter for each of its limits.
struct Active {
    config: RlsConfig,
    limiters: HashMap<String, RateLimiter>,
    loaded: SystemTime,
}

/// Envoy's rate-limit service on distlock's limiters. Cheap to clone; see the
/// [module docs](super).
#[derive(Clone)]
pub struct RateLimitServer {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    settings: Settings,
    active: RwLock<Arc<Active>>,
    /// Limiters made for descriptors that bring their own limit (`limit` override), by rate.
    overrides: Mutex<HashMap<(u32, i32), RateLimiter>>,
    last_error: Mutex<Option<String>>,
}

impl std::fmt::Debug for RateLimitServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitServer")
            .field("domains", &self.active().config.domains())
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

/// The most limiters made for descriptors' own limits (`limit` overrides): a new rate past
/// that is answered `INVALID_ARGUMENT`, so that requests cannot grow the server's memory
/// without bound.
const MAX_OVERRIDES: usize = 1_000;

/// Subjects longer than this are hashed (the store bounds names to 512 bytes).
const MAX_SUBJECT: usize = 256;

impl RateLimitServer {
    /// A service answering `config`'s limits on `client`'s store.
    ///
    /// # Errors
    /// [`RlsError::Limiter`] when a limit's limiter cannot be built (a client whose store
    /// cannot count, such as a Redlock quorum without `counting_on`).
    pub fn new(client: Client, config: RlsConfig, settings: Settings) -> Result<Self, RlsError> {
        let active = build(&client, &settings, config)?;
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                settings,
                active: RwLock::new(Arc::new(active)),
                overrides: Mutex::default(),
                last_error: Mutex::default(),
            }),
        })
    }

    /// Puts `config` in use, or keeps the one in use and says why not. The counts of a limit
    /// whose key and rate did not change carry over (they live in the store under the
    /// limit's name).
    ///
    /// # Errors
    /// As [`new`](Self::new); the configuration in use is unchanged.
    pub fn reload(&self, config: RlsConfig) -> Result<(), RlsError> {
        match build(&self.inner.client, &self.inner.settings, config) {
            Ok(active) => {
                *self
                    .inner
                    .active
                    .write()
                    .unwrap_or_else(PoisonError::into_inner) = Arc::new(active);
                *self.lock_error() = None;
                metrics::config_loaded(true);
                Ok(())
            }
            Err(err) => {
                self.reload_failed(&err.to_string());
                Err(err)
            }
        }
    }

    /// Records a configuration that could not be read or taken.
    pub(crate) fn reload_failed(&self, why: &str) {
        tracing::error!(error = %why, "rate-limit configuration not loaded; the one in use is kept");
        *self.lock_error() = Some(why.to_owned());
        metrics::config_loaded(false);
    }

    fn lock_error(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.inner
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Why the last reload failed, if it did (cleared by the next one that succeeds).
    #[must_use]
    pub fn last_error(&self) -> Option<String> {
        self.lock_error().clone()
    }

    fn active(&self) -> Arc<Active> {
        Arc::clone(
            &self
                .inner
                .active
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// The domains of the configuration in use.
    #[must_use]
    pub fn domains(&self) -> Vec<String> {
        self.active()
            .config
            .domains()
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    /// The configuration in use, one limit per line (as envoyproxy/ratelimit's `/rlconfig`):
    /// `<full key>: unit=<unit> requests_per_unit=<n>, shadow_mode: <bool>`, then the files it
    /// was read from and when.
    #[must_use]
    pub fn dump(&self) -> String {
        use std::fmt::Write as _;
        let active = self.active();
        let mut out = String::new();
        for limit in active.config.limits() {
            match limit.rate {
                Some((n, unit)) => {
                    let _ = writeln!(
                        out,
                        "{}: unit={} requests_per_unit={n}, shadow_mode: {}",
                        limit.full_key,
                        unit.to_string().to_ascii_uppercase(),
                        limit.shadow
                    );
                }
                None => {
                    let _ = writeln!(out, "{}: unlimited", limit.full_key);
                }
            }
        }
        let since = active
            .loaded
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let _ = writeln!(
            out,
            "# from {} at unix {since}",
            active.config.sources.join(", ")
        );
        if let Some(error) = self.last_error() {
            let _ = writeln!(out, "# last reload failed: {error}");
        }
        out
    }

    /// The tonic service, to add to a `tonic::transport::Server`.
    #[must_use]
    pub fn into_service(self) -> RateLimitServiceServer<Self> {
        RateLimitServiceServer::new(self)
    }

    /// Answers one request (what the gRPC method does).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for an empty domain or descriptor list, a descriptor without
    /// entries or with too many limit overrides; `UNAVAILABLE` while the store does not
    /// answer and the outage answer is [`OutageAnswer::Unavailable`].
    pub async fn answer(
        &self,
        request: RateLimitRequest,
    ) -> Result<RateLimitResponse, tonic::Status> {
        let started = Instant::now();
        if request.domain.is_empty() {
            return Err(tonic::Status::invalid_argument(
                "rate limit domain must not be empty",
            ));
        }
        if request.descriptors.is_empty() {
            return Err(tonic::Status::invalid_argument(
                "rate limit descriptor list must not be empty",
            ));
        }
        if request.descriptors.iter().any(|d| d.entries.is_empty()) {
            return Err(tonic::Status::invalid_argument(
                "a rate limit descriptor has no entries",
            ));
        }
        let active = self.active();
        let domain = request.domain.as_str();
        let mut found: Vec<Option<Found>> = Vec::with_capacity(request.descriptors.len());
        for descriptor in &request.descriptors {
            found.push(self.find(&active, domain, descriptor)?);
        }
        // A limit named in another matched limit's `replaces` does not apply.
        let replaced: HashSet<&str> = found
            .iter()
            .flatten()
            .flat_map(|f| f.limit.replaces.iter().map(String::as_str))
            .collect();
        let checks = request
            .descriptors
            .iter()
            .zip(&found)
            .map(|(descriptor, found)| {
                let applies = found.as_ref().filter(|f| {
                    f.limit
                        .name
                        .as_deref()
                        .is_none_or(|name| !replaced.contains(name))
                });
                self.check(domain, descriptor, request.hits_addend, applies)
            });
        let outcomes = futures_util::future::join_all(checks).await;
        let mut statuses = Vec::with_capacity(outcomes.len());
        let mut headers = Vec::new();
        let mut tightest: Option<(&Outcome, u64)> = None;
        for outcome in &outcomes {
            let outcome = match outcome {
                Ok(outcome) => outcome,
                Err(status) => return Err(status.clone()),
            };
            statuses.push(outcome.status.clone());
            // The headers tell of the visible limit with the fewest requests left.
            if outcome.shown.is_some() {
                let remaining = u64::from(outcome.status.limit_remaining);
                if tightest.is_none_or(|(_, least)| remaining < least) {
                    tightest = Some((outcome, remaining));
                }
            }
        }
        if self.inner.settings.response_headers
            && let Some((outcome, _)) = tightest
            && let Some(shown) = &outcome.shown
        {
            headers = shown.headers(&outcome.status);
        }
        let over = statuses.iter().any(|s| s.code == Code::OverLimit as i32);
        metrics::request_answered(started.elapsed());
        Ok(RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            response_headers_to_add: headers,
            ..RateLimitResponse::default()
        })
    }

    /// The limit `descriptor` of `domain` gets: its own override, or the configuration's.
    fn find(
        &self,
        active: &Active,
        domain: &str,
        descriptor: &RateLimitDescriptor,
    ) -> Result<Option<Found>, tonic::Status> {
        if let Some(limit) = &descriptor.limit {
            let limiter = self.override_limiter(limit.requests_per_unit, limit.unit)?;
            let unit = unit_of(limit.unit).ok_or_else(|| {
                tonic::Status::invalid_argument("a descriptor's limit override has no valid unit")
            })?;
            let full_key = format!("{domain}.{}", descriptor_key(descriptor));
            return Ok(Some(Found {
                limit: Arc::new(override_limit(full_key, limit.requests_per_unit, unit)),
                limiter,
            }));
        }
        let entries: Vec<Entry<'_>> = descriptor
            .entries
            .iter()
            .map(|e| Entry {
                key: &e.key,
                value: &e.value,
            })
            .collect();
        let Some(limit) = active
            .config
            .domains
            .get(domain)
            .and_then(|node| node.limit_for(&entries))
        else {
            return Ok(None);
        };
        let limiter = active.limiters.get(&limit.full_key).cloned();
        Ok(Some(Found { limit, limiter }))
    }

    /// The limiter for a descriptor's own `requests_per_unit` per `unit` (a `limit`
    /// override), made once per rate.
    fn override_limiter(&self, n: u32, unit: i32) -> Result<Option<RateLimiter>, tonic::Status> {
        if n == 0 {
            return Ok(None);
        }
        let mut overrides = self
            .inner
            .overrides
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(limiter) = overrides.get(&(n, unit)) {
            return Ok(Some(limiter.clone()));
        }
        if overrides.len() >= MAX_OVERRIDES {
            return Err(tonic::Status::invalid_argument(
                "too many distinct limit overrides",
            ));
        }
        let unit_of = unit_of(unit).ok_or_else(|| {
            tonic::Status::invalid_argument("a descriptor's limit override has no valid unit")
        })?;
        let policy = Rate::per(n, unit_of.period())
            .and_then(|rate| Policy::fixed_window(format!("rls-override-{n}-{unit_of}"), rate))
            .map_err(|e| tonic::Status::invalid_argument(format!("limit override: {e}")))?;
        let limiter = limiter(
            &self.inner.client,
            &self.inner.settings,
            vec![policy],
            false,
            false,
        )
        .map_err(|e| tonic::Status::internal(format!("limit override: {e}")))?;
        overrides.insert((n, unit), limiter.clone());
        Ok(Some(limiter))
    }

    /// Checks one descriptor against `found` (its limit, unless it has none or was
    /// replaced), charging `hits_addend` (the descriptor's own, else the request's, at least
    /// 1).
    async fn check(
        &self,
        domain: &str,
        descriptor: &RateLimitDescriptor,
        request_hits: u32,
        found: Option<&Found>,
    ) -> Result<Outcome, tonic::Status> {
        let Some(found) = found else {
            return Ok(Outcome::unlimited_or_unmatched(None));
        };
        let limit = &found.limit;
        let cost = descriptor
            .hits_addend
            .as_ref()
            .map_or_else(|| u64::from(request_hits.max(1)), |own| own.value);
        let cost = u32::try_from(cost).unwrap_or(u32::MAX);
        let key = metrics::key(limit, descriptor);
        let (n, unit) = match (&limit.bound, limit.rate) {
            (Bound::Unlimited, _) | (_, None) => {
                return Ok(Outcome::unlimited_or_unmatched(Some(limit)));
            }
            (_, Some(rate)) => rate,
        };
        let current = CurrentLimit {
            // Which limit answered: its `name`, else its key; nothing for a hidden one.
            name: if limit.hidden {
                String::new()
            } else {
                limit.name.clone().unwrap_or_else(|| limit.full_key.clone())
            },
            requests_per_unit: n,
            unit: unit.proto(),
        };
        metrics::hits(domain, &key, cost);
        let Some(limiter) = &found.limiter else {
            // `requests_per_unit: 0`: nothing passes.
            let code = if limit.shadow {
                metrics::shadowed(domain, &key, cost);
                Code::Ok
            } else {
                metrics::over_limit(domain, &key, cost);
                Code::OverLimit
            };
            return Ok(Outcome {
                status: DescriptorStatus {
                    code: code as i32,
                    current_limit: Some(current),
                    limit_remaining: 0,
                    duration_until_reset: Some(proto_duration(unit.period())),
                    ..DescriptorStatus::default()
                },
                shown: (!limit.hidden).then_some(Shown { n, unit }),
            });
        };
        let subject = subject(descriptor);
        let decided = if descriptor.is_negative_hits {
            limiter.refund(&subject, cost).await
        } else {
            limiter.check_n(&subject, cost).await
        };
        let decision = match decided {
            Ok(decision) => decision,
            Err(RateLimitError::CostTooLarge { .. }) => {
                metrics::over_limit(domain, &key, cost);
                return Ok(Outcome {
                    status: DescriptorStatus {
                        code: if limit.shadow {
                            Code::Ok
                        } else {
                            Code::OverLimit
                        } as i32,
                        current_limit: Some(current),
                        limit_remaining: 0,
                        duration_until_reset: Some(proto_duration(unit.period())),
                        ..DescriptorStatus::default()
                    },
                    shown: (!limit.hidden).then_some(Shown { n, unit }),
                });
            }
            Err(err) => {
                return match self.inner.settings.outage {
                    OutageAnswer::OverLimit => Ok(Outcome {
                        status: DescriptorStatus {
                            code: Code::OverLimit as i32,
                            current_limit: Some(current),
                            ..DescriptorStatus::default()
                        },
                        shown: None,
                    }),
                    _ => Err(tonic::Status::unavailable(format!(
                        "the rate-limit store did not answer: {err}"
                    ))),
                };
            }
        };
        let code = status_code(
            &decision,
            limit,
            self.inner.settings.near_limit_ratio,
            domain,
            &key,
            cost,
        );
        Ok(Outcome {
            status: DescriptorStatus {
                code: code as i32,
                current_limit: Some(current),
                limit_remaining: u32::try_from(decision.remaining).unwrap_or(u32::MAX),
                // Refused: when the client may pass again (a lockout's end included), which
                // is what a caller of `duration_until_reset` wants to know.
                duration_until_reset: Some(proto_duration(if decision.allowed {
                    decision.reset_after
                } else {
                    decision.retry_after.max(decision.reset_after)
                })),
                ..DescriptorStatus::default()
            },
            shown: (!limit.hidden).then_some(Shown { n, unit }),
        })
    }
}

/// The code of a decision, counted in the metrics.
fn status_code(
    decision: &Decision,
    limit: &Limit,
    near_ratio: f64,
    domain: &str,
    key: &str,
    cost: u32,
) -> Code {
    if decision.shadowed {
        metrics::shadowed(domain, key, cost);
        return Code::Ok;
    }
    if !decision.allowed {
        metrics::over_limit(domain, key, cost);
        return Code::OverLimit;
    }
    let used = decision.limit.saturating_sub(decision.remaining);
    #[expect(
        clippy::cast_precision_loss,
        reason = "a share of a limit, for a metric"
    )]
    let near = used as f64 >= near_ratio * decision.limit as f64;
    if near {
        metrics::near_limit(domain, key, cost);
    }
    metrics::within_limit(domain, key, cost);
    debug_assert!(!limit.full_key.is_empty());
    Code::Ok
}

/// A descriptor's configured limit and its limiter (`None` for a limit of 0).
struct Found {
    limit: Arc<Limit>,
    limiter: Option<RateLimiter>,
}

/// One descriptor's answer, and what the response headers may say of it.
struct Outcome {
    status: DescriptorStatus,
    /// The rate, for the headers; `None` for a hidden or an unlimited limit.
    shown: Option<Shown>,
}

impl Outcome {
    /// `OK` for a descriptor without a limit, or an unlimited one (whose remaining is the
    /// largest there is, as envoyproxy/ratelimit says).
    fn unlimited_or_unmatched(limit: Option<&Limit>) -> Self {
        Self {
            status: DescriptorStatus {
                code: Code::Ok as i32,
                limit_remaining: if limit.is_some() { u32::MAX } else { 0 },
                ..DescriptorStatus::default()
            },
            shown: None,
        }
    }
}

/// A visible limit's rate, for the response headers.
struct Shown {
    n: u32,
    unit: Unit,
}

impl Shown {
    /// `x-ratelimit-limit: <n>, <n>;w=<window seconds>`, `x-ratelimit-remaining`,
    /// `x-ratelimit-reset` (whole seconds until the window resets), as envoyproxy/ratelimit
    /// writes them.
    fn headers(&self, status: &DescriptorStatus) -> Vec<HeaderValue> {
        let window = self.unit.period().as_secs();
        let reset = status.duration_until_reset.as_ref().map_or(0, |d| {
            let nanos = u64::try_from(d.nanos).unwrap_or(0);
            u64::try_from(d.seconds).unwrap_or(0) + u64::from(nanos > 0)
        });
        let header = |key: &str, value: String| HeaderValue {
            key: key.to_owned(),
            value,
            ..HeaderValue::default()
        };
        vec![
            header(
                "x-ratelimit-limit",
                format!("{}, {};w={window}", self.n, self.n),
            ),
            header("x-ratelimit-remaining", status.limit_remaining.to_string()),
            header("x-ratelimit-reset", reset.to_string()),
        ]
    }
}

/// A limit made for a descriptor's own `limit` override (counted by the override's own
/// limiter; `requests_per_unit: 0` lets nothing through).
fn override_limit(full_key: String, n: u32, unit: Unit) -> Limit {
    Limit {
        full_key,
        name: None,
        replaces: Vec::new(),
        rate: Some((n, unit)),
        bound: if n == 0 {
            Bound::Nothing
        } else {
            Bound::Policies {
                policies: Vec::new(),
                any_of: false,
            }
        },
        shadow: false,
        detailed_metric: false,
        hidden: false,
    }
}

/// The unit of an override (`envoy.type.v3.RateLimitUnit`, whose numbers are the
/// response's).
fn unit_of(unit: i32) -> Option<Unit> {
    Some(match unit {
        1 => Unit::Second,
        2 => Unit::Minute,
        3 => Unit::Hour,
        4 => Unit::Day,
        5 => Unit::Month,
        6 => Unit::Year,
        7 => Unit::Week,
        _ => return None,
    })
}

/// The subject a descriptor is counted under in its limit's limiter: its key, hashed when
/// long.
fn subject(descriptor: &RateLimitDescriptor) -> String {
    let key = descriptor_key(descriptor);
    if key.len() <= MAX_SUBJECT {
        return key;
    }
    let digest = Sha256::digest(key.as_bytes());
    let mut subject = String::from("h:");
    for b in digest {
        use std::fmt::Write as _;
        let _ = write!(subject, "{b:02x}");
    }
    subject
}

fn proto_duration(d: Duration) -> ProtoDuration {
    ProtoDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// Builds a limiter for every limit of `config`.
fn build(client: &Client, settings: &Settings, config: RlsConfig) -> Result<Active, RlsError> {
    let mut limiters = HashMap::new();
    for limit in config.limits() {
        let Bound::Policies { policies, any_of } = &limit.bound else {
            continue;
        };
        let built = limiter(client, settings, policies.clone(), *any_of, limit.shadow).map_err(
            |error| RlsError::Limiter {
                key: limit.full_key.clone(),
                error,
            },
        )?;
        limiters.insert(limit.full_key.clone(), built);
    }
    Ok(Active {
        config,
        limiters,
        loaded: SystemTime::now(),
    })
}

/// One limiter of `policies`, with the service's settings.
fn limiter(
    client: &Client,
    settings: &Settings,
    policies: Vec<Policy>,
    any_of: bool,
    shadow: bool,
) -> Result<RateLimiter, RateLimitError> {
    let mut builder = if any_of {
        client.rate_limiter_any(policies)
    } else {
        client.rate_limiter_all(policies)
    }
    .deadline(settings.deadline)
    .shadow(shadow);
    builder = match settings.outage {
        OutageAnswer::Ok => builder.on_outage(Outage::FailOpen),
        OutageAnswer::LocalFallback => builder.on_outage(Outage::LocalFallback),
        OutageAnswer::Unavailable | OutageAnswer::OverLimit => {
            builder.on_outage(Outage::FailClosed)
        }
    };
    // Always set: 0 means none here, where the limiter's own default is a cache.
    builder = builder.deny_cache(settings.deny_cache);
    if let Some((share, sync)) = settings.hybrid {
        builder = builder.hybrid(share, sync);
    }
    builder.build()
}

#[tonic::async_trait]
impl RateLimitService for RateLimitServer {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        self.answer(request.into_inner())
            .await
            .map(tonic::Response::new)
    }
}

/// The policy name a configured limit counts under (for tests and tools).
#[must_use]
pub fn limit_policy_name(full_key: &str) -> String {
    policy_name(full_key)
}
