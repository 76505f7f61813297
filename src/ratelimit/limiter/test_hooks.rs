//! Hooks for this crate's own tests (`test-util`): checks decided at a given time, the keys
//! of a subject, and counters of the deny cache and the store calls. Not for production.

use std::sync::atomic::Ordering;

use super::{RateLimiter, validate_cost};
use crate::error::RateLimitError;
use crate::ratelimit::Decision;
use crate::ratelimit::Origin;
use crate::ratelimit::deny_cache::DenyCache;
use crate::store::{RateOp, RateRequest};

impl RateLimiter {
    /// Test hook (`test-util`): one check decided at `now_us` (µs since the epoch) instead of
    /// the store's clock, straight to the store (no deny cache, no shadow mode, no outage
    /// policy). On Redis it is a separate script text, and every ttl it sets gets an hour of
    /// slack, since the server expires keys on its own clock.
    #[doc(hidden)]
    pub async fn __check_at(
        &self,
        subject: &str,
        cost: u32,
        now_us: u64,
    ) -> Result<Decision, RateLimitError> {
        let eff = self.effective(subject).await?;
        validate_cost(&eff, cost)?;
        let keys = self.keys(subject)?;
        let req = RateRequest {
            keys: &keys,
            params: &eff.params,
            op: self.check_op(cost),
        };
        let reply = self.client.store().rate_limit_at(&req, now_us).await?;
        Ok(self.decision(&eff, reply, Origin::Store))
    }

    /// Test hook (`test-util`): one operation decided at `now_us`, as
    /// [`__check_at`](Self::__check_at): (decision, applied, wait µs).
    #[doc(hidden)]
    pub async fn __operate_at(
        &self,
        subject: &str,
        op: TestOp,
        now_us: u64,
    ) -> Result<(Decision, bool, u64), RateLimitError> {
        let eff = self.effective(subject).await?;
        let keys = self.keys(subject)?;
        let op = match op {
            // A check as the limiter makes it (all or nothing, or any of its policies).
            TestOp::Check(cost) => self.check_op(cost),
            TestOp::Reserve(cost, max_wait_us) => RateOp::Reserve { cost, max_wait_us },
            TestOp::Refund(n) => RateOp::Refund(n),
            TestOp::Penalize(n) => RateOp::Penalize(n),
            TestOp::Reset => RateOp::Reset,
            TestOp::CheckUpTo(max) => RateOp::CheckUpTo { max },
        };
        let req = RateRequest {
            keys: &keys,
            params: &eff.params,
            op,
        };
        let reply = self.client.store().rate_limit_at(&req, now_us).await?;
        let (applied, wait) = (reply.applied, reply.wait_us);
        Ok((self.decision(&eff, reply, Origin::Store), applied, wait))
    }

    /// Test hook (`test-util`): the store keys of `subject`, one per policy.
    #[doc(hidden)]
    pub fn __keys(&self, subject: &str) -> Result<Vec<String>, RateLimitError> {
        self.keys(subject)
    }

    /// Test hook (`test-util`): subjects in the deny cache.
    #[doc(hidden)]
    pub fn __deny_cache_len(&self) -> usize {
        self.shared.deny_cache.as_ref().map_or(0, DenyCache::len)
    }

    /// Test hook (`test-util`): round trips this limiter (and its clones) attempted.
    #[doc(hidden)]
    pub fn __store_calls(&self) -> u64 {
        self.shared.store_calls.load(Ordering::Relaxed)
    }

    /// Test hook (`test-util`): checks waiting on the store right now.
    #[doc(hidden)]
    pub fn __in_flight(&self) -> usize {
        self.shared.max_in_flight - self.shared.in_flight.available_permits()
    }
}

/// Test hook (`test-util`): an operation for [`RateLimiter::__operate_at`].
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub enum TestOp {
    Check(u32),
    /// Cost, max wait µs.
    Reserve(u32, u64),
    Refund(u32),
    Penalize(u32),
    Reset,
    /// At most this many units.
    CheckUpTo(u32),
}
