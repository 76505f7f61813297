//! [`Checks`]: what the rate-limit layers decided, in the response's extensions.

use std::slice;

use distlock::ratelimit::Decision;
use http::Extensions;

/// One rate-limit layer's check of a request: the subject it limited and the limiter's
/// [`Decision`].
///
/// The decision says which policy bound ([`Decision::policy`]), what is left, and where the
/// answer came from ([`Decision::origin`]): the store, the limiter's deny cache, its local
/// fallback, or failing open while the store was away.
///
/// The subject is the key the extractor found (a client address, an API key): fine for your
/// logs if your logs may hold it, but it is not sent to the client.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Check {
    /// The rate-limit subject: the request's key.
    pub subject: String,
    /// The limiter's answer.
    pub decision: Decision,
}

impl Check {
    pub(crate) fn new(subject: String, decision: Decision) -> Self {
        Self { subject, decision }
    }
}

/// Every rate-limit layer's [`Check`] of a request, in the extensions of its response, for
/// outer layers and logging: innermost layer first, in the order of the members of the
/// `RateLimit` field.
///
/// A layer adds its check to every response it lets through, and to its own `429`; not to a
/// request it let through without a key ([`MissingKey::Allow`](crate::extract::MissingKey)),
/// nor to its `400` and `503` answers (their [`Refusal`](crate::refusal::Refusal) is in the
/// extensions instead).
///
/// ```
/// use axum::{Router, body::Body, middleware::{self, Next}, extract::Request, response::Response, routing::get};
/// use distlock::ratelimit::{Origin, Policy, Rate};
/// use distlock_tower::extract::Header;
/// use distlock_tower::rate_limit::{Checks, RateLimitLayer};
/// use tower::ServiceExt;
///
/// /// Logs which policy decided each request, and from where.
/// async fn log_decisions(request: Request, next: Next) -> Response {
///     let response = next.run(request).await;
///     if let Some(checks) = response.extensions().get::<Checks>() {
///         for check in checks {
///             let d = &check.decision;
///             println!("{} by {} ({:?}): {} left", check.subject, d.policy, d.origin, d.remaining);
///         }
///     }
///     response
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = distlock::Client::in_memory();
/// let limiter = client.rate_limiter(Policy::gcra("api", Rate::per_minute(60)?)?).build()?;
/// let app = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(RateLimitLayer::new(limiter, Header::from_static("x-api-key")))
///     .layer(middleware::from_fn(log_decisions));
///
/// let request = Request::get("/").header("x-api-key", "k1").body(Body::empty())?;
/// let response = app.oneshot(request).await?;
/// let checks = response.extensions().get::<Checks>().unwrap();
/// let check = checks.binding().unwrap();
/// assert_eq!((check.subject.as_str(), &*check.decision.policy), ("k1", "api"));
/// assert_eq!(check.decision.origin, Origin::Store);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checks {
    checks: Vec<Check>,
}

impl Checks {
    /// Adds `check` after those an inner layer recorded.
    pub(crate) fn record(extensions: &mut Extensions, check: Check) {
        match extensions.get_mut::<Self>() {
            Some(checks) => checks.checks.push(check),
            None => {
                extensions.insert(Self {
                    checks: vec![check],
                });
            }
        }
    }

    /// The checks, innermost layer first.
    pub fn iter(&self) -> slice::Iter<'_, Check> {
        self.checks.iter()
    }

    /// How many layers checked the request.
    #[must_use]
    pub fn len(&self) -> usize {
        self.checks.len()
    }

    /// Whether no layer did (never true of the value a layer inserts).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
    }

    /// The check that decided the response: the one that refused it, else the one with the
    /// fewest requests left (the innermost on a tie), as the `X-RateLimit-*` fields show it.
    #[must_use]
    pub fn binding(&self) -> Option<&Check> {
        self.checks
            .iter()
            .find(|c| !c.decision.allowed)
            .or_else(|| self.checks.iter().min_by_key(|c| c.decision.remaining))
    }
}

impl<'a> IntoIterator for &'a Checks {
    type Item = &'a Check;
    type IntoIter = slice::Iter<'a, Check>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}
