use std::sync::Arc;
use std::time::Duration;

use distlock::ratelimit::RateLimiter;
use http::HeaderValue;
use tower::Layer;

use super::RateLimit;
use super::headers::{HeaderStyle, policy_field};

/// What a request gets when the key extractor finds no key in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissingKey {
    /// `400 Bad Request`; the inner service is not called. The default: a client can always
    /// leave a header out, so "no key" must not mean "no limit" unless you say so.
    #[default]
    Reject,
    /// Call the inner service unmetered. For routes where only some requests are limited.
    Allow,
}

/// A limiter and its precomputed `RateLimit-Policy` field.
#[derive(Clone, Debug)]
pub(crate) struct Limiter {
    pub(crate) limiter: RateLimiter,
    pub(crate) policy_field: HeaderValue,
}

impl Limiter {
    fn new(limiter: RateLimiter) -> Self {
        let policy_field = policy_field(limiter.policies());
        Self {
            limiter,
            policy_field,
        }
    }
}

/// The settings every service of one layer shares.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) default: Limiter,
    /// Per-route limiters, by axum's matched route template.
    pub(crate) routes: Vec<(String, Limiter)>,
    pub(crate) cost: u32,
    pub(crate) max_wait: Duration,
    pub(crate) headers: HeaderStyle,
    pub(crate) missing_key: MissingKey,
}

impl Config {
    /// The limiter for a request: its route's, else the default.
    pub(crate) fn limiter_for(&self, matched: Option<&str>) -> &Limiter {
        matched
            .and_then(|m| self.routes.iter().find(|(route, _)| route == m))
            .map_or(&self.default, |(_, l)| l)
    }
}

/// Applies the [`RateLimit`] middleware: each request is checked against a
/// [`RateLimiter`] under the subject its key extractor finds, and refused with
/// `429 Too Many Requests` when denied.
///
/// Defaults: cost 1 per request, no waiting, the IETF `RateLimit-Policy` / `RateLimit`
/// fields on every response (no `X-RateLimit-*`), `400 Bad Request` for a request without a
/// key. What happens when the store is down is the limiter's
/// [`Outage`](distlock::ratelimit::Outage) policy.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use axum::{Router, routing::{get, post}};
/// use distlock::ratelimit::{Policy, Rate};
/// use distlock_tower::client_ip::ClientIp;
/// use distlock_tower::rate_limit::RateLimitLayer;
///
/// let client = distlock::Client::in_memory(); // Client::connect("redis://...") in production
/// let api = client.rate_limiter(Policy::gcra("api", Rate::per_second(10)?.burst(20)?)?);
/// let search = client.rate_limiter(Policy::sliding_log("search", Rate::per_minute(30)?)?);
///
/// // Per client IP behind a load balancer in 10.0.0.0/8; searches get their own, stricter
/// // limiter; a request over the limit that would pass within 250 ms waits instead.
/// let app: Router = Router::new()
///     .route("/items", get(|| async { "items" }))
///     .route("/search", post(|| async { "results" }))
///     .route_layer(
///         RateLimitLayer::new(api, ClientIp::trusting(["10.0.0.0/8".parse()?]))
///             .route("/search", search)
///             .wait(Duration::from_millis(250))
///             .legacy_headers(true),
///     );
/// // Serve with `app.into_make_service_with_connect_info::<SocketAddr>()`.
/// # Ok(()) }
/// ```
///
/// The [module docs](super) show the responses.
#[derive(Clone, Debug)]
#[must_use = "a layer does nothing until it wraps a service"]
pub struct RateLimitLayer<K> {
    config: Config,
    extract: K,
}

impl<K> RateLimitLayer<K> {
    /// Limits each request by `limiter`, under the subject `extract` finds in it (see
    /// [`extract`](crate::extract) and [`ClientIp`](crate::client_ip::ClientIp)).
    pub fn new(limiter: RateLimiter, extract: K) -> Self {
        Self {
            config: Config {
                default: Limiter::new(limiter),
                routes: Vec::new(),
                cost: 1,
                max_wait: Duration::ZERO,
                headers: HeaderStyle {
                    ietf: true,
                    legacy: false,
                },
                missing_key: MissingKey::default(),
            },
            extract,
        }
    }

    /// Uses `limiter` instead of the default one for requests whose matched route (axum's
    /// [`MatchedPath`](axum::extract::MatchedPath), e.g. `"/search/{term}"`) is `route`: one
    /// layer on the whole router with a policy table. Give each route's policies their own
    /// names unless routes should share a budget (same policy name, same counter). A route
    /// given twice keeps its first limiter.
    ///
    /// The other way is to stack one layer per route with `MethodRouter::layer` or
    /// `Router::route_layer` on nested routers; both work.
    ///
    /// # Panics
    /// If the layer's [`cost`](Self::cost) can never pass one of `limiter`'s policies.
    pub fn route(mut self, route: impl Into<String>, limiter: RateLimiter) -> Self {
        assert_cost_fits(self.config.cost, &limiter);
        self.config
            .routes
            .push((route.into(), Limiter::new(limiter)));
        self
    }

    /// What each request costs (default 1). Use one layer per cost, e.g. a heavier cost on
    /// an expensive route.
    ///
    /// # Panics
    /// If `cost` is more than some policy allows at once: such a layer would refuse every
    /// request, so it is refused where the router is built.
    pub fn cost(mut self, cost: u32) -> Self {
        assert_cost_fits(cost, &self.config.default.limiter);
        for (_, l) in &self.config.routes {
            assert_cost_fits(cost, &l.limiter);
        }
        self.config.cost = cost;
        self
    }

    /// Waits instead of refusing when the request would be allowed within `max_wait`
    /// (default zero: refuse at once): the leaky bucket as a queue. The request sleeps for
    /// the decision's `retry_after` and is checked again, as long as its total wait stays
    /// within `max_wait`. Nothing is consumed while it waits, so dropping it (the client
    /// went away, a timeout fired) costs nothing.
    pub fn wait(mut self, max_wait: Duration) -> Self {
        self.config.max_wait = max_wait;
        self
    }

    /// Whether responses carry the IETF `RateLimit-Policy` and `RateLimit` fields (default
    /// on).
    pub fn ietf_headers(mut self, on: bool) -> Self {
        self.config.headers.ietf = on;
        self
    }

    /// Whether responses carry `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
    /// `X-RateLimit-Reset` (seconds until full) for the binding policy (default off).
    pub fn legacy_headers(mut self, on: bool) -> Self {
        self.config.headers.legacy = on;
        self
    }

    /// What a request without a key gets (default [`MissingKey::Reject`]).
    pub fn on_missing_key(mut self, behaviour: MissingKey) -> Self {
        self.config.missing_key = behaviour;
        self
    }
}

fn assert_cost_fits(cost: u32, limiter: &RateLimiter) {
    if let Some(p) = limiter.policies().iter().find(|p| cost > p.limit()) {
        panic!(
            "RateLimitLayer cost {cost} can never pass policy `{}`, which allows at most {} at once",
            p.name(),
            p.limit()
        );
    }
}

impl<S, K: Clone> Layer<S> for RateLimitLayer<K> {
    type Service = RateLimit<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::new(inner, Arc::new(self.config.clone()), self.extract.clone())
    }
}
