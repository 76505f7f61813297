//! The allowance for clock drift and a late runtime that every lease keeps: below the lock
//! floor, which uses it for each lease's safety deadline, and below the store, whose quorum
//! compares its nodes' clocks against half of it.

use std::time::Duration;

/// How long before the store could expire a lease its holder stops trusting it: the local
/// safety deadline is the send time of the request that last set the ttl, plus the ttl, minus
/// this margin.
///
/// It is an allowance for clock drift between this process and the store (1% of the ttl plus
/// 2 ms, the Redlock analysis' figure) plus one for a late runtime (ttl/20, at most 50 ms), so
/// the lost signal, which is a timer, still fires before the key can expire when the process
/// is busy. For a 30 s ttl it is 352 ms; for 1 s, 62 ms.
#[must_use]
pub fn safety_margin(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2) + (ttl / 20).min(Duration::from_millis(50))
}
