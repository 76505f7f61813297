//! [`Decision`]: the answer to one check, with the fields of redis-cell's `CL.THROTTLE`.

use std::sync::Arc;
use std::time::Duration;

/// The answer to one rate-limit check.
///
/// The top-level fields describe the *binding* policy: the one that denied with the longest
/// wait, or, when everything passed, the one with the fewest requests left. Every policy's
/// own figures are in [`policies`](Self::policies).
///
/// For an any-of limiter ([`Client::rate_limiter_any`](crate::Client::rate_limiter_any)) the
/// binding policy is the one that allowed and was charged (the first that allows, in the
/// order given; [`PolicyDecision::charged`] marks it), or, when none allows, the one that
/// would allow soonest (the first on ties): `retry_after` is then the shortest wait.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use distlock::ratelimit::{Policy, Rate};
///
/// let client = distlock::Client::in_memory();
/// let limiter = client.rate_limiter(Policy::gcra("api", Rate::per_second(10)?.burst(2)?)?).build()?;
/// let first = limiter.check("user:7").await?;
/// assert!(first.allowed);
/// assert_eq!((first.limit, first.remaining), (2, 1));
/// limiter.check("user:7").await?;
/// let third = limiter.check("user:7").await?;
/// assert!(!third.allowed);
/// assert!(third.retry_after > std::time::Duration::ZERO); // about 100 ms
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the request may proceed. In shadow mode this is always `true`; see
    /// [`shadowed`](Self::shadowed).
    pub allowed: bool,
    /// The binding policy's limit: how many requests (cost units) may go at once.
    pub limit: u64,
    /// How many more cost-1 requests the binding policy would allow right now.
    pub remaining: u64,
    /// When denied: how long until the same request would be allowed (assuming nobody else
    /// consumes meanwhile). Zero when allowed.
    pub retry_after: Duration,
    /// How long until the binding policy is back to its full limit if nothing more is
    /// consumed.
    pub reset_after: Duration,
    /// The binding policy's name.
    pub policy: Arc<str>,
    /// Where the answer came from.
    pub origin: Origin,
    /// Shadow mode let a request through that the policies denied. `retry_after` and the
    /// per-policy figures still say what enforcement would have answered.
    pub shadowed: bool,
    /// Every policy's own figures, in the order the limiter was built with.
    pub policies: Vec<PolicyDecision>,
    /// How many units this answer lets the caller use: the cost of a check that passed, and
    /// for [`check_up_to`](super::RateLimiter::check_up_to) the units it granted (`0..=n`,
    /// `allowed` when above 0). Zero for a denial, a peek, a reset, refund or penalty. When
    /// the store did not count them (shadow mode letting a denied request through,
    /// [`Origin::FailOpen`]), what was asked for.
    pub granted: u32,
    /// The subject is blocked by a policy's [lockout](super::Lockout): this check breached
    /// the policy, or came while an earlier breach's block lasts. `retry_after` is then when
    /// the block ends (or, if later, when the policy itself would pass the request), and
    /// nothing was spent. For an any-of limiter, only in a denial (another policy may pass a
    /// request while one blocks the subject), and `retry_after` may then be another policy's
    /// sooner wait. An HTTP layer answers it as any denial (429 with `Retry-After`);
    /// this says why, for logs, metrics or a different message.
    pub locked_out: bool,
}

/// One policy's part of a [`Decision`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolicyDecision {
    /// The policy's name.
    pub policy: Arc<str>,
    /// Whether this policy alone would allow the request. When another policy denies,
    /// nothing is consumed from this one either.
    pub allowed: bool,
    /// How many requests (cost units) the policy allows at once.
    pub limit: u64,
    /// How many more cost-1 requests it would allow right now.
    pub remaining: u64,
    /// When this policy denies: how long until it would allow the request. Zero otherwise.
    pub retry_after: Duration,
    /// How long until it is back to its full limit.
    pub reset_after: Duration,
    /// The subject is blocked by this policy's [lockout](super::Lockout) (it then denies,
    /// with nothing `remaining`).
    pub locked_out: bool,
    /// This policy consumed the request's units: every policy of an all-or-nothing check
    /// that passed (or of a [`check_up_to`](super::RateLimiter::check_up_to) that granted
    /// some), and the one policy an any-of limiter charged. False for a denial, a peek, a
    /// reset, refund or penalty, and for an answer the store did not count (the deny cache,
    /// failing open, shadow mode letting a denied request through).
    pub charged: bool,
    /// How long the block lasts from this answer (zero when not locked out), for the deny
    /// cache.
    pub(crate) lock_left: Duration,
}

/// Where a [`Decision`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Origin {
    /// The store decided (Redis, or the in-memory store of a
    /// [`Client::in_memory`](crate::Client::in_memory) client).
    Store,
    /// The limiter's local deny cache: the store denied this subject recently and said when
    /// to come back, so no round trip was made.
    DenyCache,
    /// The store was unavailable and the limiter decided with its local in-memory fallback
    /// ([`Outage::LocalFallback`](super::Outage::LocalFallback)): limits are then per process.
    LocalFallback,
    /// The store was unavailable and the limiter lets everything through
    /// ([`Outage::FailOpen`](super::Outage::FailOpen)). The figures are not meaningful.
    FailOpen,
    /// A hybrid limiter answered from the share of the subject's budget it leased from the
    /// store earlier ([`hybrid`](super::RateLimiterBuilder::hybrid)): no round trip. The
    /// figures are the lease's, with `remaining` counting the share's units left.
    LocalShare,
}

/// How a limiter combines its policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Combine {
    /// All or nothing: every policy must allow, and all are charged.
    All,
    /// Any of them: the first that allows is charged, alone.
    Any,
}

impl Decision {
    /// The aggregate of every policy's figures, combined as `how` says.
    pub(crate) fn combine(policies: Vec<PolicyDecision>, origin: Origin, how: Combine) -> Self {
        match how {
            Combine::All => Self::from_policies(policies, origin),
            Combine::Any => Self::from_any(policies, origin),
        }
    }

    /// The aggregate of an any-of limiter: allowed when some policy allows; the binding
    /// policy is the first that allows, else the denier with the shortest wait (the first on
    /// ties). Locked out when denied and some policy's lockout blocks the subject.
    pub(crate) fn from_any(policies: Vec<PolicyDecision>, origin: Origin) -> Self {
        let first = policies.iter().position(|p| p.allowed);
        let binding = first.or_else(|| {
            policies
                .iter()
                .enumerate()
                .min_by_key(|(i, p)| (p.retry_after, *i))
                .map(|(i, _)| i)
        });
        let allowed = first.is_some();
        let locked_out = !allowed && policies.iter().any(|p| p.locked_out);
        Self::aggregate(policies, binding, allowed, locked_out, origin)
    }

    /// A placeholder with no policy, for a decision moved out of its holder.
    pub(crate) fn empty() -> Self {
        Self::from_policies(Vec::new(), Origin::Store)
    }

    /// Builds the aggregate from every policy's figures: all must allow; the binding policy
    /// is the denier with the longest wait, else the one with the fewest left. Locked out
    /// when any policy is.
    pub(crate) fn from_policies(policies: Vec<PolicyDecision>, origin: Origin) -> Self {
        let allowed = policies.iter().all(|p| p.allowed);
        let locked_out = policies.iter().any(|p| p.locked_out);
        let binding = if allowed {
            policies
                .iter()
                .enumerate()
                .min_by_key(|(i, p)| (p.remaining, *i))
        } else {
            policies
                .iter()
                .enumerate()
                .filter(|(_, p)| !p.allowed)
                .max_by_key(|(i, p)| (p.retry_after, std::cmp::Reverse(*i)))
        }
        .map(|(i, _)| i);
        Self::aggregate(policies, binding, allowed, locked_out, origin)
    }

    /// The decision whose top-level figures are those of policy `binding` (none when there is
    /// no policy); a denial carries the binding policy's wait, an allowed decision none.
    fn aggregate(
        policies: Vec<PolicyDecision>,
        binding: Option<usize>,
        allowed: bool,
        locked_out: bool,
        origin: Origin,
    ) -> Self {
        let (limit, remaining, retry_after, reset_after, policy) = match binding {
            Some(i) => {
                let p = &policies[i];
                (
                    p.limit,
                    p.remaining,
                    if allowed {
                        Duration::ZERO
                    } else {
                        p.retry_after
                    },
                    p.reset_after,
                    Arc::clone(&p.policy),
                )
            }
            None => (0, 0, Duration::ZERO, Duration::ZERO, Arc::from("")),
        };
        Self {
            allowed,
            limit,
            remaining,
            retry_after,
            reset_after,
            policy,
            origin,
            shadowed: false,
            policies,
            granted: 0,
            locked_out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(name: &str, allowed: bool, remaining: u64, retry_ms: u64) -> PolicyDecision {
        PolicyDecision {
            policy: Arc::from(name),
            allowed,
            limit: 10,
            remaining,
            retry_after: Duration::from_millis(retry_ms),
            reset_after: Duration::from_millis(500),
            locked_out: false,
            charged: false,
            lock_left: Duration::ZERO,
        }
    }

    #[test]
    fn any_of_binds_the_first_that_allows_or_the_soonest_wait() {
        let d = Decision::from_any(
            vec![
                policy("a", false, 0, 10),
                policy("b", true, 2, 0),
                policy("c", true, 5, 0),
            ],
            Origin::Store,
        );
        assert!(d.allowed);
        assert_eq!((&*d.policy, d.remaining), ("b", 2));
        assert_eq!(d.retry_after, Duration::ZERO);

        let d = Decision::from_any(
            vec![
                policy("a", false, 0, 90),
                policy("b", false, 0, 30),
                policy("c", false, 0, 30),
            ],
            Origin::Store,
        );
        assert!(!d.allowed && !d.locked_out);
        assert_eq!(&*d.policy, "b");
        assert_eq!(d.retry_after, Duration::from_millis(30));
    }

    #[test]
    fn the_binding_policy_is_the_longest_wait_or_the_fewest_left() {
        let d = Decision::from_policies(
            vec![
                policy("a", false, 0, 10),
                policy("b", false, 0, 90),
                policy("c", true, 5, 0),
            ],
            Origin::Store,
        );
        assert!(!d.allowed);
        assert_eq!(&*d.policy, "b");
        assert_eq!(d.retry_after, Duration::from_millis(90));

        let d = Decision::from_policies(
            vec![policy("a", true, 7, 0), policy("b", true, 3, 0)],
            Origin::Store,
        );
        assert!(d.allowed);
        assert_eq!((&*d.policy, d.remaining), ("b", 3));
        assert_eq!(d.retry_after, Duration::ZERO);
    }
}
