//! Error types: one enum per concern, each `#[non_exhaustive]`.
//!
//! [`StoreError`] says what went wrong talking to the store (Redis unreachable, too slow, or
//! refusing a command); [`LockError`] wraps it and adds what can go wrong with a lock (busy,
//! timed out, lost, invalid name or configuration). [`RateLimitError`] does the same for rate
//! limiting, and [`InvalidPolicy`] says why a rate or policy cannot be built.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The oldest Redis version supported (checked when a client connects).
pub const MIN_REDIS_VERSION: &str = "6.2";

/// A failure of the store behind a [`Client`](crate::Client): Redis could not be reached,
/// did not answer in time, or refused the command.
///
/// None of these means "the lock is busy": contention is reported as
/// [`LockError::Busy`] or [`LockError::Timeout`], never as a store error.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The connection failed or was dropped (refused, reset, closed). Retrying later may work;
    /// the connection manager reconnects by itself.
    #[error("cannot reach Redis: {message}")]
    Unreachable {
        /// What the connection layer reported.
        message: String,
        /// The Redis client's own error, where it came from one (its
        /// [`source`](std::error::Error::source)).
        #[source]
        cause: Option<Cause>,
    },
    /// Redis did not answer within the deadline. The command may or may not have been applied:
    /// the library treats such an outcome as unknown (a lock it may have been granted is
    /// released in the background, or expires after its ttl).
    #[error("Redis did not answer within {after:?} (the command may or may not have been applied)")]
    Timeout {
        /// The deadline that passed.
        after: Duration,
    },
    /// Redis answered with an error. See [`RefusedKind`] for what to do about each kind.
    #[error("Redis refused the command ({kind}): {message}")]
    Refused {
        /// Why it was refused.
        kind: RefusedKind,
        /// The server's own words.
        message: String,
        /// The Redis client's own error, where it came from one (its
        /// [`source`](std::error::Error::source)).
        #[source]
        cause: Option<Cause>,
    },
    /// The server rejected the credentials in the URL (`WRONGPASS`), or needs credentials
    /// and the URL has none (`NOAUTH`). Reported by `connect`; never retried.
    #[error("Redis rejected the credentials: {message}")]
    Auth {
        /// The server's own words.
        message: String,
    },
    /// The URL or connection settings are invalid; fix the configuration.
    #[error("invalid Redis configuration: {message}")]
    Config {
        /// What is wrong.
        message: String,
    },
    /// The server may evict keys under memory pressure (its `maxmemory-policy` is not
    /// `noeviction`), and the client was built with
    /// [`require_noeviction`](crate::ClientBuilder::require_noeviction). Reported by
    /// `connect`.
    #[error(
        "the Redis server may evict keys (maxmemory-policy {policy}): an evicted lock key lets \
         a second holder in with nobody told; set maxmemory-policy noeviction"
    )]
    Evicting {
        /// The policy the server reported.
        policy: String,
    },
    /// The server is older than the oldest Redis this library works with (6.2: its scripts
    /// use `SET ... GET`, and release wake-ups use RESP3 pub/sub).
    #[error("Redis {version} is too old: distlock needs Redis {MIN_REDIS_VERSION} or newer")]
    Unsupported {
        /// The version the server reported.
        version: String,
    },
    /// Fewer replicas than required (`replicas(n, timeout)`) acknowledged a grant, renewal or
    /// extend within the timeout. A grant is released; a renewal counts as failed. The write
    /// is on the primary but may not survive a failover.
    #[error("only {acked} of the {wanted} replicas required acknowledged the write in time")]
    NotReplicated {
        /// Replicas that acknowledged.
        acked: u32,
        /// Replicas required.
        wanted: u32,
    },
    /// A Redlock quorum could not decide: fewer than a majority of its nodes answered (or
    /// could count). Each failure names its node and what happened there. Nothing was
    /// granted (an acquire's partial grants were released).
    #[error(
        "no majority of the {nodes} Redis nodes answered ({needed} needed); {}",
        NodeFailure::list(failures)
    )]
    NoQuorum {
        /// Nodes in the quorum.
        nodes: usize,
        /// Votes a decision needs (a majority).
        needed: usize,
        /// The nodes that did not answer, and why.
        failures: Vec<NodeFailure>,
    },
    /// Redis answered something this library did not expect (a bug, or a key of ours that was
    /// overwritten by something else).
    #[error("unexpected reply from Redis: {message}")]
    Protocol {
        /// What was expected and what came.
        message: String,
    },
}

/// The error of the Redis client a [`StoreError`] came from: its
/// [`source`](std::error::Error::source). It reads as that error, and
/// [`get_ref`](Self::get_ref) gives the error itself to downcast (to `redis::RedisError`, of
/// the `redis` version this crate uses), so the chain below it (an `io::Error`, say) is kept.
///
/// ```
/// # async fn run() {
/// use std::error::Error as _;
///
/// // Nothing listens on port 1.
/// let err = distlock::Client::connect("redis://127.0.0.1:1/").await.unwrap_err();
/// let cause = err.source().expect("the Redis client's error");
/// assert!(cause.to_string().contains("refused"), "{cause}");
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync>);

impl Cause {
    pub(crate) fn new(err: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(err))
    }

    /// The error itself, to downcast.
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// One node of a Redlock quorum that did not answer, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeFailure {
    /// `host:port`.
    pub node: String,
    /// What happened (unreachable, no answer within the per-node timeout, refused).
    pub error: String,
}

impl NodeFailure {
    fn list(failures: &[Self]) -> String {
        if failures.is_empty() {
            return "every node answered, but too few could vote".to_owned();
        }
        failures
            .iter()
            .map(|f| format!("{}: {}", f.node, f.error))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Why Redis refused a command.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusedKind {
    /// `OOM`: `maxmemory` is reached under `noeviction`. Free memory or raise the limit.
    OutOfMemory,
    /// `READONLY`: the connection reached a replica, usually right after a failover. Retrying
    /// after the client reconnects to the new primary usually works.
    ReadOnly,
    /// `NOPERM`: the ACL user may not run the command or touch the key. Grant the documented
    /// key patterns and commands.
    NoPermission,
    /// `LOADING`: the server is loading its data set.
    Loading,
    /// A Lua script failed, or scripting is disabled.
    Script,
    /// Any other error reply; the code is Redis' (e.g. `ERR`, `WRONGTYPE`).
    Other(String),
}

impl fmt::Display for RefusedKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfMemory => f.write_str("out of memory"),
            Self::ReadOnly => f.write_str("read-only replica"),
            Self::NoPermission => f.write_str("no permission"),
            Self::Loading => f.write_str("loading"),
            Self::Script => f.write_str("script error"),
            Self::Other(code) => f.write_str(code),
        }
    }
}

impl From<redis::RedisError> for StoreError {
    fn from(err: redis::RedisError) -> Self {
        use redis::{ErrorKind, ServerErrorKind};
        let message = err.to_string();
        let cause = || Some(Cause::new(err.clone()));
        if err.is_timeout() {
            // The redis crate does not say which deadline passed; ours is the response timeout.
            return Self::Timeout {
                after: Duration::ZERO,
            };
        }
        match err.kind() {
            ErrorKind::AuthenticationFailed => Self::Auth { message },
            ErrorKind::InvalidClientConfig => Self::Config { message },
            ErrorKind::Parse | ErrorKind::UnexpectedReturnType => Self::Protocol { message },
            ErrorKind::Server(kind) => {
                let kind = match kind {
                    ServerErrorKind::ReadOnly => RefusedKind::ReadOnly,
                    ServerErrorKind::NoPerm => RefusedKind::NoPermission,
                    ServerErrorKind::BusyLoading => RefusedKind::Loading,
                    ServerErrorKind::NoScript => RefusedKind::Script,
                    _ => refused_kind_from_message(err.code(), &message),
                };
                Self::Refused {
                    kind,
                    message,
                    cause: cause(),
                }
            }
            ErrorKind::Extension => {
                let kind = refused_kind_from_message(err.code(), &message);
                // WRONGPASS: wrong credentials; NOAUTH: the server needs credentials and the
                // URL has none. Either way the configuration is at fault, not the server.
                if matches!(&kind, RefusedKind::Other(code) if code == "WRONGPASS" || code == "NOAUTH")
                {
                    return Self::Auth { message };
                }
                Self::Refused {
                    kind,
                    message,
                    cause: cause(),
                }
            }
            _ if err.is_io_error()
                || err.is_connection_dropped()
                || err.is_connection_refusal() =>
            {
                Self::Unreachable {
                    message,
                    cause: cause(),
                }
            }
            _ => Self::Unreachable {
                message,
                cause: cause(),
            },
        }
    }
}

/// Classifies an error reply by its code and text. Errors raised inside a script come back as
/// `ERR ... script: ...` in some versions and with their own code (e.g. `OOM`) in others, so
/// both are looked at.
fn refused_kind_from_message(code: Option<&str>, message: &str) -> RefusedKind {
    let code = code.unwrap_or("ERR");
    let has = |needle: &str| message.contains(needle);
    if code == "OOM" || has("OOM command not allowed") {
        RefusedKind::OutOfMemory
    } else if code == "READONLY" || has("READONLY") {
        RefusedKind::ReadOnly
    } else if code == "NOPERM"
        || has("NOPERM")
        || has("No permissions")
        // What an ACL denial inside a Lua script reads like (Redis 6.2 and 7.0: "The user
        // executing the script can't run this command or subcommand"; Redis 7.2+ and Valkey:
        // "ACL failure in script: User .. has no permissions to run the 'get' command").
        || has("can't run this command")
        || has("ACL failure in script")
    {
        RefusedKind::NoPermission
    } else if code == "LOADING" {
        RefusedKind::Loading
    } else if has("script") || has("Script") || code == "NOSCRIPT" {
        RefusedKind::Script
    } else {
        RefusedKind::Other(code.to_owned())
    }
}

impl StoreError {
    /// Whether the same call may succeed if tried again shortly: the store was unreachable
    /// or slow, was mid-failover (`READONLY`, `LOADING`), a Cluster slot was mid-migration or
    /// the cluster was settling (`TRYAGAIN`, `CLUSTERDOWN`: the node ran nothing), or too few
    /// nodes or replicas answered. Configuration, credential, permission, memory and protocol
    /// errors are not transient. A waiting [`acquire`](crate::LockBuilder::acquire) retries
    /// transient errors within its wait.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unreachable { .. }
            | Self::Timeout { .. }
            | Self::NotReplicated { .. }
            | Self::NoQuorum { .. } => true,
            Self::Refused { kind, .. } => match kind {
                RefusedKind::ReadOnly | RefusedKind::Loading => true,
                RefusedKind::Other(code) => code == "TRYAGAIN" || code == "CLUSTERDOWN",
                _ => false,
            },
            Self::Auth { .. }
            | Self::Config { .. }
            | Self::Evicting { .. }
            | Self::Unsupported { .. }
            | Self::Protocol { .. } => false,
        }
    }

    /// A [`StoreError::Unreachable`] of this library's own (no Redis client error behind it).
    pub(crate) fn unreachable(message: impl Into<String>) -> Self {
        Self::Unreachable {
            message: message.into(),
            cause: None,
        }
    }

    /// Fills in the deadline of a [`StoreError::Timeout`] that came from the connection layer.
    pub(crate) fn with_deadline(self, deadline: Duration) -> Self {
        match self {
            Self::Timeout { after } if after.is_zero() => Self::Timeout { after: deadline },
            other => other,
        }
    }
}

/// Errors of the lock API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock is held by someone else and the caller asked not to wait (or `on_busy = error`).
    #[error("lock `{name}` is held by another owner; it frees up within {retry_after:?}")]
    Busy {
        /// The lock's name.
        name: String,
        /// The holder's remaining ttl: the longest the lock can stay busy unless renewed.
        retry_after: Duration,
    },
    /// The lock stayed busy for the whole wait.
    #[error("timed out after {waited:?} waiting for lock `{name}`")]
    Timeout {
        /// The lock's name.
        name: String,
        /// How long the caller waited.
        waited: Duration,
    },
    /// The lease can no longer be trusted: it expired, was taken over, or renewal failed until
    /// its safety deadline. Work done under it must be treated as unprotected.
    #[error("the lease on `{name}` was lost ({reason})")]
    LeaseLost {
        /// The lock's name.
        name: String,
        /// Why.
        reason: LossReason,
    },
    /// [`Lease::extend`](crate::Lease::extend) was called after the lease's
    /// [`max_hold`](crate::LockBuilder::max_hold) had passed: the lease runs out its last ttl
    /// and cannot be extended.
    #[error("the lease on `{name}` has been held for its max_hold and cannot be extended")]
    MaxHoldReached {
        /// The lock's name.
        name: String,
    },
    /// The store failed; see [`StoreError`].
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The lock name cannot be used; see [`InvalidName`].
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    /// A lock option is out of range (e.g. a zero ttl).
    #[error("invalid lock configuration: {reason}")]
    InvalidConfig {
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// More permits were asked of a semaphore than it has: the request could never be
    /// granted. Refused without a round trip.
    #[error("{asked} permits asked of semaphore `{name}`, which has {permits}")]
    PermitsExceeded {
        /// The semaphore's name.
        name: String,
        /// Permits asked for.
        asked: u32,
        /// Permits the semaphore has.
        permits: u32,
    },
    /// The client's store cannot hold this primitive: semaphores and read-write locks on a
    /// Redlock quorum (majorities of independent primaries do not bound how many hold at
    /// once). Use a client on a single primary or a Cluster for them.
    #[error("{reason}")]
    UnsupportedStore {
        /// Why, and what to use instead.
        reason: &'static str,
    },
    /// `#[distributed_lock]` was used without `client = ...` and no default client was
    /// installed with [`set_default_client`](crate::set_default_client).
    #[error(
        "no default distlock client is installed: call distlock::set_default_client(client) at \
         start-up, or pass `client = <expr>` to #[distributed_lock]"
    )]
    NoDefaultClient,
    /// The client is shutting down ([`Client::close`](crate::Client::close) or
    /// [`Client::shutdown`](crate::Client::shutdown) was called on it or on a clone): it grants
    /// no new lease (lock, permit, read or write hold, multi-lock, campaign, job run), and
    /// acquires that were waiting end with this error. Nothing was taken. Retry on another
    /// instance, or on a client of your own if this one is being replaced.
    #[error(
        "`{name}` was not acquired: the client is shutting down and grants no new leases \
         (retry on another instance)"
    )]
    ShuttingDown {
        /// The name of what was asked for.
        name: String,
    },
}

/// Why a lease ended or can no longer be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// The lease was released by its owner (normal end, not a failure).
    Released,
    /// Redis says the key is gone or holds another token (expired, evicted, deleted, or taken
    /// over after an expiry).
    NotHeld,
    /// No renewal succeeded before the local safety deadline (acquire time + ttl − drift);
    /// the store may have let the key expire.
    Expired,
    /// The client is shutting down ([`Client::shutdown`](crate::Client::shutdown)): the
    /// lease was released for its holder, who should stop the work it guarded.
    Shutdown,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Released => "released",
            Self::NotHeld => "the store no longer holds it for this owner",
            Self::Expired => "its ttl ran out before it could be renewed",
            Self::Shutdown => "its client is shutting down and released it",
        })
    }
}

/// A lock or subject name that cannot be turned into a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidName {
    /// The name is empty.
    #[error("invalid name: it is empty")]
    Empty,
    /// The name is longer than [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes.
    #[error("invalid name: it is {len} bytes long, the limit is {max} bytes")]
    TooLong {
        /// The name's length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A level of a hierarchical lock's path is empty (`a//b`, or a path that starts or
    /// ends with `/`).
    #[error("invalid path: level {level} is empty (levels are separated by '/')")]
    EmptyLevel {
        /// Which level, counting from 1 at the root.
        level: usize,
    },
    /// A hierarchical lock's path has more levels than
    /// [`MAX_HIERARCHY_LEVELS`](crate::MAX_HIERARCHY_LEVELS).
    #[error("invalid path: it has {levels} levels, the limit is {max}")]
    TooManyLevels {
        /// The path's levels.
        levels: usize,
        /// The limit.
        max: usize,
    },
}

/// Errors of a rate-limit check. A denied request is *not* an error: it is an `Ok`
/// [`Decision`](crate::ratelimit::Decision) with `allowed == false`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RateLimitError {
    /// The store failed (or did not answer within the check's deadline) and the limiter's
    /// outage policy is [`Outage::FailClosed`](crate::ratelimit::Outage::FailClosed). The
    /// request should be refused as "temporarily unavailable", not as "too many requests".
    #[error(transparent)]
    Store(#[from] StoreError),
    /// More checks of this limiter were waiting on the store than its
    /// [`max_in_flight`](crate::ratelimit::RateLimiterBuilder::max_in_flight) allows (the store is
    /// slow), and the outage policy is fail-closed. Nothing was queued.
    #[error(
        "{in_flight} rate-limit checks are already waiting on the store; refusing to queue more"
    )]
    Overloaded {
        /// The limit that was reached.
        in_flight: usize,
    },
    /// The store failed several times in a row, so the limiter's
    /// [`CircuitBreaker`](crate::ratelimit::CircuitBreaker) skips it for a while instead of
    /// waiting a deadline on every check, and the outage policy is fail-closed (or the
    /// operation is a reset, refund or penalty, which only the store can do). Refuse the
    /// request as temporarily unavailable.
    #[error(
        "the rate-limit store is being skipped after repeated failures; next try in {retry_in:?}"
    )]
    CircuitOpen {
        /// How long until the breaker lets a probe through to the store.
        retry_in: Duration,
    },
    /// The subject cannot be turned into a key; see [`InvalidName`].
    #[error(transparent)]
    InvalidSubject(#[from] InvalidName),
    /// The client's store cannot rate limit: a Redlock quorum counts on independent primaries,
    /// which is not exact. Refused whatever the outage policy says; use a client on a single
    /// primary or a Cluster for rate limits.
    #[error("{reason}")]
    UnsupportedStore {
        /// Why, and what to use instead.
        reason: &'static str,
    },
    /// The request costs more than a policy can ever allow at once, so it could never pass:
    /// raise the policy's burst (or limit) or split the request.
    #[error(
        "a cost of {cost} can never pass policy `{policy}`, which allows at most {capacity} at once"
    )]
    CostTooLarge {
        /// The cost asked for.
        cost: u32,
        /// The policy that can never allow it.
        policy: String,
        /// The most that policy allows at once (its burst or limit).
        capacity: u32,
    },
    /// [`check_up_to`](crate::ratelimit::RateLimiter::check_up_to) was asked for no units:
    /// ask for at least one (a [`peek`](crate::ratelimit::RateLimiter::peek) tells what is
    /// left without consuming).
    #[error("check_up_to needs at least one unit, got 0; use peek to consume nothing")]
    NoUnits,
    /// The operation is not defined for an any-of limiter
    /// ([`Client::rate_limiter_any`](crate::Client::rate_limiter_any)): a
    /// [`refund`](crate::ratelimit::RateLimiter::refund) or
    /// [`penalize`](crate::ratelimit::RateLimiter::penalize) would not know which policy to
    /// credit or charge, and a [`check_up_to`](crate::ratelimit::RateLimiter::check_up_to)
    /// which policy to grant from. Nothing was sent. To give back what an any-of check
    /// charged, refund through a limiter of the one policy its decision names as
    /// [`charged`](crate::ratelimit::PolicyDecision::charged) (same client, same policy:
    /// same keys).
    #[error("`{operation}` is not defined for an any-of rate limiter")]
    NotForAnyOf {
        /// The operation refused: `refund`, `penalize` or `check_up_to`.
        operation: &'static str,
    },
    /// The limiter's configuration is invalid; see [`InvalidPolicy`].
    #[error(transparent)]
    InvalidPolicy(#[from] InvalidPolicy),
    /// A call of a [`#[rate_limit]`](crate::rate_limit) function was refused: a policy denied
    /// it (with `on_limit = wait`, its turn would have come later than `max_wait`), and the
    /// function did not run. The limiter's own checks never return it: for them a denial is
    /// an `Ok` [`Decision`](crate::ratelimit::Decision). Answer it as "too many requests"
    /// (`429` with `Retry-After`, see [`http`](crate::http)), or retry after `retry_after`.
    #[error("rate limit `{policy}` reached; the call may pass again in {retry_after:?}")]
    Limited {
        /// The policy that denied the call (the one with the longest wait, when several did).
        policy: String,
        /// How long until the same call would pass, if nobody else consumes meanwhile.
        retry_after: Duration,
    },
    /// A [`#[rate_limit]`](crate::rate_limit) function without `client = ...` was called and
    /// no default client was installed with [`set_default_client`](crate::set_default_client).
    #[error(
        "no default distlock client is installed: call distlock::set_default_client(client) at \
         start-up, or pass `client = <expr>` to #[rate_limit]"
    )]
    NoDefaultClient,
}

/// Why a [`Rate`](crate::ratelimit::Rate), a [`Policy`](crate::ratelimit::Policy) or a set of
/// policies cannot be built. Returned by the constructors, so an invalid limit is refused
/// where it is written, not on the first request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidPolicy {
    /// A count, burst or limit of zero would deny everything; say so explicitly instead.
    #[error("invalid rate: the {what} must be at least 1")]
    Zero {
        /// `"count"` or `"burst"`.
        what: &'static str,
    },
    /// The period is shorter than 1 ms or longer than the maximum.
    #[error("invalid rate: the period {period:?} is outside {min:?}..={max:?}")]
    Period {
        /// The period given.
        period: std::time::Duration,
        /// The shortest period accepted.
        min: std::time::Duration,
        /// The longest period accepted.
        max: std::time::Duration,
    },
    /// More than one request per microsecond: the algorithms count in whole microseconds.
    #[error("invalid rate: {count} per {period:?} is more than one per microsecond")]
    TooFast {
        /// The count given.
        count: u32,
        /// The period given.
        period: std::time::Duration,
    },
    /// The burst takes longer than the maximum period to refill (burst × period / count),
    /// which would keep state for longer than the library allows.
    #[error("invalid rate: a burst of {burst} takes longer than {max:?} to refill at this rate")]
    BurstTooLong {
        /// The burst given.
        burst: u32,
        /// The longest refill accepted.
        max: std::time::Duration,
    },
    /// Window algorithms allow `count` per window; a separate burst has no meaning for them.
    #[error(
        "invalid policy `{policy}`: a {algorithm} allows `count` per window; it takes no \
         separate burst (got burst {burst} for count {count})"
    )]
    BurstNotSupported {
        /// The policy's name.
        policy: String,
        /// The algorithm.
        algorithm: &'static str,
        /// The burst given.
        burst: u32,
        /// The count given.
        count: u32,
    },
    /// A sliding log stores one entry per request in the window; larger limits must use
    /// another algorithm (the sliding window counter approximates it in O(1)).
    #[error(
        "invalid policy `{policy}`: a sliding log is capped at {max} requests per window, got {limit}"
    )]
    LogTooLarge {
        /// The policy's name.
        policy: String,
        /// The limit given.
        limit: u32,
        /// The largest accepted.
        max: u32,
    },
    /// Policy names appear in keys and HTTP headers: 1 to 64 characters of `A-Z a-z 0-9 . _ -`.
    #[error("invalid policy name {name:?}: use 1 to 64 characters of A-Z, a-z, 0-9, '.', '_', '-'")]
    Name {
        /// The name given.
        name: String,
    },
    /// A limiter needs at least one policy.
    #[error("a rate limiter needs at least one policy")]
    NoPolicies,
    /// Two policies of one limiter have the same name (they would share keys).
    #[error("two policies of one rate limiter are both named `{name}`")]
    DuplicateName {
        /// The repeated name.
        name: String,
    },
    /// More policies than one check may combine.
    #[error("a rate limiter combines at most {max} policies, got {count}")]
    TooManyPolicies {
        /// How many were given.
        count: usize,
        /// The most accepted.
        max: usize,
    },
    /// A per-subject rate names a policy the limiter does not have.
    #[error("the rate limiter has no policy named `{name}`")]
    UnknownPolicy {
        /// The name given.
        name: String,
    },
    /// A circuit breaker setting is out of range.
    #[error("invalid circuit breaker: {reason}")]
    CircuitBreaker {
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// How long sliding logs are kept
    /// ([`keep_logs_for`](crate::ratelimit::RateLimiterBuilder::keep_logs_for)) is zero or
    /// longer than the longest period.
    #[error("invalid log retention {keep:?}: use more than zero and at most {max:?}")]
    LogRetention {
        /// The retention given.
        keep: std::time::Duration,
        /// The longest accepted.
        max: std::time::Duration,
    },
    /// A hybrid share ([`hybrid`](crate::ratelimit::RateLimiterBuilder::hybrid)) of 0, or
    /// above the least limit of the limiter's policies.
    #[error(
        "invalid hybrid share {share}: use at least 1 and at most the least policy limit, {limit}"
    )]
    HybridShare {
        /// The share given.
        share: u32,
        /// The least limit of the policies.
        limit: u32,
    },
    /// A hybrid sync interval of zero or longer than the longest period.
    #[error("invalid hybrid sync interval {sync:?}: use more than zero and at most {max:?}")]
    HybridSync {
        /// The interval given.
        sync: std::time::Duration,
        /// The longest accepted.
        max: std::time::Duration,
    },
    /// Hybrid mode together with shadow mode: a shadowed pass is not counted, so no share
    /// can hold it.
    #[error(
        "a hybrid limiter cannot run in shadow mode: shadowed passes are not counted, so no share can hold them"
    )]
    HybridInShadowMode,
    /// Hybrid mode on an any-of limiter: a share is leased with a partial grant, which an
    /// any-of combination does not make.
    #[error(
        "a hybrid limiter cannot combine its policies as any-of: shares are leased with partial grants, which any-of does not make"
    )]
    HybridAnyOf,
    /// An option of the limiter out of its bounds, named
    /// ([`LimiterOptions::check`](crate::ratelimit::LimiterOptions::check)): a zero deadline,
    /// `max_in_flight` 0, ... (the bounds with a variant of their own, such as
    /// [`LogRetention`](Self::LogRetention), are reported as it).
    #[error(transparent)]
    LimiterOption(InvalidOption),
    /// A [`Lockout`](crate::ratelimit::Lockout) without steps.
    #[error(
        "invalid lockout of policy `{policy}`: it needs at least one step (the first block's \
         length)"
    )]
    NoLockoutSteps {
        /// The policy's name.
        policy: String,
    },
    /// A lockout with more than [`MAX_LOCKOUT_STEPS`](crate::ratelimit::MAX_LOCKOUT_STEPS)
    /// steps.
    #[error("invalid lockout of policy `{policy}`: {count} steps; at most {max}")]
    TooManyLockoutSteps {
        /// The policy's name.
        policy: String,
        /// How many were given.
        count: usize,
        /// The most accepted.
        max: usize,
    },
    /// A lockout step (a block's length) is zero, under
    /// [`MIN_LOCKOUT`](crate::ratelimit::MIN_LOCKOUT) or longer than
    /// [`MAX_PERIOD`](crate::ratelimit::MAX_PERIOD).
    #[error(
        "invalid lockout of policy `{policy}`: step {step} lasts {length:?}; use {min:?}..={max:?}"
    )]
    LockoutStep {
        /// The policy's name.
        policy: String,
        /// Which step, from 1.
        step: usize,
        /// Its length.
        length: std::time::Duration,
        /// The shortest accepted.
        min: std::time::Duration,
        /// The longest accepted.
        max: std::time::Duration,
    },
    /// A lockout step is not longer than the one before it: each breach must block longer.
    #[error(
        "invalid lockout of policy `{policy}`: step {step} ({length:?}) must be longer than step \
         {} ({previous:?})", .step - 1
    )]
    LockoutNotIncreasing {
        /// The policy's name.
        policy: String,
        /// Which step, from 2.
        step: usize,
        /// Its length.
        length: std::time::Duration,
        /// The step before's length.
        previous: std::time::Duration,
    },
    /// How long a lockout remembers breaches is zero, under
    /// [`MIN_LOCKOUT`](crate::ratelimit::MIN_LOCKOUT) or longer than
    /// [`MAX_PERIOD`](crate::ratelimit::MAX_PERIOD).
    #[error(
        "invalid lockout of policy `{policy}`: breaches remembered for {memory:?}; use \
         {min:?}..={max:?}"
    )]
    LockoutMemory {
        /// The policy's name.
        policy: String,
        /// The memory window given.
        memory: std::time::Duration,
        /// The shortest accepted.
        min: std::time::Duration,
        /// The longest accepted.
        max: std::time::Duration,
    },
}

/// Errors of a [`BloomFilter`](crate::bloom::BloomFilter).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BloomError {
    /// A setting is out of range (or `expected_items` is missing); refused by `open`.
    #[error("invalid Bloom filter configuration: {reason}")]
    InvalidConfig {
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// The filter exists with another configuration (or in the other storage): two services
    /// disagree on its size. Open it with the same `expected_items`, `false_positive_rate`
    /// and storage, or give one of them another name.
    #[error("Bloom filter `{name}` exists as {stored:?}, not as {requested:?}")]
    ConfigMismatch {
        /// The filter's name.
        name: String,
        /// The configuration found in the store.
        stored: String,
        /// The configuration asked for.
        requested: String,
    },
    /// [`BloomStorage::RedisBloom`](crate::bloom::BloomStorage::RedisBloom) was asked for and
    /// the server has no RedisBloom module.
    #[error(
        "the server has no RedisBloom module (BF.* commands); use BloomStorage::Auto or Bitmaps"
    )]
    ModuleMissing,
    /// The client's store cannot hold a filter (a Redlock quorum).
    #[error("{reason}")]
    UnsupportedStore {
        /// Why, and what to use instead.
        reason: &'static str,
    },
    /// The name cannot be turned into a key; see [`InvalidName`].
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    /// The store failed; see [`StoreError`].
    #[error(transparent)]
    Store(#[from] StoreError),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ACL denial of a command a script runs, as each server version words it, is
    /// `NoPermission` (scripts/version-matrix.sh runs tests/replication/acl.rs on each).
    #[test]
    fn acl_denials_inside_scripts_are_no_permission_on_every_version() {
        for message in [
            // Redis 6.2 (wrapped in the script error) and 7.0.
            "ERR Error running script (call to f_20b9): @user_script:86: @user_script: 86: \
             The user executing the script can't run this command or subcommand",
            "ERR The user executing the script can't run this command or subcommand script: \
             20b9, on @user_script:86.",
            // Redis 7.2+ and Valkey 8.
            "ERR ACL failure in script: User locker has no permissions to run the 'get' command \
             script: 20b9, on @user_script:86.",
        ] {
            assert_eq!(
                refused_kind_from_message(Some("ERR"), message),
                RefusedKind::NoPermission,
                "{message}"
            );
        }
    }

    /// A Cluster node that ran nothing (a slot mid-migration, a cluster settling) is a
    /// transient refusal: a waiting acquire retries it. Other refusals are not.
    #[test]
    fn cluster_refusals_that_ran_nothing_are_transient() {
        // An error reply as the server sends it, through redis-rs's own parser.
        let reply = |line: &str| {
            let value = redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
                .expect("an error reply parses");
            let err = value.extract_error().expect_err("an error reply");
            StoreError::from(err)
        };
        for line in [
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "CLUSTERDOWN The cluster is down",
            "READONLY You can't write against a read only replica.",
            "LOADING Redis is loading the dataset in memory",
        ] {
            let err = reply(line);
            assert!(matches!(err, StoreError::Refused { .. }), "{line}: {err:?}");
            assert!(err.is_transient(), "{line}: {err:?}");
        }
        for line in [
            "ERR unknown command",
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            "NOPERM this user has no permissions",
            "OOM command not allowed when used memory > 'maxmemory'.",
        ] {
            assert!(!reply(line).is_transient(), "{line}");
        }
    }

    /// A refusal keeps the Redis client's error as its source, to downcast; one of this
    /// library's own has none.
    #[test]
    fn a_refusal_keeps_the_redis_error_as_its_source() {
        use std::error::Error as _;

        let value = redis::parse_redis_value(b"-NOPERM this user has no permissions\r\n")
            .expect("an error reply parses");
        let err = StoreError::from(value.extract_error().expect_err("an error reply"));
        let source = err.source().expect("a source");
        let cause = source.downcast_ref::<Cause>().expect("a Cause");
        let redis_err = cause
            .get_ref()
            .downcast_ref::<redis::RedisError>()
            .expect("the redis error itself");
        assert_eq!(redis_err.code(), Some("NOPERM"));
        assert_eq!(source.to_string(), redis_err.to_string());
        assert!(StoreError::unreachable("gone").source().is_none());
    }
}

/// A lock's or a rate limiter's option that no store accepts: which one, and why. Returned
/// by [`LockOptions::check`](crate::LockOptions::check) and
/// [`LimiterOptions::check`](crate::ratelimit::LimiterOptions::check); the configuration
/// loader and the tower layers report it under their own error types, naming the same
/// field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidOption {
    field: &'static str,
    reason: String,
}

impl InvalidOption {
    pub(crate) fn new(field: &'static str, reason: String) -> Self {
        Self { field, reason }
    }

    /// The option, as its setter is named (`"ttl"`, `"min_hold"`, `"replicas"`, ...;
    /// `"retry_backoff.first"`, `"retry_backoff.largest"` and `"replicas.timeout"` for part of
    /// one).
    #[must_use]
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// Why its value is refused, without the field's name.
    #[must_use]
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl InvalidOption {
    /// As the builders report it: [`LockError::InvalidConfig`]. (Not a `From` impl: it would
    /// join the list of conversions the compiler suggests for every `LockError`, as in the
    /// macros' compile errors.)
    pub(crate) fn lock_error(self) -> LockError {
        LockError::InvalidConfig {
            reason: self.to_string(),
        }
    }
}
