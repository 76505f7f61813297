//! The options every lease builder shares (a lock's, a semaphore's, a read-write lock's, a
//! multi-lock's): ttl, wait, watchdog, maximum and minimum hold, replica acknowledgement. One
//! place validates them, so every builder refuses the same values with the same errors.

use std::time::Duration;

use distlock_grammar::MAX_BACKOFF;

use super::context::LockContext;
use super::state::Terms;
use super::wait::{self, Acquired, BACKOFF_MAX, BACKOFF_MIN, Claim, OUTAGE_PATIENCE, Retry, Wait};
use super::{DEFAULT_TTL, MAX_TTL, MIN_TTL};
use crate::core::Core;
use crate::error::LockError;
use crate::store::{Capability, Replicas};

/// A builder's lease options, before validation.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) ttl: Duration,
    pub(crate) wait: Wait,
    pub(crate) watchdog: bool,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) min_hold: Option<Duration>,
    pub(crate) replicas: Option<Replicas>,
    /// How long a waiting acquire retries transient store errors.
    pub(crate) store_patience: Duration,
    /// At most this many attempts within the wait (`None`: as many as the wait allows).
    pub(crate) max_attempts: Option<u32>,
    /// First and largest sleep between attempts that no wake-up ends.
    pub(crate) backoff: (Duration, Duration),
    /// The holder identity this lease's token carries, if not the client's.
    pub(crate) identity: Option<String>,
    /// Mint the fence with the grant (eager) rather than at the first `fence()` (lazy, the
    /// default). Only a lock's grant can leave its fence for later; the other primitives'
    /// grants always mint.
    pub(crate) fenced: bool,
}

impl Options {
    /// The defaults: ttl 30 s renewed by the watchdog, no waiting, no maximum or minimum
    /// hold, the client's replica acknowledgement.
    pub(crate) fn new(client: &Core) -> Self {
        Self {
            ttl: DEFAULT_TTL,
            wait: Wait::No,
            watchdog: true,
            max_hold: None,
            min_hold: None,
            replicas: client.default_replicas(),
            store_patience: OUTAGE_PATIENCE,
            max_attempts: None,
            backoff: (BACKOFF_MIN, BACKOFF_MAX),
            identity: None,
            fenced: false,
        }
    }

    /// The holder identity of a lease: the builder's, else the client's. Checked by
    /// [`validate`](Self::validate).
    pub(crate) fn identity(&self, client: &Core) -> std::sync::Arc<str> {
        match &self.identity {
            Some(identity) => identity.as_str().into(),
            None => client.identity().clone(),
        }
    }

    /// How the acquire loop retries.
    pub(crate) fn retry(&self) -> Retry {
        Retry {
            patience: self.store_patience,
            max_attempts: self.max_attempts,
            backoff: self.backoff,
        }
    }

    /// Waits for `claim` on `client` as these options say (see [`wait::acquire`]).
    pub(crate) async fn wait_for<C: Claim>(
        &self,
        client: &LockContext,
        claim: &mut C,
    ) -> Result<(C::Granted, Acquired), LockError> {
        wait::acquire(client, claim, self.wait, &self.retry()).await
    }

    /// Checks every option against its bounds (no round trip), and what the client's store
    /// can do.
    pub(crate) fn validate(&self, client: &Core) -> Result<Terms, LockError> {
        check_ttl(self.ttl)?;
        if let Some(identity) = &self.identity {
            crate::holder::check_identity(identity)
                .map_err(|why| invalid(format!("identity: {why}")))?;
        }
        if self.max_attempts == Some(0) {
            return Err(invalid(
                "max_attempts must be at least 1 (1 tries once)".to_owned(),
            ));
        }
        let (first, largest) = self.backoff;
        if first.is_zero() || first > largest || largest > MAX_BACKOFF {
            return Err(invalid(format!(
                "retry_backoff({first:?}, {largest:?}): the first sleep must be above zero and \
                 at most the largest, and the largest at most {MAX_BACKOFF:?}"
            )));
        }
        if self.max_hold.is_some_and(|m| m.is_zero()) {
            return Err(invalid("max_hold must be greater than zero".to_owned()));
        }
        // Zero means no minimum.
        let min_hold = self.min_hold.filter(|m| !m.is_zero());
        if let Some(min) = min_hold {
            if min > MAX_TTL {
                return Err(invalid(format!(
                    "min_hold {min:?} is longer than the longest ttl, {MAX_TTL:?}"
                )));
            }
            if let Some(max) = self.max_hold
                && min > max
            {
                return Err(invalid(format!(
                    "min_hold {min:?} is longer than max_hold {max:?}"
                )));
            }
        }
        if let Some(r) = self.replicas {
            if r.timeout.is_zero() || r.timeout >= self.ttl {
                return Err(invalid(format!(
                    "replicas timeout {:?} must be above zero and below the ttl {:?}",
                    r.timeout, self.ttl
                )));
            }
            if let Err(refused) = client.supports(Capability::ReplicaAcknowledgement) {
                return Err(invalid(format!(
                    "{}; this client's store is `{}`",
                    refused.reason, refused.store
                )));
            }
        }
        Ok(Terms {
            ttl: self.ttl,
            renews: self.watchdog,
            max_hold: self.max_hold,
            min_hold,
            replicas: self.replicas,
            fenced: self.fenced,
        })
    }
}

fn invalid(reason: String) -> LockError {
    LockError::InvalidConfig { reason }
}

/// Refuses a lease ttl outside [`MIN_TTL`]`..=`[`MAX_TTL`] (the builders' and `extend`'s
/// bounds).
pub(crate) fn check_ttl(ttl: Duration) -> Result<(), LockError> {
    distlock_grammar::check_ttl(ttl).map(drop).map_err(|_| {
        invalid(format!(
            "ttl {ttl:?} is out of range: it must be between {MIN_TTL:?} and {MAX_TTL:?}"
        ))
    })
}

/// The setters every lease builder shares, documented once; each builder keeps its options
/// in a field named `options`.
macro_rules! lease_options {
    () => {
        /// The lease's time to live in the store ([`MIN_TTL`](crate::MIN_TTL) to
        /// [`MAX_TTL`](crate::MAX_TTL), default 30 s). With the watchdog on it is renewed
        /// every ttl/3 while held, so it only bounds how long a crashed holder keeps what it
        /// holds.
        pub fn ttl(mut self, ttl: ::std::time::Duration) -> Self {
            self.options.ttl = ttl;
            self
        }

        /// Waits up to `wait` while busy; `Duration::ZERO` (the default) tries once, and
        /// `Duration::MAX` (or any wait too long to be a point in time) waits forever, as
        /// [`wait_forever`](Self::wait_forever).
        pub fn wait(mut self, wait: ::std::time::Duration) -> Self {
            self.options.wait = $crate::lock::wait::Wait::from_duration(wait);
            self
        }

        /// Waits as long as it takes.
        pub fn wait_forever(mut self) -> Self {
            self.options.wait = $crate::lock::wait::Wait::Forever;
            self
        }

        /// How long a waiting acquire keeps retrying [transient](crate::StoreError::is_transient)
        /// store errors (a failover, a restart) within its wait: default 30 s of nothing but
        /// errors. `Duration::ZERO` ends the wait with the first store error (what the lock
        /// layer does, to answer `503` at once); `Duration::MAX`, as long as the wait lasts.
        /// Without a wait, the first store error is returned either way.
        pub fn store_patience(mut self, patience: ::std::time::Duration) -> Self {
            self.options.store_patience = patience;
            self
        }

        /// At most `attempts` tries (round trips that try to take it) within the wait, as
        /// redsync's `WithTries` or node-redlock's `retryCount`: once they are used up the
        /// acquire ends with [`LockError::Timeout`](crate::LockError::Timeout) (or the last
        /// store error), even if the wait has time left. Default: as many as the wait allows
        /// (waiters are woken by releases, so they rarely need many). `1` tries once; `0` is
        /// refused.
        pub fn max_attempts(mut self, attempts: u32) -> Self {
            self.options.max_attempts = Some(attempts);
            self
        }

        /// The first and the largest sleep between attempts that no release wakes: polling
        /// when the store's pub/sub is unavailable, and retries after transient store errors.
        /// Each sleep gets up to a tenth more of random jitter (at most 50 ms) and then
        /// doubles, up to `largest`. Default 5 ms and 500 ms; `first` above zero and at most
        /// `largest`, `largest` at most 60 s. A busy lock's waiter also never sleeps past the
        /// holder's remaining ttl.
        pub fn retry_backoff(
            mut self,
            first: ::std::time::Duration,
            largest: ::std::time::Duration,
        ) -> Self {
            self.options.backoff = (first, largest);
            self
        }

        /// Who this lease says holds it, as the operators' reads show it
        /// ([`Client::lock_state`](crate::Client::lock_state) and its twins): default the
        /// client's [`identity`](crate::ClientBuilder::identity), `<host>/<pid>` unless set.
        /// 1 to [`MAX_HOLDER_IDENTITY_LEN`](crate::MAX_HOLDER_IDENTITY_LEN) bytes of visible
        /// ASCII, else the acquire fails with
        /// [`LockError::InvalidConfig`](crate::LockError::InvalidConfig). Readable by anyone
        /// who can read the store's keys: never a secret.
        pub fn identity(mut self, identity: impl Into<String>) -> Self {
            self.options.identity = Some(identity.into());
            self
        }

        /// Renew the lease in the background while it is held (default on). Off: the lease
        /// simply expires after its ttl, and its lost signal fires at its safety deadline.
        pub fn watchdog(mut self, on: bool) -> Self {
            self.options.watchdog = on;
            self
        }

        /// Stops renewing once the lease has been held this long, so a stuck holder cannot
        /// keep it for ever. The lease then runs out its last ttl and is lost. The last
        /// renewal (and any [`extend`](crate::Lease::extend)) is cut so that the key expires
        /// at `max_hold`. Zero is refused; `Duration::MAX` (or anything too long to be a
        /// point in time) means no limit.
        pub fn max_hold(mut self, max_hold: ::std::time::Duration) -> Self {
            self.options.max_hold = Some(max_hold);
            self
        }
    };
}
pub(crate) use lease_options;
