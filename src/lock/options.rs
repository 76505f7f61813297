//! [`LockOptions`]: the options every lease builder shares (a lock's, a semaphore's, a
//! read-write lock's, a multi-lock's) as one value, and the one place their bounds are
//! checked, so every builder, the configuration file, the tower layers and the macro refuse
//! the same values with the same errors.

use std::time::Duration;

#[cfg(any(feature = "serde", test))]
pub(crate) use distlock_grammar::OptionValue;
use distlock_grammar::{DurationText as T, MAX_BACKOFF};

use super::context::LockContext;
use super::state::Terms;
use super::wait::{self, Acquired, BACKOFF_MAX, BACKOFF_MIN, Claim, OUTAGE_PATIENCE, Retry, Wait};
use super::{DEFAULT_TTL, MAX_TTL, MIN_TTL};
use crate::core::Core;
use crate::error::{InvalidOption, LockError};
use crate::store::{Capability, Replicas};

/// The setters every lease builder shares, documented once: `lease_options!()` on
/// [`LockOptions`] itself, `lease_options!(options)` on a builder that keeps its
/// [`LockOptions`] in a field named `options`.
macro_rules! lease_options {
    ($($options:ident)?) => {
        /// The lease's time to live in the store ([`MIN_TTL`](crate::MIN_TTL) to
        /// [`MAX_TTL`](crate::MAX_TTL), default 30 s). With the watchdog on it is renewed
        /// every ttl/3 while held, so it only bounds how long a crashed holder keeps what it
        /// holds.
        pub fn ttl(mut self, ttl: ::std::time::Duration) -> Self {
            self$(.$options)?.ttl = ttl;
            self
        }

        /// Waits up to `wait` while busy; `Duration::ZERO` (the default) tries once, and
        /// `Duration::MAX` (or any wait too long to be a point in time) waits forever, as
        /// [`wait_forever`](Self::wait_forever).
        pub fn wait(mut self, wait: ::std::time::Duration) -> Self {
            self$(.$options)?.wait = wait;
            self
        }

        /// Waits as long as it takes.
        pub fn wait_forever(mut self) -> Self {
            self$(.$options)?.wait = ::std::time::Duration::MAX;
            self
        }

        /// How long a waiting acquire keeps retrying [transient](crate::StoreError::is_transient)
        /// store errors (a failover, a restart) within its wait: default 30 s of nothing but
        /// errors. `Duration::ZERO` ends the wait with the first store error (what the lock
        /// layer does, to answer `503` at once); `Duration::MAX`, as long as the wait lasts.
        /// Without a wait, the first store error is returned either way.
        pub fn store_patience(mut self, patience: ::std::time::Duration) -> Self {
            self$(.$options)?.store_patience = patience;
            self
        }

        /// At most `attempts` tries (round trips that try to take it) within the wait, as
        /// redsync's `WithTries` or node-redlock's `retryCount`: once they are used up the
        /// acquire ends with [`LockError::Timeout`](crate::LockError::Timeout) (or the last
        /// store error), even if the wait has time left. Default: as many as the wait allows
        /// (waiters are woken by releases, so they rarely need many). `1` tries once; `0` is
        /// refused.
        pub fn max_attempts(mut self, attempts: u32) -> Self {
            self$(.$options)?.max_attempts = Some(attempts);
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
            self$(.$options)?.backoff = (first, largest);
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
            self$(.$options)?.identity = Some(identity.into());
            self
        }

        /// Renew the lease in the background while it is held (default on). Off: the lease
        /// simply expires after its ttl, and its lost signal fires at its safety deadline.
        pub fn watchdog(mut self, on: bool) -> Self {
            self$(.$options)?.watchdog = on;
            self
        }

        /// Stops renewing once the lease has been held this long, so a stuck holder cannot
        /// keep it for ever. The lease then runs out its last ttl and is lost. The last
        /// renewal (and any [`extend`](crate::Lease::extend)) is cut so that the key expires
        /// at `max_hold`. Zero is refused; `Duration::MAX` (or anything too long to be a
        /// point in time) means no limit.
        pub fn max_hold(mut self, max_hold: ::std::time::Duration) -> Self {
            self$(.$options)?.max_hold = Some(max_hold);
            self
        }
    };
}
pub(crate) use lease_options;

/// A lock's options as one value: what [`LockBuilder`](crate::LockBuilder) and the other
/// lease builders set one by one, kept where a service keeps its settings, checked once by
/// [`check`](Self::check), and applied whole with
/// [`LockBuilder::options`](crate::LockBuilder::options).
///
/// Every front door maps into this type and nothing else checks a bound: the builders, the
/// `[lock]` table of a configuration file ([`LockConfig`](crate::config::LockConfig)), the
/// tower layers' builders and configurations, and `#[distributed_lock]` (whose arguments are
/// also checked when the function compiles, by the same grammar crate). What depends on the
/// client's store (whether it can acknowledge replicas) is checked when the lease is
/// acquired.
///
/// Defaults: ttl 30 s renewed by the watchdog, try once, no maximum or minimum hold, the
/// client's replica acknowledgement and identity, not reentrant, the fence minted when first
/// asked for.
///
/// ```
/// use std::time::Duration;
/// use distlock::LockOptions;
///
/// let checkout = LockOptions::new()
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_secs(2))
///     .max_hold(Duration::from_secs(60));
/// assert!(checkout.check().is_ok());
///
/// let err = LockOptions::new().ttl(Duration::from_millis(5)).check().unwrap_err();
/// assert_eq!(err.field(), "ttl");
/// assert_eq!(err.to_string(), "ttl: 5ms is out of range: a ttl is 10ms to 7days");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[must_use = "options do nothing until a builder takes them"]
pub struct LockOptions {
    pub(crate) ttl: Duration,
    /// `Duration::ZERO` tries once; `Duration::MAX` waits forever.
    pub(crate) wait: Duration,
    pub(crate) watchdog: bool,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) min_hold: Option<Duration>,
    pub(crate) replicas: ReplicaChoice,
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
    /// For a lock's `run`: join a lease on the same lock held by an enclosing `run` of this
    /// task.
    pub(crate) reentrant: bool,
    /// Grant a lock in its waiters' order of arrival (a fair lock).
    pub(crate) fair: bool,
}

/// Whether a lease asks replicas to acknowledge its writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplicaChoice {
    /// What the client says ([`ClientBuilder::replicas`](crate::ClientBuilder::replicas)).
    Client,
    Off,
    Ask(Replicas),
}

impl Default for LockOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl LockOptions {
    /// The defaults (see the type's documentation).
    pub fn new() -> Self {
        Self {
            ttl: DEFAULT_TTL,
            wait: Duration::ZERO,
            watchdog: true,
            max_hold: None,
            min_hold: None,
            replicas: ReplicaChoice::Client,
            store_patience: OUTAGE_PATIENCE,
            max_attempts: None,
            backoff: (BACKOFF_MIN, BACKOFF_MAX),
            identity: None,
            fenced: false,
            reentrant: false,
            fair: false,
        }
    }

    lease_options!();

    /// As [`LockBuilder::replicas`](crate::LockBuilder::replicas): `count` 0 turns replica
    /// acknowledgement off, even if the client asks for it.
    pub fn replicas(mut self, count: u32, timeout: Duration) -> Self {
        self.replicas = if count == 0 {
            ReplicaChoice::Off
        } else {
            ReplicaChoice::Ask(Replicas { count, timeout })
        };
        self
    }

    /// As [`LockBuilder::min_hold`](crate::LockBuilder::min_hold): zero means none.
    pub fn min_hold(mut self, min_hold: Duration) -> Self {
        self.min_hold = Some(min_hold);
        self
    }

    /// As [`LockBuilder::fenced`](crate::LockBuilder::fenced) when `on`: the grant mints the
    /// fence. Off (the default), the fence is minted when first asked for.
    pub fn fenced(mut self, on: bool) -> Self {
        self.fenced = on;
        self
    }

    /// As [`LockBuilder::reentrant`](crate::LockBuilder::reentrant).
    pub fn reentrant(mut self, on: bool) -> Self {
        self.reentrant = on;
        self
    }

    /// As [`LockBuilder::fair`](crate::LockBuilder::fair) when `on`: the lock is granted in
    /// its waiters' order of arrival.
    pub fn fair(mut self, on: bool) -> Self {
        self.fair = on;
        self
    }

    /// Whether the lock is granted in its waiters' order of arrival.
    #[must_use]
    pub fn get_fair(&self) -> bool {
        self.fair
    }

    /// The ttl.
    #[must_use]
    pub fn get_ttl(&self) -> Duration {
        self.ttl
    }

    /// The wait: zero tries once, [`Duration::MAX`] waits forever.
    #[must_use]
    pub fn get_wait(&self) -> Duration {
        self.wait
    }

    /// Whether the watchdog renews the lease.
    #[must_use]
    pub fn get_watchdog(&self) -> bool {
        self.watchdog
    }

    /// The maximum hold, if any.
    #[must_use]
    pub fn get_max_hold(&self) -> Option<Duration> {
        self.max_hold.filter(|max| *max != Duration::MAX)
    }

    /// The minimum hold, if any.
    #[must_use]
    pub fn get_min_hold(&self) -> Option<Duration> {
        self.min_hold.filter(|min| !min.is_zero())
    }

    /// Whether the grant mints the fence.
    #[must_use]
    pub fn get_fenced(&self) -> bool {
        self.fenced
    }

    /// How long a waiting acquire retries transient store errors.
    #[must_use]
    pub fn get_store_patience(&self) -> Duration {
        self.store_patience
    }

    /// Whether a lock's `run` joins a lease held by an enclosing `run` of the same task.
    #[must_use]
    pub fn get_reentrant(&self) -> bool {
        self.reentrant
    }

    /// The first and the largest sleep between attempts that no release wakes.
    #[must_use]
    pub fn get_retry_backoff(&self) -> (Duration, Duration) {
        self.backoff
    }

    /// The most attempts within the wait, if bounded.
    #[must_use]
    pub fn get_max_attempts(&self) -> Option<u32> {
        self.max_attempts
    }

    /// Sets the option `name` of the table of lock options
    /// ([`distlock_grammar::LOCK_OPTIONS`], which the configuration file and the macro read
    /// by name) to `value`: the one place a name meets its setter. `None` for a name the
    /// table does not have or a value of another kind.
    #[cfg(any(feature = "serde", test))]
    pub(crate) fn with_named(self, name: &str, value: OptionValue) -> Option<Self> {
        use OptionValue::{Count, Duration as D, Flag, Text};
        Some(match (name, value) {
            ("ttl", D(ttl)) => self.ttl(ttl),
            ("wait", D(wait)) => self.wait(wait),
            ("store_patience", D(patience)) => self.store_patience(patience),
            ("watchdog", Flag(on)) => self.watchdog(on),
            ("max_hold", D(max)) => self.max_hold(max),
            ("min_hold", D(min)) => self.min_hold(min),
            ("reentrant", Flag(on)) => self.reentrant(on),
            ("max_attempts", Count(n)) => self.max_attempts(n),
            ("fenced", Flag(on)) => self.fenced(on),
            ("fair", Flag(on)) => self.fair(on),
            ("identity", Text(identity)) => self.identity(identity),
            _ => return None,
        })
    }

    /// Checks every option that does not depend on the store against its bounds: the one
    /// place they are checked. The first refused option is returned, named.
    ///
    /// # Errors
    /// [`InvalidOption`] naming the field: a ttl outside [`MIN_TTL`]`..=`[`MAX_TTL`], a zero
    /// `max_hold`, a `min_hold` above [`MAX_TTL`] or `max_hold`, a replica timeout not below
    /// the ttl, `max_attempts` 0, a `retry_backoff` out of order or above 60 s, an identity
    /// that cannot be one.
    pub fn check(&self) -> Result<(), InvalidOption> {
        check_ttl(self.ttl)?;
        if let Some(identity) = &self.identity {
            crate::holder::check_identity(identity)
                .map_err(|why| InvalidOption::new("identity", why.to_string()))?;
        }
        if self.max_attempts == Some(0) {
            return Err(InvalidOption::new(
                "max_attempts",
                "0 would never try; 1 tries once".to_owned(),
            ));
        }
        let (first, largest) = self.backoff;
        if first.is_zero() {
            return Err(InvalidOption::new(
                "retry_backoff.first",
                "must be above zero".to_owned(),
            ));
        }
        if largest > MAX_BACKOFF {
            return Err(InvalidOption::new(
                "retry_backoff.largest",
                format!("{} is longer than {}", T(largest), T(MAX_BACKOFF)),
            ));
        }
        if first > largest {
            return Err(InvalidOption::new(
                "retry_backoff.first",
                format!("{} is longer than largest, {}", T(first), T(largest)),
            ));
        }
        if self.max_hold.is_some_and(|m| m.is_zero()) {
            return Err(InvalidOption::new(
                "max_hold",
                "must be greater than zero".to_owned(),
            ));
        }
        if let Some(min) = self.get_min_hold() {
            if min > MAX_TTL {
                return Err(InvalidOption::new(
                    "min_hold",
                    format!("{} is longer than the longest ttl, {}", T(min), T(MAX_TTL)),
                ));
            }
            if let Some(max) = self.max_hold
                && min > max
            {
                return Err(InvalidOption::new(
                    "min_hold",
                    format!("{} is longer than max_hold, {}", T(min), T(max)),
                ));
            }
        }
        if let ReplicaChoice::Ask(r) = self.replicas
            && (r.timeout.is_zero() || r.timeout >= self.ttl)
        {
            return Err(InvalidOption::new(
                "replicas.timeout",
                format!(
                    "{} must be above zero and below the ttl, {}",
                    T(r.timeout),
                    T(self.ttl)
                ),
            ));
        }
        Ok(())
    }

    /// The holder identity of a lease: these options', else the client's. Checked by
    /// [`check`](Self::check).
    pub(crate) fn identity_on(&self, client: &Core) -> std::sync::Arc<str> {
        match &self.identity {
            Some(identity) => identity.as_str().into(),
            None => client.identity().clone(),
        }
    }

    /// Without a lock's own options (replica acknowledgement, minimum hold, reentrancy, an
    /// eager fence): what a semaphore's, a read-write lock's or a multi-lock's lease takes.
    pub(crate) fn shared_only(mut self) -> Self {
        self.replicas = ReplicaChoice::Off;
        self.min_hold = None;
        self.reentrant = false;
        self.fenced = false;
        self.fair = false;
        self
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
        wait::acquire(client, claim, Wait::from_duration(self.wait), &self.retry()).await
    }

    /// [`check`](Self::check), then what the client's store can do: the terms of a lease.
    pub(crate) fn validate(&self, client: &Core) -> Result<Terms, LockError> {
        self.check().map_err(InvalidOption::lock_error)?;
        let replicas = match self.replicas {
            ReplicaChoice::Client => client.default_replicas(),
            ReplicaChoice::Off => None,
            ReplicaChoice::Ask(r) => Some(r),
        };
        if self.fair
            && let Err(refused) = client.supports(Capability::FairQueues)
        {
            return Err(LockError::UnsupportedStore {
                reason: refused.reason,
            });
        }
        if let Some(r) = replicas {
            // The client's own choice, checked against this lease's ttl.
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
            min_hold: self.get_min_hold(),
            replicas,
            fenced: self.fenced,
        })
    }
}

fn invalid(reason: String) -> LockError {
    LockError::InvalidConfig { reason }
}

/// Refuses a lease ttl outside [`MIN_TTL`]`..=`[`MAX_TTL`] (the options' and `extend`'s
/// bounds).
pub(crate) fn check_ttl(ttl: Duration) -> Result<(), InvalidOption> {
    distlock_grammar::check_ttl(ttl).map(drop).map_err(|_| {
        InvalidOption::new(
            "ttl",
            format!(
                "{} is out of range: a ttl is {} to {}",
                T(ttl),
                T(MIN_TTL),
                T(MAX_TTL)
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(options: LockOptions) -> &'static str {
        options.check().expect_err("refused").field()
    }

    #[test]
    fn every_bound_is_refused_by_name_and_extremes_never_panic() {
        let ms = Duration::from_millis;
        assert!(LockOptions::new().check().is_ok());
        for ttl in [MIN_TTL, MAX_TTL] {
            assert!(LockOptions::new().ttl(ttl).check().is_ok(), "{ttl:?}");
        }
        for ttl in [
            Duration::ZERO,
            MIN_TTL - ms(1),
            MAX_TTL + ms(1),
            Duration::MAX,
        ] {
            assert_eq!(refused(LockOptions::new().ttl(ttl)), "ttl", "{ttl:?}");
        }
        assert_eq!(
            refused(LockOptions::new().max_hold(Duration::ZERO)),
            "max_hold"
        );
        assert!(LockOptions::new().max_hold(Duration::MAX).check().is_ok());
        assert_eq!(
            LockOptions::new().max_hold(Duration::MAX).get_max_hold(),
            None
        );
        assert_eq!(
            refused(LockOptions::new().min_hold(Duration::MAX)),
            "min_hold"
        );
        assert_eq!(
            refused(LockOptions::new().min_hold(ms(20)).max_hold(ms(10))),
            "min_hold"
        );
        assert!(LockOptions::new().min_hold(Duration::ZERO).check().is_ok());
        assert_eq!(refused(LockOptions::new().max_attempts(0)), "max_attempts");
        assert!(LockOptions::new().max_attempts(u32::MAX).check().is_ok());
        for ((first, largest), field) in [
            ((Duration::ZERO, ms(1)), "retry_backoff.first"),
            ((ms(2), ms(1)), "retry_backoff.first"),
            ((ms(1), MAX_BACKOFF + ms(1)), "retry_backoff.largest"),
            ((Duration::MAX, Duration::MAX), "retry_backoff.largest"),
        ] {
            assert_eq!(
                refused(LockOptions::new().retry_backoff(first, largest)),
                field
            );
        }
        for timeout in [Duration::ZERO, DEFAULT_TTL, Duration::MAX] {
            assert_eq!(
                refused(LockOptions::new().replicas(u32::MAX, timeout)),
                "replicas.timeout"
            );
        }
        // Count 0 is "off", whatever the timeout.
        assert!(
            LockOptions::new()
                .replicas(0, Duration::MAX)
                .check()
                .is_ok()
        );
        for identity in ["", "two words", "line\nbreak"] {
            assert_eq!(refused(LockOptions::new().identity(identity)), "identity");
        }
        let long = "x".repeat(1 << 16);
        assert_eq!(refused(LockOptions::new().identity(long)), "identity");
    }

    #[test]
    fn every_option_of_the_table_has_its_setter() {
        use distlock_grammar::{LOCK_OPTIONS, OptionKind};
        let set = |name, value| LockOptions::new().with_named(name, value);
        for option in LOCK_OPTIONS {
            // Two values of its kind, which must give two different option sets.
            let (a, b) = match option.kind {
                OptionKind::Flag => (OptionValue::Flag(true), OptionValue::Flag(false)),
                OptionKind::Count => (OptionValue::Count(7), OptionValue::Count(8)),
                OptionKind::Text => (OptionValue::Text("a".into()), OptionValue::Text("b".into())),
                _ => (
                    OptionValue::Duration(Duration::from_millis(1234)),
                    OptionValue::Duration(Duration::from_millis(2345)),
                ),
            };
            let (a, b) = (set(option.name, a.clone()), set(option.name, b));
            assert!(a.is_some(), "{} has no setter", option.name);
            assert_ne!(a, b, "{} is not set by its value", option.name);
        }
        assert_eq!(set("tll", OptionValue::Flag(true)), None);
        assert_eq!(set("ttl", OptionValue::Flag(true)), None);
    }

    #[test]
    fn the_builders_setters_and_the_values_agree() {
        let options = LockOptions::new()
            .ttl(Duration::from_secs(10))
            .wait_forever()
            .watchdog(false)
            .min_hold(Duration::from_secs(1))
            .fenced(true)
            .fair(true);
        assert_eq!(options.get_ttl(), Duration::from_secs(10));
        assert_eq!(options.get_wait(), Duration::MAX);
        assert!(!options.get_watchdog());
        assert_eq!(options.get_min_hold(), Some(Duration::from_secs(1)));
        assert!(options.get_fenced());
        assert!(options.get_fair());
        // What a semaphore keeps of them.
        let shared = options.clone().shared_only();
        assert_eq!(shared.get_min_hold(), None);
        assert!(!shared.get_fenced());
        assert!(!shared.get_fair());
        assert_eq!(shared.get_ttl(), options.get_ttl());
    }
}
