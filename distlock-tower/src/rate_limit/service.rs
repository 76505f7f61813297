use std::sync::Arc;

use super::ResponseBody;
use super::future::{self, ResponseFuture};
use super::layer::Config;
use crate::refusal::PlainText;

/// Middleware that checks each request against a rate limiter under the subject its key
/// extractor finds. Built by [`RateLimitLayer`](super::RateLimitLayer).
///
/// Cheap to clone (axum clones it per connection): the settings and the limiter's deny cache
/// are shared, and every clone counts against the same store. Readiness is the inner
/// service's; it is called only once the request is allowed. A request that waits in the
/// limiter ([`wait`](super::RateLimitLayerBuilder::wait)) first gives that readiness back, so
/// it holds no capacity of the inner service (a `ConcurrencyLimit` permit, a `Buffer` slot)
/// while it sleeps, and readies the service again once allowed.
pub struct RateLimit<S, K, R = PlainText> {
    pub(crate) inner: S,
    pub(crate) config: Arc<Config<K, R>>,
}

impl_service!(RateLimit, future::call);
