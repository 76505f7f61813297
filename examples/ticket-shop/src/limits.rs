//! The rate limits of the API, per client IP address, shared by every replica.
//!
//! | requests | policies (all must allow) |
//! |---|---|
//! | every `/api` request | `api`: 10 per second on average, bursts of 20 (GCRA) |
//! | `POST /api/seats/{seat}/checkout` | `api`, plus `checkout`: 2 per second, bursts of 3 (GCRA), plus `checkout-per-minute`: 10 in any 60 s (sliding log, exact) |
//!
//! A checkout is checked against its three policies in one all-or-nothing round trip: it
//! passes only if all three allow it, and a refused checkout consumes from none (so it does not
//! eat into the client's `api` budget either). Checkouts share the `api` budget with the
//! other requests because the policy has the same name and rate in both limiters, hence the
//! same counter.

use std::time::Duration;

use distlock::ratelimit::{Outage, Policy, Rate, RateLimiter};
use distlock::{InvalidPolicy, RateLimitError};

/// The route template whose requests get the checkout limits.
pub const CHECKOUT_ROUTE: &str = "/api/seats/{seat}/checkout";

/// The limiters of the API.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Every `/api` request but checkouts.
    pub api: RateLimiter,
    /// Checkouts.
    pub checkout: RateLimiter,
}

fn api_policy() -> Result<Policy, InvalidPolicy> {
    Policy::gcra("api", Rate::per_second(10)?.burst(20)?)
}

impl Limits {
    pub fn new(client: &distlock::Client) -> Result<Self, RateLimitError> {
        // Browsing may go on while Redis restarts: each replica then limits on its own.
        let api = client
            .rate_limiter(api_policy()?)
            .on_outage(Outage::LocalFallback)
            .deadline(Duration::from_millis(200))
            .build()?;
        // Checkouts need Redis anyway (for the seat lock), so they fail closed: 503.
        let checkout = client
            .rate_limiter_all([
                api_policy()?,
                Policy::gcra("checkout", Rate::per_second(2)?.burst(3)?)?,
                Policy::sliding_log("checkout-per-minute", Rate::per_minute(10)?)?,
            ])
            .build()?;
        Ok(Self { api, checkout })
    }
}
