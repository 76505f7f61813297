use std::sync::Arc;
use std::time::Duration;

use distlock::ratelimit::RateLimiter;
use http::HeaderValue;

use super::RateLimit;
use super::exempt::{Exemptions, RequestHead};
use super::headers::{HeaderStyle, policy_field};
use super::settle::{SettleFn, Settlement};
use crate::client_ip::Cidr;
use crate::config_error::ConfigError;
use crate::extract::MissingKey;
use crate::refusal::{MakeRefusal, PlainText};
use crate::settings::LayerConfig;

/// A limiter and its precomputed `RateLimit-Policy` field.
#[derive(Clone, Debug)]
pub(crate) struct Limiter {
    pub(crate) limiter: RateLimiter,
    pub(crate) policy_field: HeaderValue,
}

impl Limiter {
    fn new(limiter: RateLimiter) -> Self {
        let policy_field = policy_field(limiter.policies(), &[]);
        Self {
            limiter,
            policy_field,
        }
    }

    /// The `RateLimit-Policy` field again, without the `hidden` policies.
    fn hide(&mut self, hidden: &[String]) {
        self.policy_field = policy_field(self.limiter.policies(), hidden);
    }
}

/// The settings every service of one layer shares.
pub(crate) type Config<K, R> = LayerConfig<RateOptions<K>, R>;

/// What a rate-limit layer is set to do, besides its refusal hook.
#[derive(Clone)]
pub(crate) struct RateOptions<K> {
    /// Where a request's subject comes from.
    pub(crate) extract: K,
    pub(crate) default: Limiter,
    /// Per-route limiters, by axum's matched route template.
    pub(crate) routes: Vec<(String, Limiter)>,
    pub(crate) cost: u32,
    /// A cost read from each request, and the most it may be.
    pub(crate) cost_by: Option<CostBy>,
    pub(crate) max_wait: Duration,
    pub(crate) headers: HeaderStyle,
    /// Policies left out of every field and never named to the client.
    pub(crate) hidden: Arc<[String]>,
    pub(crate) missing_key: MissingKey,
    /// Requests let through without a check.
    pub(crate) exempt: Exemptions,
    /// What a passed request really cost, asked once its response has been sent.
    pub(crate) settle: Option<SettleFn>,
}

/// A request's cost from its head ([`RateLimitLayerBuilder::cost_by`]).
#[derive(Clone)]
pub(crate) struct CostBy {
    pub(crate) cap: u32,
    pub(crate) cost: Arc<dyn Fn(&RequestHead<'_>) -> u32 + Send + Sync>,
}

impl<K> RateOptions<K> {
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
/// [`new`](Self::new) gives the defaults: cost 1 per request, no waiting, the IETF
/// `RateLimit-Policy` / `RateLimit` fields on every response (no `X-RateLimit-*`),
/// `400 Bad Request` for a request without a key (and always for a request whose key is
/// invalid). Anything else is set on the [`builder`](Self::builder), whose
/// [`build`](RateLimitLayerBuilder::build) checks it all at once and returns a
/// [`ConfigError`] for a cost some policy can never allow: nothing here panics. What happens
/// when the store is down is the limiter's [`Outage`](distlock::ratelimit::Outage) policy.
///
/// Layers stack: an outer layer (say, per client IP) and an inner one (per API key) each
/// judge the request, and both show in the `RateLimit` fields and in the response's
/// [`Checks`](super::Checks).
///
/// `R` makes the responses the layer answers itself (`429`, `503`, `400`):
/// [`PlainText`] unless the builder set another with
/// [`refusal`](RateLimitLayerBuilder::refusal).
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
/// let api = client.rate_limiter(Policy::gcra("api", Rate::per_second(10)?.burst(20)?)?).build()?;
/// let search = client.rate_limiter(Policy::sliding_log("search", Rate::per_minute(30)?)?).build()?;
///
/// // Per client IP behind a load balancer in 10.0.0.0/8; searches get their own, stricter
/// // limiter; a request over the limit that would pass within 250 ms waits instead.
/// let layer = RateLimitLayer::builder(api, ClientIp::trusting(["10.0.0.0/8".parse()?]))
///     .route("/search", search)
///     .wait(Duration::from_millis(250))
///     .legacy_headers(true)
///     .build()?;
/// let app: Router = Router::new()
///     .route("/items", get(|| async { "items" }))
///     .route("/search", post(|| async { "results" }))
///     .route_layer(layer);
/// // Serve with `app.into_make_service_with_connect_info::<SocketAddr>()`.
/// # Ok(()) }
/// ```
///
/// The [module docs](super) show the responses.
#[must_use = "a layer does nothing until it wraps a service"]
pub struct RateLimitLayer<K, R = PlainText> {
    pub(crate) config: Arc<Config<K, R>>,
}

impl_layer!(RateLimitLayer => RateLimit);

impl<K> RateLimitLayer<K> {
    /// Limits each request by `limiter`, under the subject `extract` finds in it (see
    /// [`extract`](crate::extract) and [`ClientIp`](crate::client_ip::ClientIp)), with the
    /// default settings (a cost of 1 fits every policy, so this cannot fail).
    pub fn new(limiter: RateLimiter, extract: K) -> Self {
        RateLimitLayer {
            config: Arc::new(Self::builder(limiter, extract).config),
        }
    }

    /// A layer limiting as [`new`](Self::new) does, with settings of your own: set them on
    /// the builder, then [`build`](RateLimitLayerBuilder::build) it.
    pub fn builder(limiter: RateLimiter, extract: K) -> RateLimitLayerBuilder<K> {
        RateLimitLayerBuilder {
            config: LayerConfig {
                options: RateOptions {
                    extract,
                    default: Limiter::new(limiter),
                    routes: Vec::new(),
                    cost: 1,
                    cost_by: None,
                    max_wait: Duration::ZERO,
                    headers: HeaderStyle {
                        ietf: true,
                        legacy: false,
                    },
                    hidden: Arc::from([]),
                    missing_key: MissingKey::default(),
                    exempt: Exemptions::default(),
                    settle: None,
                },
                refusal: PlainText,
            },
        }
    }
}

/// The settings of a [`RateLimitLayer`], checked together by [`build`](Self::build). Made by
/// [`RateLimitLayer::builder`]; consuming, as the runtime's builders.
#[must_use = "a builder does nothing until it is built"]
pub struct RateLimitLayerBuilder<K, R = PlainText> {
    config: Config<K, R>,
}

impl<K, R> RateLimitLayerBuilder<K, R> {
    /// Makes the responses the layer answers itself with `make`: a closure
    /// `Fn(&Refusal) -> Response<B>`, [`ProblemDetails`](crate::refusal::ProblemDetails) for
    /// RFC 9457 JSON, or your own [`MakeRefusal`]. The default, [`PlainText`], answers a short
    /// `text/plain` sentence.
    ///
    /// Whatever `make` returns, the layer adds `Retry-After` if it is missing, the rate-limit
    /// fields of a `429` (as configured), and the [`Refusal`](crate::refusal::Refusal) to the
    /// response's extensions; see [`refusal`](crate::refusal).
    pub fn refusal<M: MakeRefusal>(self, make: M) -> RateLimitLayerBuilder<K, M> {
        RateLimitLayerBuilder {
            config: self.config.with_refusal(make),
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
    #[cfg(feature = "axum")]
    #[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
    pub fn route(mut self, route: impl Into<String>, limiter: RateLimiter) -> Self {
        self.config
            .options
            .routes
            .push((route.into(), Limiter::new(limiter)));
        self
    }

    /// What each request costs (default 1). Use one layer per cost, e.g. a heavier cost on
    /// an expensive route. A cost of 0 consumes nothing: the request passes while its
    /// subject could still afford one more, which makes a route that is refused once others
    /// have used up the budget, without spending any of it.
    ///
    /// At most what every policy of the layer (default or per route) allows at once: a
    /// layer with a larger cost would refuse every request, so [`build`](Self::build)
    /// refuses it.
    pub fn cost(mut self, cost: u32) -> Self {
        self.config.options.cost = cost;
        self
    }

    /// Reads each request's cost from its head with `cost` (a batch's size from a header or
    /// the query, a weight by route), instead of one [`cost`](Self::cost) for all. `cap` is
    /// the most a request may cost: one that `cost` prices higher is answered `413 Content
    /// Too Large` without a round trip (never charged only `cap`), and
    /// [`build`](Self::build) refuses a `cap` that some policy can never allow at once. A
    /// cost of 0 spends nothing, as with [`cost`](Self::cost).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::ratelimit::{Policy, Rate};
    /// use distlock_tower::extract::Header;
    /// use distlock_tower::rate_limit::RateLimitLayer;
    ///
    /// let client = distlock::Client::in_memory();
    /// let sends = client.rate_limiter(Policy::gcra("sends", Rate::per_second(100)?)?).build()?;
    /// // `X-Batch-Size: 20` costs 20; no header costs 1; more than 100 is refused with 413.
    /// let layer = RateLimitLayer::builder(sends, Header::from_static("x-api-key"))
    ///     .cost_by(100, |head| {
    ///         head.headers
    ///             .get("x-batch-size")
    ///             .and_then(|v| v.to_str().ok()?.parse().ok())
    ///             .unwrap_or(1)
    ///     })
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok(()) }
    /// ```
    pub fn cost_by(
        mut self,
        cap: u32,
        cost: impl Fn(&RequestHead<'_>) -> u32 + Send + Sync + 'static,
    ) -> Self {
        self.config.options.cost_by = Some(CostBy {
            cap,
            cost: Arc::new(cost),
        });
        self
    }

    /// Waits instead of refusing when the request would be allowed within `max_wait`
    /// (default zero: refuse at once): the leaky bucket as a queue. With GCRA and
    /// token-bucket policies the request reserves its turn in one round trip and sleeps until
    /// it, so waiting requests pass in the order they came, across every replica, with no
    /// retry race; dropping it (the client went away, a timeout fired) gives the turn back.
    /// With window algorithms it sleeps for the decision's `retry_after` and is checked
    /// again, as long as its total wait stays within `max_wait`.
    pub fn wait(mut self, max_wait: Duration) -> Self {
        self.config.options.max_wait = max_wait;
        self
    }

    /// Whether responses carry the IETF `RateLimit-Policy` and `RateLimit` fields (default
    /// on).
    pub fn ietf_headers(mut self, on: bool) -> Self {
        self.config.options.headers.ietf = on;
        self
    }

    /// Keeps the policies named in `names` out of everything a client sees: the
    /// `RateLimit-Policy` and `RateLimit` fields, the `X-RateLimit-*` fields (which then tell
    /// of the visible policy with the fewest left, or are left out) and the name of the
    /// policy that refused ([`Refusal::policy`](crate::refusal::Refusal::policy), the
    /// `policy` member of a problem document). For limits a client should not learn of (an
    /// abuse threshold, a cost guard). They still count and refuse; logs, metrics and the
    /// response's [`Checks`](super::Checks) name them. Adds to the list; names of no policy of
    /// the layer are ignored.
    pub fn hide_policies<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut hidden: Vec<String> = self.config.options.hidden.to_vec();
        hidden.extend(names.into_iter().map(Into::into));
        self.config.options.hidden = hidden.into();
        self
    }

    /// Whether responses carry `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
    /// `X-RateLimit-Reset` (seconds until full) for the binding policy (default off).
    pub fn legacy_headers(mut self, on: bool) -> Self {
        self.config.options.headers.legacy = on;
        self
    }

    /// What a request without a key gets (default [`MissingKey::Reject`]: `400`). A request
    /// whose key is [invalid](crate::extract::Extracted::Invalid) (a key header sent twice,
    /// over-long, not text) is answered `400` whatever this says, so that no client passes
    /// unmetered by malforming its key.
    pub fn on_missing_key(mut self, behaviour: MissingKey) -> Self {
        self.config.options.missing_key = behaviour;
        self
    }

    /// Settles each passed request's cost once its response body has been sent, or dropped:
    /// `settle` gets the [`Settlement`] (status, body bytes sent, time taken, what was
    /// charged up front, whether the body was sent whole) and returns what the request really
    /// costs; the layer refunds the difference ([`RateLimiter::refund`]) or charges the rest
    /// ([`RateLimiter::penalize`]) in the background, never holding up the response. For
    /// costs known only at the end: charge an estimate up front (the [`cost`](Self::cost) or
    /// [`cost_by`](Self::cost_by)), settle by size or time; or give back what failed
    /// ([`refund_on`](Self::refund_on)). A settlement that cannot reach the store is logged
    /// at WARN and the up-front cost stands. Requests that were not checked (exempt, without
    /// a key), refused ones and ones the store did not count (shadow mode letting a denial
    /// through, an outage's fail-open or local fallback) are not settled. A response sent
    /// whole with its head (an empty body, a reply to `HEAD`) settles at once. A second
    /// call replaces the first.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::ratelimit::{Policy, Rate};
    /// use distlock_tower::extract::Header;
    /// use distlock_tower::rate_limit::RateLimitLayer;
    ///
    /// let client = distlock::Client::in_memory();
    /// let egress = client.rate_limiter(Policy::gcra("egress-kib", Rate::per_second(1024)?)?).build()?;
    /// // One unit up front; then one unit per KiB actually sent.
    /// let layer = RateLimitLayer::builder(egress, Header::from_static("x-api-key"))
    ///     .settle(|done| u32::try_from(done.body_bytes.div_ceil(1024)).unwrap_or(u32::MAX).max(1))
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok(()) }
    /// ```
    pub fn settle(mut self, settle: impl Fn(&Settlement) -> u32 + Send + Sync + 'static) -> Self {
        self.config.options.settle = Some(Arc::new(settle));
        self
    }

    /// Gives a passed request's cost back when its response's status is one `refund` picks
    /// (say, `5xx`: the client should not pay for the server's failure), once the response
    /// has been sent; other responses keep their cost. A [`settle`](Self::settle) function
    /// with that one rule; it replaces any other.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::ratelimit::{Policy, Rate};
    /// use distlock_tower::client_ip::ClientIp;
    /// use distlock_tower::rate_limit::RateLimitLayer;
    ///
    /// let client = distlock::Client::in_memory();
    /// let api = client.rate_limiter(Policy::gcra("api", Rate::per_second(10)?)?).build()?;
    /// let layer = RateLimitLayer::builder(api, ClientIp::peer())
    ///     .refund_on(|status| status.is_server_error())
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok(()) }
    /// ```
    pub fn refund_on(
        self,
        refund: impl Fn(http::StatusCode) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.settle(move |done| if refund(done.status) { 0 } else { done.charged })
    }

    /// Lets a request through without a check (no round trip, nothing counted) when
    /// `predicate` says so, from the request's head: health checks, a monitoring agent's
    /// header, an internal route. Checked first, before the key is read. The response
    /// carries the [`Exemption`](super::Exemption) in its extensions instead of a
    /// [`Check`](super::Check). A second call replaces the first predicate.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::ratelimit::{Policy, Rate};
    /// use distlock_tower::client_ip::ClientIp;
    /// use distlock_tower::rate_limit::RateLimitLayer;
    ///
    /// let client = distlock::Client::in_memory();
    /// let limiter = client.rate_limiter(Policy::gcra("api", Rate::per_second(10)?)?).build()?;
    /// let layer = RateLimitLayer::builder(limiter, ClientIp::peer())
    ///     .skip(|head| head.uri.path() == "/healthz")
    ///     .allow_keys(["10.1.2.3"]) // the monitoring host's address, as the key reads it
    ///     .allow_networks(["127.0.0.0/8".parse()?]) // calls from this host
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok(()) }
    /// ```
    pub fn skip(
        mut self,
        predicate: impl Fn(&RequestHead<'_>) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.config.options.exempt.skip = Some(std::sync::Arc::new(predicate));
        self
    }

    /// Lets requests whose key (what the layer's extractor reads: an address, an API key) is
    /// one of `keys` through without a check: internal services, a partner without limits.
    /// Compared exactly, after the extractor (so with a [`Prefixed`](crate::extract::Prefixed)
    /// extractor, give the prefixed keys). Adds to the list.
    pub fn allow_keys<I, S>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config
            .options
            .exempt
            .keys
            .extend(keys.into_iter().map(Into::into));
        self
    }

    /// Lets requests whose connection comes from one of `networks` through without a check.
    /// The connection's peer address (axum's `ConnectInfo`), never a forwarded header, which a
    /// client can write: behind a proxy, every request's peer is the proxy, so list backend
    /// networks here, and use [`allow_keys`](Self::allow_keys) with a
    /// [`ClientIp`](crate::client_ip::ClientIp) key for clients behind it. Adds to the list.
    pub fn allow_networks(mut self, networks: impl IntoIterator<Item = Cidr>) -> Self {
        self.config.options.exempt.networks.extend(networks);
        self
    }

    /// The layer, or [`ConfigError::CostTooLarge`] if the [`cost`](Self::cost) is more than
    /// one of its policies (default or per route) allows at once: such a layer would refuse
    /// every request, so it is refused where the router is built.
    pub fn build(self) -> Result<RateLimitLayer<K, R>, ConfigError> {
        let options = &self.config.options;
        // The fixed cost, or the most a request's own cost may be.
        let cost = options.cost_by.as_ref().map_or(options.cost, |by| by.cap);
        check_cost_fits(cost, &options.default.limiter)?;
        for (_, l) in &options.routes {
            check_cost_fits(cost, &l.limiter)?;
        }
        let mut config = self.config;
        if !config.options.hidden.is_empty() {
            let hidden = Arc::clone(&config.options.hidden);
            config.options.default.hide(&hidden);
            for (_, limiter) in &mut config.options.routes {
                limiter.hide(&hidden);
            }
        }
        Ok(RateLimitLayer {
            config: Arc::new(config),
        })
    }
}

impl_builder_debug!(RateLimitLayerBuilder);

impl<K> std::fmt::Debug for RateOptions<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let routes: Vec<&str> = self.routes.iter().map(|(r, _)| &**r).collect();
        f.debug_struct("RateOptions")
            .field("limiter", &self.default.limiter)
            .field("routes", &routes)
            .field("cost", &self.cost)
            .field("cost_cap", &self.cost_by.as_ref().map(|by| by.cap))
            .field("max_wait", &self.max_wait)
            .field("headers", &self.headers)
            .field("missing_key", &self.missing_key)
            .field("exempt", &self.exempt)
            .finish_non_exhaustive()
    }
}

fn check_cost_fits(cost: u32, limiter: &RateLimiter) -> Result<(), ConfigError> {
    match limiter.policies().iter().find(|p| cost > p.limit()) {
        Some(p) => Err(ConfigError::CostTooLarge {
            cost,
            policy: p.name().to_owned(),
            capacity: p.limit(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use distlock::ratelimit::{Policy, Rate};

    use super::*;
    use crate::client_ip::ClientIp;

    fn limiter(name: &str, burst: u32) -> RateLimiter {
        let rate = Rate::per_minute(60)
            .and_then(|r| r.burst(burst))
            .expect("valid rate");
        distlock::Client::in_memory()
            .rate_limiter(Policy::gcra(name, rate).expect("valid policy"))
            .build()
            .expect("valid limiter")
    }

    #[test]
    fn a_cost_that_cannot_fit_is_a_typed_error() {
        let builder = || RateLimitLayer::builder(limiter("api", 5), ClientIp::peer());
        let err = builder().cost(6).build().err();
        assert_eq!(
            err,
            Some(ConfigError::CostTooLarge {
                cost: 6,
                policy: "api".to_owned(),
                capacity: 5
            })
        );
        let ok = builder().cost(5).build().expect("fits");
        assert_eq!(ok.config.options.cost, 5);
    }

    #[cfg(feature = "axum")]
    #[test]
    fn a_route_and_a_cost_that_cannot_fit_are_typed_errors() {
        let builder = || RateLimitLayer::builder(limiter("api", 5), ClientIp::peer());
        // A route whose policy cannot take the layer's cost, in either order: the cost is
        // checked against every limiter once, at build.
        let err = builder()
            .cost(3)
            .route("/small", limiter("small", 2))
            .build()
            .err();
        assert!(
            matches!(&err, Some(ConfigError::CostTooLarge { policy, .. }) if policy == "small"),
            "{err:?}"
        );
        let err = builder()
            .route("/small", limiter("small", 2))
            .cost(3)
            .build()
            .err();
        assert!(
            matches!(&err, Some(ConfigError::CostTooLarge { policy, .. }) if policy == "small"),
            "{err:?}"
        );
        assert!(err.is_some_and(|e| e.to_string().contains("can never pass policy `small`")));
        assert!(
            builder()
                .route("/small", limiter("small", 2))
                .cost(2)
                .build()
                .is_ok()
        );
    }

    /// Whatever cost a configuration file holds, the answer is a value, never a panic.
    #[test]
    fn no_cost_panics() {
        for cost in [0, 1, 5, 6, u32::MAX] {
            let built = std::panic::catch_unwind(|| {
                RateLimitLayer::builder(limiter("api", 5), ClientIp::peer())
                    .cost(cost)
                    .build()
                    .is_ok()
            });
            assert_eq!(built.ok(), Some(cost <= 5), "cost {cost}");
        }
    }
}
