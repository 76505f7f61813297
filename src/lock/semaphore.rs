//! Semaphores: at most `permits` held at once across every client of the store, each grant a
//! lease on its permits.
//!
//! The permits live in a holder set (`holders.lua`): one entry per permit, scored by its
//! expiry, pruned by every script before it counts. A holder that dies stops renewing, so its
//! entries expire with its ttl and are pruned by the next caller: permits never leak. A grant
//! needs `held + count <= permits` after pruning, in one script, so no interleaving of
//! clients ever holds more than `permits` (as each caller counts them: lowering `permits`
//! takes nothing away from the holders, it only makes new grants wait until enough have
//! gone).

use std::future::Future;
use std::sync::Arc;

use super::context::LockContext;
use super::hold::Hold;
use super::kind::LeaseKind;
use super::metrics::Primitive;
use super::options::{LockOptions, lease_options};
use super::state::{LeaseState, Terms};
use super::wait::{self, Attempt, Claim};
use super::{Lease, LeaseHandle, RunReport, check_holder_sets, run_under};
use crate::error::LockError;
use crate::keys::SetKeys;
use crate::store::{PermitsItem, Waits};
use crate::token::Token;

/// The most permits a semaphore may have (each held permit is one entry of a sorted set).
pub const MAX_PERMITS: u32 = 10_000;

/// Options for taking permits of a semaphore. Start with [`Client::semaphore`](crate::Client::semaphore).
///
/// Defaults: ttl 30 s with the watchdog renewing it while held; try once (no waiting); no
/// maximum hold.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock::LockError> {
/// use std::time::Duration;
///
/// let client = distlock::Client::in_memory();
/// // At most 2 exports at once, across every replica.
/// let exports = || client.semaphore("exports", 2).wait(Duration::from_secs(5));
/// let a = exports().acquire().await?;
/// let b = exports().acquire().await?;
/// // Full: a third is refused at once (without `wait`), told how long until a permit can free.
/// assert!(matches!(
///     client.semaphore("exports", 2).acquire().await,
///     Err(distlock::LockError::Busy { .. })
/// ));
/// let b_fence = b.fence().await?; // minted with the grant: semaphores are eager
/// a.release().await?;
/// let c = exports().acquire().await?; // the freed permit
/// assert!(c.fence().await? > b_fence);
/// # Ok(()) }
/// ```
#[must_use = "a SemaphoreBuilder does nothing until acquire() or run() is awaited"]
#[derive(Debug)]
pub struct SemaphoreBuilder {
    client: LockContext,
    name: String,
    permits: u32,
    options: LockOptions,
}

impl SemaphoreBuilder {
    pub(crate) fn new(client: LockContext, name: String, permits: u32) -> Self {
        Self {
            client,
            name,
            permits,
            options: LockOptions::new().shared_only(),
        }
    }

    lease_options!(options);

    /// Every option a permit takes at once (see [`LockOptions`]): ttl, wait, watchdog,
    /// maximum hold, store patience, attempts, backoff and identity. A lock's own options
    /// (replica acknowledgement, minimum hold, reentrancy, an eager fence) do not apply to a
    /// permit and are ignored. Replaces what earlier setters set.
    pub fn options(mut self, options: LockOptions) -> Self {
        self.options = options.shared_only();
        self
    }

    fn validate(&self, count: u32) -> Result<(SetKeys, Terms), LockError> {
        let keys = self.client.core().semaphore_keys(&self.name)?;
        check_holder_sets(&self.client)?;
        if self.permits == 0 || self.permits > MAX_PERMITS {
            return Err(LockError::InvalidConfig {
                reason: format!(
                    "a semaphore has 1 to {MAX_PERMITS} permits, not {}",
                    self.permits
                ),
            });
        }
        if count == 0 {
            return Err(LockError::InvalidConfig {
                reason: "acquire_n needs at least 1 permit".to_owned(),
            });
        }
        if count > self.permits {
            return Err(LockError::PermitsExceeded {
                name: self.name.clone(),
                asked: count,
                permits: self.permits,
            });
        }
        Ok((keys, self.options.validate(self.client.core())?))
    }

    /// Takes one permit, waiting as configured.
    ///
    /// # Errors
    /// As [`acquire_n`](Self::acquire_n).
    pub async fn acquire(self) -> Result<Lease, LockError> {
        self.acquire_n(1).await
    }

    /// Takes `count` permits at once, all or nothing, waiting as configured: one lease holds
    /// them, renewed, released and lost together. Cancel-safe: a grant made for a dropped
    /// future is given back in the background.
    ///
    /// # Errors
    /// [`LockError::PermitsExceeded`] if `count` is more than the semaphore has (no round
    /// trip: it could never be granted), [`LockError::InvalidConfig`] for a `count` or a
    /// number of permits of 0 (or permits above [`MAX_PERMITS`]) and out-of-range options,
    /// [`LockError::UnsupportedStore`] on a Redlock quorum, [`LockError::Busy`] (not
    /// waiting: `retry_after` is how long until enough permits expire unless renewed),
    /// [`LockError::Timeout`], [`LockError::Store`] and [`LockError::InvalidName`].
    pub async fn acquire_n(self, count: u32) -> Result<Lease, LockError> {
        let (keys, terms) = self.validate(count)?;
        let identity = self.options.identity_on(self.client.core());
        let mut claim = PermitsClaim {
            client: &self.client,
            keys,
            count,
            permits: self.permits,
            terms,
            token: Token::mint(&identity),
            identity,
        };
        let (shared, how) = self.options.wait_for(&self.client, &mut claim).await?;
        tracing::debug!(
            semaphore = %self.name,
            count,
            fence = shared.minted_fence(),
            attempts = how.attempts,
            waited_ms = how.waited_ms(),
            woken_by = how.woken_by,
            "permits acquired"
        );
        let lease = Lease::granted(self.client.clone(), shared, Primitive::Semaphore)?;
        lease.handle().shared.set_kind(LeaseKind::Permits);
        Ok(lease)
    }

    /// Takes one permit, runs `body` while it is held, and gives it back. As
    /// [`LockBuilder::run`](crate::LockBuilder::run): the body is dropped if the lease is
    /// lost, and a body that finished returns its value whatever the release finds.
    ///
    /// # Errors
    /// Those of [`acquire`](Self::acquire), and [`LockError::LeaseLost`].
    pub async fn run<F, Fut, T>(self, body: F) -> Result<T, LockError>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        Ok(self.run_reporting(body).await?.value)
    }

    /// As [`run`](Self::run), and also says what the release found.
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub async fn run_reporting<F, Fut, T>(self, body: F) -> Result<RunReport<T>, LockError>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        run_under(self.acquire().await?, body).await
    }
}

/// Permits to take, for the acquire loop.
struct PermitsClaim<'a> {
    client: &'a LockContext,
    keys: SetKeys,
    count: u32,
    permits: u32,
    terms: Terms,
    token: Token,
    /// The holder identity its tokens carry. The token is kept across busy attempts: a
    /// waiter's claim names it.
    identity: Arc<str>,
}

impl Claim for PermitsClaim<'_> {
    type Granted = Arc<LeaseState>;

    fn name(&self) -> &str {
        &self.keys.name
    }

    fn kind(&self) -> Primitive {
        Primitive::Semaphore
    }

    fn fresh_token(&mut self) {
        self.token = Token::mint(&self.identity);
    }

    /// A waiter that has waited long claims the permits it needs (`acquire_permits.lua`):
    /// from then on nobody else takes a permit that would leave it short, so a large
    /// `acquire_n` is not starved by a stream of small ones.
    fn claims_when_starving(&self) -> bool {
        true
    }

    fn channel(&self) -> &str {
        &self.keys.channel
    }

    async fn attempt(&mut self, waits: Waits) -> Result<Attempt<Arc<LeaseState>>, LockError> {
        let store = self.client.store();
        let hold = Hold::Entries {
            keys: self.keys.clone(),
            count: self.count,
        };
        let item = PermitsItem {
            keys: &self.keys,
            token: &self.token,
            count: self.count,
            permits: self.permits,
            ttl: self.terms.grant_ttl(),
            waits,
        };
        wait::settle(store, hold, &self.token, &self.terms, || {
            store.acquire_permits(&item)
        })
        .await
    }

    fn shared(&self) -> bool {
        true
    }
}
