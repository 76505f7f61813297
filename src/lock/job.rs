//! Scheduled-job locks: the lock that ShedLock made familiar, on a lease.
//!
//! Every replica runs the job on its own schedule (a timer, cron) and calls
//! [`JobBuilder::run`] when it is due; one of them gets the job's lock and runs the body, the
//! others find it held and skip (`Ok(None)`). Two bounds make that hold up:
//!
//! * **`at_least`**: the lock is kept at least this long after the run started, however
//!   quickly the body finished, so a replica whose clock is a little behind does not run the
//!   job a second time in the same period. This is done by setting the key's expiry (the
//!   grant and every renewal ask for at least what remains, and the release sets the expiry
//!   to what remains instead of deleting the key), not by a process that sleeps: a replica
//!   that crashes right after the body still keeps the lock until then.
//! * **`at_most`**: the watchdog renews the lease while the body runs, but no longer than
//!   this; a body stuck past it loses the lock and is dropped, so one stuck replica does not
//!   block the job for ever.

use std::future::Future;
use std::time::Duration;

use super::context::LockContext;
use super::{LeaseHandle, LockBuilder};
use crate::error::LockError;

/// A scheduled job's lock. Start with [`Client::job`](crate::Client::job).
///
/// Defaults: ttl 30 s renewed by the watchdog while the body runs, no `at_least`, no
/// `at_most`; never waits (a replica that finds the job running elsewhere skips it).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock::LockError> {
/// use std::time::Duration;
///
/// let client = distlock::Client::in_memory();
/// let job = || {
///     client
///         .job("nightly-report")
///         .at_least(Duration::from_secs(60)) // once per minute at most, across replicas
///         .at_most(Duration::from_secs(600)) // a stuck run loses the lock after 10 min
/// };
/// let ran = job().run(|lease| async move { lease.fence().await }).await?;
/// assert!(matches!(ran, Some(Ok(_)))); // it ran here, and minted its fence on the way
/// // The body is done, but the lock stays for the rest of the minute: another replica skips.
/// assert_eq!(job().run(|_| async {}).await?, None);
/// # Ok(()) }
/// ```
#[must_use = "a JobBuilder does nothing until run() is awaited"]
#[derive(Debug)]
pub struct JobBuilder {
    lock: LockBuilder,
}

impl JobBuilder {
    pub(crate) fn new(client: LockContext, name: String) -> Self {
        Self {
            lock: LockBuilder::new(client, name).listed_as(crate::lock::kind::LeaseKind::JobRun),
        }
    }

    /// Keeps the job's lock at least `at_least` after the run started, even once the body
    /// is done (or the process died): see [`LockBuilder::min_hold`]. Zero means none.
    pub fn at_least(mut self, at_least: Duration) -> Self {
        self.lock = self.lock.min_hold(at_least);
        self
    }

    /// Stops renewing the lock `at_most` after the run started: a body still running then
    /// loses it and is dropped (see [`LockBuilder::max_hold`]). Not zero; not shorter than
    /// `at_least`; `Duration::MAX` means no limit.
    pub fn at_most(mut self, at_most: Duration) -> Self {
        self.lock = self.lock.max_hold(at_most);
        self
    }

    /// Mints the run's fence with the grant (an eager lease: see [`LockBuilder::fenced`]),
    /// for a job that always records its run under its fence. Without it the body mints the
    /// fence when it first asks ([`LeaseHandle::fence`]), once per run, and a run that does
    /// not ask pays nothing.
    pub fn fenced(mut self) -> Self {
        self.lock = self.lock.fenced();
        self
    }

    /// The lease's ttl (default 30 s), renewed every ttl/3 while the body runs: how long a
    /// replica that crashes mid-run keeps the job (at least `at_least` from the start).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.lock = self.lock.ttl(ttl);
        self
    }

    /// Runs `body` if this replica gets the job's lock: `Ok(Some(value))` when it ran here,
    /// `Ok(None)` when it was skipped because the lock was held (the job is running elsewhere,
    /// or ran less than `at_least` ago). The body is dropped if the lease is lost. Afterwards
    /// the lock is kept until `at_least` has passed since the start, then it is free.
    ///
    /// For a body that can fail, [`try_run`](Self::try_run) keeps its error apart from the
    /// lock's.
    ///
    /// # Errors
    /// [`LockError::LeaseLost`] if the body was dropped, [`LockError::Store`],
    /// [`LockError::InvalidName`] and [`LockError::InvalidConfig`] (`at_least` longer than
    /// `at_most` or than [`MAX_TTL`](crate::MAX_TTL), a zero `at_most`, a ttl out of range).
    /// A held lock is not an error.
    pub async fn run<F, Fut, T>(self, body: F) -> Result<Option<T>, LockError>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        match self.lock.run(body).await {
            Ok(value) => Ok(Some(value)),
            Err(err) => skipped_if_busy(err).map(|()| None),
        }
    }

    /// [`run`](Self::run) for a body that returns a `Result`: `Ok(Some(value))` when it ran
    /// here and succeeded, `Ok(None)` when it was skipped because the lock was held, and the
    /// body's own error, or the lock's converted into `E`, otherwise. This is what
    /// `#[distributed_lock(..., on_busy = skip)]` does for a function returning
    /// `Result<Option<T>, E>`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use std::time::Duration;
    ///
    /// // The body's error type only needs `From<LockError>`; a boxed error has it.
    /// type BoxError = Box<dyn std::error::Error + Send + Sync>;
    ///
    /// let client = distlock::Client::in_memory();
    /// let nightly = || client.job("nightly-export").at_least(Duration::from_secs(60));
    ///
    /// let exported = nightly()
    ///     .try_run(|_lease| async { Ok::<_, BoxError>(42) })
    ///     .await?;
    /// assert_eq!(exported, Some(42));
    /// // Within the minute, every replica skips: the body does not run, its error neither.
    /// let again = nightly()
    ///     .try_run(|_lease| async { Err::<u32, BoxError>("never runs".into()) })
    ///     .await?;
    /// assert_eq!(again, None);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// The body's error; the lock's errors of [`run`](Self::run), converted into `E`.
    pub async fn try_run<F, Fut, T, E>(self, body: F) -> Result<Option<T>, E>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        match self.lock.run(body).await {
            Ok(result) => result.map(Some),
            Err(err) => skipped_if_busy(err).map(|()| None).map_err(E::from),
        }
    }
}

/// `Ok` (the run is skipped) when `err` says the lock is held by another owner; the error
/// otherwise.
fn skipped_if_busy(err: LockError) -> Result<(), LockError> {
    match err {
        LockError::Busy { name, retry_after } => {
            tracing::debug!(
                job = %name,
                ?retry_after,
                "skipped: the job's lock is held by another owner"
            );
            Ok(())
        }
        err => Err(err),
    }
}
