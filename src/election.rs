//! Leader election with terms, built on the lock's leases: an election named `N` is the lock
//! `N`, its leader is the lease that holds it, and the leader's **term** is that lease's
//! fence, so terms strictly increase from one leader to the next. Campaigners are the lock's
//! waiters (woken by a release over pub/sub, handed the lock by a releaser of their own
//! client); the leader is renewed by the watchdog and told of a loss by the lost signal.
//!
//! Who leads is a **record** beside the lock key, `<prefix>:leader:{<name>}` (the lock's hash
//! tag, so the same slot on a cluster): the term, the identity the leader campaigned with,
//! and the SHA-1 of its lease's token. It is written by the leader once granted, rewritten by
//! the leadership's own task every third of the ttl (with twice the ttl to live), and deleted
//! on resign. A read reports it only while that lease still holds the lock (`leader.lua`
//! checks the digest against the lock key on the server, on each node of a quorum), so a
//! record left by a leader that crashed or was paused past its lease is never reported once
//! the lock has expired or moved on. The lock scripts are unchanged: the record is only read
//! beside the lock key.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use tokio::sync::Notify;

use crate::error::LockError;
use crate::keys::LockKeys;
use crate::lock::context::LockContext;
use crate::lock::options::check_ttl;
use crate::lock::{DEFAULT_TTL, Lease, LeaseHandle, LockBuilder, ReleaseOutcome, run_under};
use crate::store::{Record, Store, Subscription};
use crate::token::Token;

/// The longest identity a campaigner may give, in bytes.
pub const MAX_IDENTITY_LEN: usize = 512;

/// Options for an election. Start with [`Client::election`](crate::Client::election).
///
/// Defaults: ttl 30 s (a leader that dies is replaced within about that long; a live one is
/// renewed every ttl/3).
#[must_use = "an ElectionBuilder does nothing until built"]
#[derive(Debug)]
pub struct ElectionBuilder {
    client: LockContext,
    name: String,
    ttl: Duration,
}

impl ElectionBuilder {
    pub(crate) fn new(client: LockContext, name: String) -> Self {
        Self {
            client,
            name,
            ttl: DEFAULT_TTL,
        }
    }

    /// The leader's lease ttl ([`MIN_TTL`](crate::MIN_TTL) to [`MAX_TTL`](crate::MAX_TTL),
    /// default 30 s), as [`LockBuilder::ttl`]: renewed every ttl/3 while the leader lives, so it
    /// bounds how long a leader that crashed or froze keeps the leadership. It also sets how
    /// often followers that miss a wake-up look again: every ttl/3.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Checks the name and the ttl.
    ///
    /// # Errors
    /// [`LockError::InvalidName`] and [`LockError::InvalidConfig`] (a ttl out of bounds).
    pub fn build(self) -> Result<Election, LockError> {
        check_ttl(self.ttl).map_err(crate::error::InvalidOption::lock_error)?;
        let keys = self.client.core().lock_keys(&self.name)?;
        let record = self.client.core().leader_key(&self.name)?;
        Ok(Election {
            inner: Arc::new(Inner {
                client: self.client,
                keys,
                record,
                ttl: self.ttl,
            }),
        })
    }
}

/// An election: campaign to lead it, ask who leads, follow who leads. Cheap to clone.
///
/// See the guide's [leader election](crate::guide::coordination#leader-election).
#[derive(Clone)]
pub struct Election {
    inner: Arc<Inner>,
}

struct Inner {
    client: LockContext,
    keys: LockKeys,
    record: String,
    ttl: Duration,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.inner.keys.name)
            .field("ttl", &self.inner.ttl)
            .finish_non_exhaustive()
    }
}

/// Who leads an election: the term (the leader's fence) and the identity it campaigned with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's term: its lease's fence, strictly greater than every earlier leader's.
    /// Terms increase but are not consecutive (the fence counter is shared with other locks).
    pub term: u64,
    /// The identity the leader gave to [`Election::campaign`].
    pub identity: String,
}

impl Election {
    /// The election's name (the name of the lock underneath).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.inner.keys.name
    }

    /// The leader's lease ttl.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// The most a follower of [`observe`](Self::observe) waits before it looks again without
    /// a wake-up: a third of the ttl.
    #[must_use]
    pub fn observe_bound(&self) -> Duration {
        (self.inner.ttl / 3).max(Duration::from_millis(1))
    }

    fn store(&self) -> &Store {
        self.inner.client.store()
    }

    /// Waits to become the leader, as long as it takes, and returns the leadership once it
    /// holds the lock and has tried to write the record naming `identity`. Usually that write
    /// succeeded, and [`leader`](Self::leader) names it from then on; if the store failed it
    /// (logged at WARN), the leadership is returned all the same and the record is written at
    /// the leadership's next turn, so `leader()` may answer `None` for up to a third of the
    /// ttl (or as long as the store keeps failing).
    /// Campaigners wait as the lock's waiters do: a resign wakes them at once over pub/sub
    /// (hands the lock straight to a campaigner of the same client), and a leader that died
    /// is replaced once its lease has expired, within its ttl.
    ///
    /// The election's lock names `identity` as its holder ([`Client::lock_state`](crate::Client::lock_state)) when it
    /// is one a lock's holder may carry (visible ASCII, at most 128 bytes); any other identity
    /// leaves the client's there, and the record still names it whole.
    ///
    /// Cancel-safe: dropped while waiting, nothing is held; dropped after the grant, the lock
    /// is released. Bound it with `tokio::time::timeout` to give up.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] for an empty identity or one longer than
    /// [`MAX_IDENTITY_LEN`]; [`LockError::Store`] once the store has failed for longer than
    /// the lock's [`store_patience`](LockBuilder::store_patience) (30 s).
    pub async fn campaign(&self, identity: impl Into<String>) -> Result<Leadership, LockError> {
        let identity = identity.into();
        if identity.is_empty() || identity.len() > MAX_IDENTITY_LEN {
            return Err(LockError::InvalidConfig {
                reason: format!(
                    "an identity must be 1 to {MAX_IDENTITY_LEN} bytes, not {}",
                    identity.len()
                ),
            });
        }
        loop {
            // Eager: the term is the fence, and the record carries it from the start.
            let mut builder = LockBuilder::new(self.inner.client.clone(), self.name().to_owned())
                .ttl(self.inner.ttl)
                .wait_forever()
                .fenced()
                .listed_as(crate::lock::kind::LeaseKind::ElectionTerm);
            // The lock names the candidate too (`Client::lock_state`), where the identity is
            // one a holder may carry; any other keeps the client's.
            if crate::holder::check_identity(&identity).is_ok() {
                builder = builder.identity(identity.clone());
            }
            let lease = builder.acquire().await?;
            // Minted with the grant: answered at once.
            let term = lease.fence().await?;
            let record: Record = (term, identity.clone());
            let token = lease.handle().shared.token.clone();
            match self.put(&token, &record).await {
                Ok(true) => {}
                // Lost between the grant and the record (paused, or forced free): campaign
                // again.
                Ok(false) => continue,
                Err(err) => {
                    // Still the leader: the lock says so. The leadership's task writes the
                    // record at its next turn; until then `leader()` names nobody.
                    tracing::warn!(election = %self.name(), term = record.0, error = %err, "the leader record could not be written; retrying every ttl/3");
                }
            }
            let refresher = Refresher::start(self.clone(), lease.handle(), token, record);
            tracing::debug!(election = %self.name(), term, "elected");
            return Ok(Leadership {
                lease,
                term,
                identity,
                election: self.clone(),
                refresher,
            });
        }
    }

    async fn put(&self, token: &Token, record: &Record) -> Result<bool, LockError> {
        let ttl = self.inner.ttl.saturating_mul(2);
        Ok(self
            .store()
            .leader_put(&crate::store::LeaderPut {
                keys: crate::store::LeaderKeys {
                    lock: &self.inner.keys,
                    record_key: &self.inner.record,
                },
                token,
                record,
                ttl,
            })
            .await?)
    }

    /// Who leads now, as the store says: `None` while nobody does, or while a new leader has
    /// not written its record yet. A record whose lease no longer holds the lock (its leader
    /// crashed, froze past its ttl, or resigned) is never reported. A read: the answer may be
    /// stale by the time it returns; only the leader's own lease (its lost signal, its term
    /// given to what it writes to) protects what it does.
    ///
    /// On a Redlock quorum, the leader a majority of the nodes agree on.
    ///
    /// # Errors
    /// [`LockError::Store`] when the store did not answer (on a quorum: fewer than a majority
    /// of nodes).
    pub async fn leader(&self) -> Result<Option<Leader>, LockError> {
        let record = self
            .store()
            .leader_read(&crate::store::LeaderKeys {
                lock: &self.inner.keys,
                record_key: &self.inner.record,
            })
            .await?;
        Ok(record.map(|(term, identity)| Leader { term, identity }))
    }

    /// A stream of leaders for followers: each item a leader with a higher term than the one
    /// before, starting with the current leader if there is one. It never ends.
    ///
    /// Driven by the lock's release channel: a new leader's record is announced there when
    /// it is written, and the stream reads the record at once. If a wake-up is lost (or the
    /// store has no pub/sub connection), it looks again every [`observe_bound`](Self::observe_bound)
    /// (a third of the ttl): a leader is observed within that bound of its record being
    /// written, plus one round trip. A leadership that ends within that time may be skipped
    /// when wake-ups are lost (the stream reports leaders, not every step between them). A
    /// store that does not answer is asked again at the same pace (logged at DEBUG); a gap
    /// with no leader is not an item ([`leader`](Self::leader) answers `None` then).
    pub fn observe(&self) -> impl Stream<Item = Leader> + Send + 'static {
        let watch = Watch {
            election: self.clone(),
            last: None,
            subscription: None,
        };
        futures_util::stream::unfold(watch, |mut watch| async move {
            let leader = watch.next_leader().await;
            Some((leader, watch))
        })
    }
}

/// A follower's state: the last term it reported and its registration on the channel.
struct Watch {
    election: Election,
    last: Option<u64>,
    subscription: Option<Subscription>,
}

impl Watch {
    async fn next_leader(&mut self) -> Leader {
        let bound = self.election.observe_bound();
        loop {
            // One deadline per look: subscribing, reading and waiting all fit within `bound`,
            // so two reads are never more than `bound` (plus the read's round trip) apart.
            let next = tokio::time::Instant::now() + bound;
            if self.subscription.is_none() {
                let wakeups = self.election.store().wakeups().clone();
                // A shared waiter: a message on the channel wakes every waiter, campaigners
                // and followers alike.
                // Bounded by this look's deadline, so that a slow subscription cannot hold up
                // the fallback read.
                let subscribed = tokio::time::timeout_at(
                    next,
                    wakeups.subscribe(&self.election.inner.keys.channel, true),
                )
                .await
                .unwrap_or_else(|_| Err(crate::error::StoreError::Timeout { after: bound }));
                match subscribed {
                    Ok(subscription) => self.subscription = Some(subscription),
                    Err(err) => {
                        tracing::debug!(election = %self.election.name(), error = %err, "no wake-ups for followers; looking every ttl/3");
                    }
                }
            }
            let notify: Option<Arc<Notify>> =
                self.subscription.as_ref().map(|s| s.notify().clone());
            // Created before the read: a message that arrives during it is not missed.
            let notified = notify.as_deref().map(Notify::notified);
            let mut notified = std::pin::pin!(notified);
            if let Some(n) = notified.as_mut().as_pin_mut() {
                n.enable();
            }
            match self.election.leader().await {
                Ok(Some(leader)) if self.last.is_none_or(|last| leader.term > last) => {
                    self.last = Some(leader.term);
                    return leader;
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::debug!(election = %self.election.name(), error = %err, "reading the leader failed; looking again");
                }
            }
            let woken = async {
                match notified.as_mut().as_pin_mut() {
                    Some(n) => n.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = woken => {}
                () = tokio::time::sleep_until(next) => {}
            }
        }
    }
}

/// Rewrites the leader record every third of the ttl while the lease holds; stops when the
/// lease is lost. A failed or refused write is tried again at the next turn. Aborted on drop.
struct Refresher(tokio::task::JoinHandle<()>);

impl Refresher {
    fn start(election: Election, handle: LeaseHandle, token: Token, record: Record) -> Self {
        let every = election.observe_bound();
        Self(tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    () = handle.lost() => return,
                    () = tokio::time::sleep(every) => {}
                }
                match election.put(&token, &record).await {
                    Ok(true) => {}
                    // Refused: the lease no longer holds the lock, unless the lease itself
                    // says otherwise (keep trying while it is not lost).
                    Ok(false) if handle.is_lost() => return,
                    Ok(false) => {
                        tracing::debug!(election = %election.name(), "the leader record was refused while the lease holds; retrying");
                    }
                    Err(err) => {
                        tracing::debug!(election = %election.name(), error = %err, "rewriting the leader record failed; retrying");
                    }
                }
            }
        }))
    }
}

impl Drop for Refresher {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The leadership of an election: a [`Lease`] on its lock (renewed by the watchdog, with its
/// lost signal), whose fence is the [term](Self::term). It dereferences to a [`LeaseHandle`]:
/// [`lost`](LeaseHandle::lost), [`is_lost`](LeaseHandle::is_lost),
/// [`ensure_held`](LeaseHandle::ensure_held). Resign with [`resign`](Self::resign); dropping
/// it releases the lock in the background (the record then counts for nothing and expires).
#[must_use = "dropping a Leadership resigns at once"]
pub struct Leadership {
    lease: Lease,
    /// The lease's fence (an election's lease is eager: minted with the grant).
    term: u64,
    identity: String,
    election: Election,
    refresher: Refresher,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.election.name())
            .field("term", &self.term)
            .field("identity", &self.identity)
            .field("lost", &self.lease.is_lost())
            .finish()
    }
}

impl std::ops::Deref for Leadership {
    type Target = LeaseHandle;
    fn deref(&self) -> &LeaseHandle {
        &self.lease
    }
}

impl Leadership {
    /// The term: this leadership's fence, strictly greater than every earlier leader's. Give
    /// it to what the leader writes to, so that a leader paused past its lease is refused.
    #[must_use]
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The identity this leadership campaigned with.
    #[must_use]
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// A cloneable view of the lease, for tasks the leader spawns.
    #[must_use]
    pub fn handle(&self) -> LeaseHandle {
        self.lease.handle()
    }

    /// Hands the leadership on at once: releases the lock (straight to a campaigner of this
    /// client if one waits, else waking the campaigners of every client over pub/sub) and
    /// deletes the record. Followers are told through the same channel.
    ///
    /// # Errors
    /// As [`Lease::release`].
    pub async fn resign(self) -> Result<ReleaseOutcome, LockError> {
        let Self {
            lease,
            election,
            refresher,
            ..
        } = self;
        drop(refresher);
        let token = lease.handle().shared.token.clone();
        let outcome = lease.release().await?;
        drop_record(&election, &token).await;
        Ok(outcome)
    }

    /// Runs `body` as the leader, then resigns. The body is raced against the lease's lost
    /// signal, as in [`LockBuilder::run`]: if the leadership is lost, the body is dropped at
    /// its next await point and `Err(LeaseLost)` is returned. A body that finishes first
    /// returns its value whatever the release then finds.
    ///
    /// # Errors
    /// [`LockError::LeaseLost`] if the leadership was lost before the body finished.
    pub async fn run<F, Fut, T>(self, body: F) -> Result<T, LockError>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let Self {
            lease,
            election,
            refresher,
            ..
        } = self;
        let token = lease.handle().shared.token.clone();
        let report = run_under(lease, body).await;
        drop(refresher);
        if report.is_ok() {
            drop_record(&election, &token).await;
        }
        Ok(report?.value)
    }
}

/// Deletes the record `token`'s lease wrote, if it is still there (best effort: a record
/// whose lease is gone counts for nothing, and expires).
async fn drop_record(election: &Election, token: &Token) {
    let dropped = election
        .store()
        .leader_drop(
            &crate::store::LeaderKeys {
                lock: &election.inner.keys,
                record_key: &election.inner.record,
            },
            token,
        )
        .await;
    if let Err(err) = dropped {
        tracing::debug!(election = %election.name(), error = %err, "deleting the leader record failed; it expires");
    }
}
