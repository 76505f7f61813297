//! The watchdog: one task per client that renews every watched lease about every ttl/3 and
//! fires a lease's lost signal at its safety deadline if no renewal moved it.
//!
//! Renewals are batched: when a lease's renewal is due, every lease due within ttl/12 is renewed
//! with it, so leases taken at about the same time share round trips, up to [`MAX_BATCH`]
//! keys per script call (leases that need replica acknowledgement in batches of their own). Each batch runs in its own task, so a hung connection never delays
//! the deadline checks, and each is bounded by the earliest deadline in it.
//!
//! The task starts with the first lease and stops after [`IDLE_EXIT`] with nothing to watch;
//! if the runtime it ran on went away, the next lease starts a new one. Whether a task is
//! running is decided under the lease map's lock, so a lease added while the task is exiting
//! starts a new task rather than going unwatched.
//!
//! A new lease wakes the task only if it needs attention before the task's next look. With
//! nothing to watch the task looks every [`IDLE_LOOK`], so a service that takes and releases
//! one lease at a time (the map is empty at every look) does not wake it for every lease.
//!
//! While the task runs, a companion listens on the prefix's revocation channel, where an
//! operator's force (`force_unlock` and its twins) announces the key it freed: each lease in
//! that key is read back at once and, if the store no longer holds it for the lease's token,
//! lost. The message is only a hint (it carries a key, never a token); the read decides.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::hold::held_after;
use super::state::LeaseState;
use super::timing::{Answer, ExpiryOp, OpKind};
use crate::error::LossReason;
use crate::error::StoreError;
use crate::store::{Ownership, RenewItem, Replicas, Store};

/// Most keys renewed in one script call (keeps each script short on the server).
pub(crate) const MAX_BATCH: usize = 512;
/// How long the task lingers with no lease before it exits.
const IDLE_EXIT: Duration = Duration::from_secs(30);
/// How often the task looks while it has no lease (leases first due later need no wake-up).
const IDLE_LOOK: Duration = Duration::from_secs(1);

pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    task: Mutex<Option<JoinHandle<()>>>,
}

struct Leases {
    map: HashMap<u64, Arc<LeaseState>, BuildIdHasher>,
    /// A task is running (or spawned) for this watchdog.
    running: bool,
}

struct Shared {
    store: Store,
    /// The client's shutdown signal: once cancelled, no lease is added to the map (checked
    /// under the map's lock, so a drain that takes the map after cancelling it sees every
    /// lease that was added).
    closing: CancellationToken,
    /// `<prefix>:revoked` (see the module docs).
    revocation_channels: Vec<String>,
    leases: Mutex<Leases>,
    /// When the task will next look at its leases on its own (`None`: not sleeping on a
    /// timer, e.g. scanning). A new lease wakes it only if it needs attention earlier.
    next_wake: Mutex<Option<Instant>>,
    next_id: AtomicU64,
    wake: Notify,
    /// Renewal round trips sent (one per batch), for tests and the benchmark.
    renewal_calls: AtomicU64,
    /// Times the task looked at its leases, for tests.
    scans: AtomicU64,
}

impl Watchdog {
    pub(crate) fn new(
        store: Store,
        revocation_channels: Vec<String>,
        closing: CancellationToken,
    ) -> Self {
        // Registered now, so that an announcement that arrives before the listener runs is
        // kept for it (in memory it is delivered without a subscription).
        store.wakeups().revocations(&revocation_channels);
        Self {
            shared: Arc::new(Shared {
                store,
                closing,
                revocation_channels,
                leases: Mutex::new(Leases {
                    map: HashMap::with_hasher(BuildIdHasher),
                    running: false,
                }),
                next_wake: Mutex::new(None),
                next_id: AtomicU64::new(0),
                wake: Notify::new(),
                renewal_calls: AtomicU64::new(0),
                scans: AtomicU64::new(0),
            }),
            task: Mutex::new(None),
        }
    }

    /// Starts watching a lease (renewing it if it renews; always enforcing its deadline).
    /// Returns the id to [`unwatch`](Self::unwatch) it with, or `None` if the client is
    /// closed for shutdown: the lease is then not watched (nor listed, nor drained), and its
    /// holder gives it back.
    ///
    /// Every lease of the client is here, whether it renews or not: the map is also the
    /// client's list of its own leases ([`live`](Self::live), [`take_all`](Self::take_all)).
    pub(crate) fn watch(&self, lease: Arc<LeaseState>) -> Option<u64> {
        let first_event = {
            let t = lease.timing();
            t.next_renew()
                .map_or(t.valid_until(), |r| r.min(t.valid_until()))
        };
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        // Only a caller that can spawn claims the task, so a claim never blocks a later
        // caller that could have started it.
        let runtime = tokio::runtime::Handle::try_current().ok();
        let start = {
            let mut leases = self.shared.lock_leases();
            if self.shared.closing.is_cancelled() {
                return None;
            }
            leases.map.insert(id, lease);
            runtime.is_some() && !std::mem::replace(&mut leases.running, true)
        };
        if let (true, Some(runtime)) = (start, runtime) {
            self.start(&runtime);
        }
        // Waking the task costs a scan of every lease: only do it when this one needs
        // attention before the task would look anyway.
        let next_wake = *self
            .shared
            .next_wake
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if next_wake.is_none_or(|wake| first_event < wake) {
            self.poke();
        }
        Some(id)
    }

    /// The leases this client holds now (not ended), in no particular order.
    pub(crate) fn live(&self) -> Vec<Arc<LeaseState>> {
        self.shared
            .lock_leases()
            .map
            .values()
            .filter(|lease| !lease.is_ended())
            .cloned()
            .collect()
    }

    /// Takes every lease out of the watch (for a drain: the caller gives them back), and
    /// returns those that had not ended. Call it once the shutdown signal is cancelled: no
    /// lease is added after it.
    pub(crate) fn take_all(&self) -> Vec<Arc<LeaseState>> {
        let taken = std::mem::take(&mut self.shared.lock_leases().map);
        taken
            .into_values()
            .filter(|lease| !lease.is_ended())
            .collect()
    }

    /// Stops watching a lease that was released (O(1); the task need not wake up).
    pub(crate) fn unwatch(&self, id: u64) {
        self.shared.lock_leases().map.remove(&id);
    }

    /// Makes the task look at its leases again (a lease was added or its times changed).
    pub(crate) fn poke(&self) {
        self.shared.wake.notify_one();
    }

    #[cfg(feature = "test-util")]
    pub(crate) fn renewal_calls(&self) -> u64 {
        self.shared.renewal_calls.load(Ordering::Relaxed)
    }

    #[cfg(feature = "test-util")]
    pub(crate) fn scans(&self) -> u64 {
        self.shared.scans.load(Ordering::Relaxed)
    }

    #[cfg(feature = "test-util")]
    pub(crate) fn len(&self) -> usize {
        self.shared.lock_leases().map.len()
    }

    /// Spawns the task, once `watch` has marked it running (not under the map's lock: a
    /// runtime that is shutting down drops the task at once, and its guard takes the lock
    /// to reset the mark).
    fn start(&self, runtime: &tokio::runtime::Handle) {
        let running = Running {
            shared: self.shared.clone(),
            armed: true,
        };
        let task = runtime.spawn(run(self.shared.clone(), running));
        // A runtime that is shutting down drops the task at once; keep only a live handle, so
        // `drop` aborts the task that runs.
        if !task.is_finished() {
            *self.task.lock().unwrap_or_else(PoisonError::into_inner) = Some(task);
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(task) = self
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
    }
}

impl Shared {
    fn lock_leases(&self) -> std::sync::MutexGuard<'_, Leases> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Carried by the task: if the task is dropped unfinished (its runtime shut down), the next
/// lease starts a new one.
struct Running {
    shared: Arc<Shared>,
    armed: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.armed {
            self.shared.lock_leases().running = false;
        }
    }
}

async fn run(shared: Arc<Shared>, mut running: Running) {
    let _listener = AbortOnDrop(tokio::spawn(listen(shared.clone())));
    let mut idle_since: Option<Instant> = None;
    loop {
        *shared
            .next_wake
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        let now = Instant::now();
        let (due, next) = scan(&shared, now);
        // Leases that need replica acknowledgement renew apart from the others (and apart
        // from each other's requirements), so that a renewal never waits for a `WAIT` its
        // lease did not ask for.
        let mut groups: Vec<(Option<Replicas>, Vec<Due>)> = Vec::new();
        for lease in due {
            let wants = lease.lease.replicas;
            match groups.iter_mut().find(|(r, _)| *r == wants) {
                Some((_, group)) => group.push(lease),
                None => groups.push((wants, vec![lease])),
            }
        }
        for (_, group) in groups {
            let mut group = group.into_iter().peekable();
            while group.peek().is_some() {
                let batch: Vec<Due> = group.by_ref().take(MAX_BATCH).collect();
                tokio::spawn(renew(shared.clone(), batch));
            }
        }
        let next = match next {
            Some(next) => {
                idle_since = None;
                next
            }
            None => {
                let since = *idle_since.get_or_insert(now);
                if now >= since + IDLE_EXIT {
                    let mut leases = shared.lock_leases();
                    if leases.map.is_empty() {
                        // Decided under the lock: a lease added from here on starts a new task.
                        leases.running = false;
                        running.armed = false;
                        return;
                    }
                }
                (since + IDLE_EXIT).min(now + IDLE_LOOK)
            }
        };
        *shared
            .next_wake
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(next);
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = shared.wake.notified() => {}
        }
    }
}

/// Drops ended leases, fires the lost signal of those past their deadline, and picks the ones
/// due for renewal: every lease whose renewal time has come, plus (only when there is such a
/// lease) those due within ttl/12, which ride along in the same round trip. A lease whose
/// `extend` is on the wire is skipped: its answer sets the next renewal and wakes the task.
/// Returns the due leases' ops, each holding its lease's op permit, and when to look again
/// (`None`: nothing to watch).
fn scan(shared: &Shared, now: Instant) -> (Vec<Due>, Option<Instant>) {
    shared.scans.fetch_add(1, Ordering::Relaxed);
    let mut due = Vec::new();
    let mut soon = Vec::new();
    let mut next: Option<Instant> = None;
    let mut earliest = |at: Instant| next = Some(next.map_or(at, |n: Instant| n.min(at)));
    shared.lock_leases().map.retain(|_, lease| {
        if lease.is_ended() {
            return false;
        }
        let t = lease.timing();
        let (valid_until, next_renew, ttl) = (t.valid_until(), t.next_renew(), t.ttl());
        drop(t);
        if now >= valid_until {
            lease.end(LossReason::Expired);
            return false;
        }
        earliest(valid_until);
        if let Some(renew_at) = next_renew
            && !lease.op.busy()
        {
            if now >= renew_at {
                due.push(lease.clone());
            } else if now + ttl / 12 >= renew_at {
                soon.push((lease.clone(), renew_at));
            } else {
                earliest(renew_at);
            }
        }
        true
    });
    if due.is_empty() {
        for (_, renew_at) in &soon {
            earliest(*renew_at);
        }
        return (Vec::new(), next);
    }
    due.extend(soon.into_iter().map(|(lease, _)| lease));
    // An `extend` may take a permit between the look above and here: that lease is skipped,
    // and the extend's answer wakes the task to look again.
    let due = due
        .into_iter()
        .filter_map(|lease| {
            let permit = lease.op.try_take()?;
            Some(Due { lease, permit })
        })
        .collect();
    (due, next)
}

/// A lease due for renewal, with its op permit.
struct Due {
    lease: Arc<LeaseState>,
    permit: tokio::sync::OwnedSemaphorePermit,
}

async fn renew(shared: Arc<Shared>, due: Vec<Due>) {
    let (leases, permits): (Vec<Arc<LeaseState>>, Vec<_>) =
        due.into_iter().map(|d| (d.lease, d.permit)).unzip();
    let mut ops = Vec::with_capacity(leases.len());
    let mut deadline: Option<Instant> = None;
    for (lease, permit) in leases.iter().zip(permits) {
        // `None`: max_hold reached; the key runs out and the deadline fires the lost signal.
        if let Some(op) = ExpiryOp::start(&lease.op, permit, OpKind::Renewal) {
            let valid_until = lease.valid_until();
            deadline = Some(deadline.map_or(valid_until, |d| d.min(valid_until)));
            ops.push((lease, op));
        }
    }
    let Some(deadline) = deadline else {
        return;
    };
    let mut items: Vec<RenewItem<'_>> = Vec::with_capacity(ops.len());
    let spans: Vec<usize> = ops
        .iter()
        .map(|(lease, op)| {
            lease
                .hold
                .push_renewals(&mut items, &lease.token, op.ttl(), lease.replicas)
        })
        .collect();
    shared.renewal_calls.fetch_add(1, Ordering::Relaxed);
    let reply = tokio::time::timeout_at(deadline, shared.store.renew(&items)).await;
    drop(items);
    // One answer per lease (a path's lease renews one entry per level).
    let reply = reply.map(|r| {
        r.and_then(|answers| {
            held_after(&spans, &answers).ok_or_else(|| StoreError::Protocol {
                message: format!(
                    "renew answered {} items for {}",
                    answers.len(),
                    spans.iter().sum::<usize>()
                ),
            })
        })
    });
    match reply {
        Ok(Ok(replies)) if replies.len() == ops.len() => {
            for ((lease, op), held) in ops.into_iter().zip(replies) {
                match held {
                    Ownership::Ours => op.finish(Answer::Held),
                    Ownership::Expired | Ownership::Theirs => {
                        op.finish(Answer::NotHeld);
                        lease.end(LossReason::NotHeld);
                    }
                }
            }
        }
        Ok(Ok(_)) | Ok(Err(_)) => {
            if let Ok(Err(err)) = &reply {
                tracing::warn!(leases = ops.len(), error = %err, "renewal failed; retrying until the leases' deadlines");
            }
            finish_unknown(ops);
        }
        Err(_) => {
            tracing::warn!(
                leases = ops.len(),
                "renewal got no answer before the earliest lease deadline"
            );
            finish_unknown(ops);
        }
    }
    shared.wake.notify_one();
}

/// Aborts a task when dropped (the listener ends with the watchdog's task, however it ends).
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Listens on the revocation channel while the task runs, and checks the leases in every key
/// announced there (see the module docs). Subscribing is retried with backoff; a store
/// without pub/sub gives up at once (its holders learn at their next renewal).
async fn listen(shared: Arc<Shared>) {
    let channels = shared.revocation_channels.as_slice();
    let wakeups = shared.store.wakeups().clone();
    let notify = wakeups.revocations(channels);
    let mut subscriptions = Vec::with_capacity(channels.len());
    for channel in channels {
        let mut backoff = LISTEN_BACKOFF.0;
        loop {
            match wakeups.subscribe(channel, false).await {
                Ok(subscription) => {
                    subscriptions.push(subscription);
                    break;
                }
                Err(StoreError::Config { .. }) => return,
                Err(err) => {
                    tracing::debug!(error = %err, channel, "cannot listen for freed keys yet; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(LISTEN_BACKOFF.1);
                }
            }
        }
    }
    loop {
        notify.notified().await;
        for key in wakeups.take_revoked(channels) {
            let leases: Vec<Arc<LeaseState>> = shared
                .lock_leases()
                .map
                .values()
                .filter(|lease| lease.hold.key() == key && !lease.is_ended())
                .cloned()
                .collect();
            for lease in leases {
                match lease.hold.still_held(&shared.store, &lease.token).await {
                    Ok(true) => {}
                    Ok(false) => lease.end(LossReason::NotHeld),
                    // The next renewal decides.
                    Err(err) => tracing::debug!(error = %err, "could not check a freed lease"),
                }
            }
        }
    }
}

/// Hashes the watchdog's lease ids: numbers this process hands out in sequence, never chosen by
/// anyone else, so a multiply-shift spreads them over the map's buckets at a fraction of what
/// the default (DoS-resistant) hasher costs, at every `watch` and `unwatch` (once per lease).
#[derive(Clone, Copy, Default)]
struct BuildIdHasher;

impl std::hash::BuildHasher for BuildIdHasher {
    type Hasher = IdHasher;

    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

/// See [`BuildIdHasher`].
#[derive(Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, id: u64) {
        // Fibonacci hashing: the high bits (which the map's control bytes use) vary with every
        // id.
        self.0 = (self.0 ^ id).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// First and largest wait between two tries to subscribe to the revocation channel.
const LISTEN_BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

fn finish_unknown(ops: Vec<(&Arc<LeaseState>, ExpiryOp<'_>)>) {
    for (_, op) in ops {
        op.finish(Answer::Unknown);
    }
}
