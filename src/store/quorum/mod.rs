//! The Redlock backend: leases on a majority of independent Redis primaries.
//!
//! Every operation goes to every node at once, and a majority decides. Each node has its own
//! batchers: a plain primary has no slot rule, so the concurrent acquires (or releases) of
//! many locks share one script call per node, and a cycle costs each node one acquire call
//! and one release call per batch rather than per lock.
//!
//! * **Acquire**: on every node at once, each bounded by a per-node timeout much shorter than
//!   the ttl (default `min(ttl / 10, 50 ms)`), behind one boot check per pipeline (`boot.rs`).
//!   Granted iff a majority granted and the validity `ttl − elapsed − drift` is still
//!   positive, counted from the first send (the lease's local deadline counts from there
//!   too). Otherwise every node is released again, the ones that timed out included, and the
//!   caller learns `Busy` (with the longest holder ttl any node reported) or
//!   [`StoreError::NoQuorum`], which names each node and what it answered. An eager lease's
//!   fence is the highest any granting node minted.
//! * **Mint** (a lazy lease's first `fence()`): on every node, each minting only if it still
//!   holds the lease's token; minted iff a majority of the voting nodes did, and the fence is
//!   the highest of theirs.
//! * **Renew / extend**: renewed iff a majority renewed; definitively lost only once a
//!   majority can no longer say yes; anything in between is an unknown outcome (retried until
//!   the lease's deadline). A renewed lease **heals**: a voting node that lost its copy (it
//!   restarted empty and sat out its quarantine) gets it back, if the key is free there.
//! * **Release**: on every node; once a majority released, the others get the per-node
//!   timeout more (default 50 ms), so a frozen node costs a release that long, and its copy
//!   expires with its ttl (a loaded machine, where every node is slow, still waits for its
//!   majority, up to half the response timeout); `Released` iff a majority released, else
//!   `HeldByOther` if some node has another holder, else `AlreadyExpired`.
//! * **Wake-ups**: each node publishes where its copy of the lock was marked; a waiter
//!   subscribes on every node (confirmed by a majority), so a release wakes at most one local
//!   waiter per node.
//! * **A node that lost its data** (restarted without persistence, flushed) has forgotten the
//!   grants it gave, and could vote for a second holder while the first is valid. Every acquire
//!   checks the node's boot value (`boot.rs`: one key per node, seeded once); a node whose
//!   value changed sits out of majorities for the longest ttl in use (at least the client's
//!   `restart_quarantine`), so every lease it forgot has expired before its vote counts again.
//!   A node this client never saw answer is treated the same way the first time it answers.
//!
//! * **A node whose clock steps forward** expires its copies early. Each node answers an
//!   acquire with its clock (`TIME`), so a granting node whose clock is ahead of the others'
//!   by more than half the lease's safety margin does not vote for that grant (`clocks.rs`);
//!   nor does its fence count at a mint.
//!
//! What Redlock does not give: consensus. Two majorities share a node, so fences (the maximum
//! over the granting, or minting, majority, each node minting `max(previous + 1, its clock in
//! µs)`) increase as long as the nodes' clocks agree within what was handed out since; a
//! holder paused past its ttl is not stopped by any lease; so writes that need correctness
//! are fenced, as everywhere.

mod boot;
mod clocks;
mod majority;
mod members;
mod node;
mod pubsub;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::time::Instant;

use self::boot::{Boot, LostCopy, NodeAcquire, Retaken};
use self::majority::{Answer, answered, majority_holder};
use self::node::{
    Identity, Node, compare_run_ids, connect_node, found_twin, lazy_node, node_name, refuse_twins,
};
pub(super) use self::node::{NodeState, lock_state};
use self::pubsub::QuorumLink;
use super::backend::Backend;
use super::capability::{Capability, StoreKind};
use super::connect::RedisSettings;
use super::peek;
use super::requests::{Acquire, LeaderKeys, LeaderPut};
use super::scripts;
use super::scripts::acquire::{AcquireItem, AcquireReply};
use super::scripts::leader::{self, Record};
use super::scripts::mint::{MintItem, MintReply};
use super::scripts::release::{ReleaseItem, Releases};
use super::scripts::renew::{self, RenewItem};
use super::scripts::{Ownership, Publish, millis, unmark};
use super::wakeups::Wakeups;
use crate::error::{NodeFailure, StoreError};
use crate::keys::LockKeys;
use crate::token::Token;

/// The longest per-node timeout of an acquire by default.
const NODE_TIMEOUT_MAX: Duration = Duration::from_millis(50);

/// Quorum-specific settings, validated by the client builder.
#[derive(Clone, Debug)]
pub(crate) struct QuorumSettings {
    /// Per-node timeout of an acquire or renewal; `None`: `min(ttl / 10, 50 ms)`.
    pub(crate) node_timeout: Option<Duration>,
    /// The least time a node that lost its data sits out of majorities.
    pub(crate) restart_quarantine: Duration,
}

#[derive(Clone)]
pub(crate) struct QuorumStore {
    inner: Arc<Inner>,
}

struct Inner {
    nodes: Vec<Node>,
    /// Votes needed: `nodes / 2 + 1`.
    quorum: usize,
    settings: RedisSettings,
    quorum_settings: QuorumSettings,
    wakeups: Arc<Wakeups>,
    /// The longest ttl this client has asked for, in ms (the quarantine covers it).
    longest_ttl_ms: AtomicU64,
}

impl QuorumStore {
    /// Connects to every node (each must be a plain primary, not a cluster node): wrong
    /// credentials or an unsupported server anywhere fail at once; unreachable nodes are
    /// tolerated as long as a majority answers, and join when they come up (sitting out
    /// until their boot value is known and any grant they may hold has expired).
    pub(crate) async fn connect(
        nodes: Vec<redis::ConnectionInfo>,
        prefix: &str,
        settings: RedisSettings,
        quorum_settings: QuorumSettings,
    ) -> Result<Self, StoreError> {
        if nodes.len() < 3 || nodes.len().is_multiple_of(2) {
            return Err(StoreError::Config {
                message: format!(
                    "a Redlock quorum needs an odd number of independent primaries, at least 3 \
                     (got {})",
                    nodes.len()
                ),
            });
        }
        members::refuse_repeated_addresses(&nodes, settings.connect_timeout).await?;
        let quorum = nodes.len() / 2 + 1;
        let boot_key = format!("{prefix}:boot");
        let connects = nodes
            .iter()
            .map(|info| connect_node(info, &settings, &boot_key));
        let mut connected = Vec::with_capacity(nodes.len());
        let mut failures = Vec::new();
        for (info, result) in nodes
            .iter()
            .zip(futures_util::future::join_all(connects).await)
        {
            match result {
                Ok(node) => connected.push(node),
                // Wrong credentials, an old server, a cluster node: a configuration to fix.
                Err(
                    err @ (StoreError::Auth { .. }
                    | StoreError::Config { .. }
                    | StoreError::Evicting { .. }
                    | StoreError::Unsupported { .. }),
                ) => return Err(err),
                Err(err) => {
                    failures.push(NodeFailure {
                        node: node_name(info),
                        error: err.to_string(),
                    });
                    connected.push(lazy_node(info, &settings, &boot_key)?);
                }
            }
        }
        if nodes.len() - failures.len() < quorum {
            return Err(StoreError::NoQuorum {
                nodes: nodes.len(),
                needed: quorum,
                failures,
            });
        }
        refuse_twins(&connected)?;
        let wakeups = Wakeups::new();
        let link = QuorumLink::new(&nodes, &settings, &wakeups, quorum);
        if let Some(err) = wakeups.link_or_deaf(link) {
            tracing::warn!(error = %err, "no pub/sub connections for release wake-ups; waiters will poll");
        }
        let store = Self {
            inner: Arc::new(Inner {
                nodes: connected,
                quorum,
                settings,
                quorum_settings,
                wakeups,
                longest_ttl_ms: AtomicU64::new(0),
            }),
        };
        store.quarantine_recent_seeds();
        Ok(store)
    }

    /// Each node's name and connection (for `Client::ping`).
    pub(crate) fn named_connections(&self) -> Vec<(String, ConnectionManager)> {
        self.inner
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.conn.clone()))
            .collect()
    }

    /// How many nodes make a majority.
    pub(crate) fn majority(&self) -> usize {
        self.inner.quorum
    }

    /// The per-node timeout of an operation on a lease of `ttl`.
    fn node_timeout(&self, ttl: Duration) -> Duration {
        self.inner
            .quorum_settings
            .node_timeout
            .unwrap_or_else(|| (ttl / 10).min(NODE_TIMEOUT_MAX))
            .max(Duration::from_millis(1))
    }

    /// The per-node bound of a release, a rollback or an unmark (which know no ttl): well
    /// inside the operation's own bound, so that the majority is counted before the caller's
    /// timeout fires. Once a majority answered, the others get only
    /// [`straggler_grace`](Self::straggler_grace) more.
    fn node_op_timeout(&self) -> Duration {
        self.inner.settings.response_timeout / 2
    }

    /// How long the nodes still silent after a majority answered a release may take: the
    /// configured per-node timeout, or its longest default. A frozen node then costs a release
    /// that long, not half the response timeout (what it did not release expires with its
    /// ttl), while a loaded machine, where every node is slow, still gets its majority.
    fn straggler_grace(&self) -> Duration {
        self.inner
            .quorum_settings
            .node_timeout
            .unwrap_or(NODE_TIMEOUT_MAX)
            .max(Duration::from_millis(1))
    }

    /// How long a node that lost its data sits out.
    fn quarantine(&self) -> Duration {
        let longest = Duration::from_millis(self.inner.longest_ttl_ms.load(Ordering::Relaxed));
        self.inner.quorum_settings.restart_quarantine.max(longest)
    }

    /// At connect: a node whose boot value was seeded less than a quarantine ago lost its
    /// data recently (or is new), and may have forgotten grants of other clients, so it sits
    /// out for the rest of the quarantine. Unless every node is that recent: then this is a
    /// new deployment (or every node lost its data, when no lease could have survived
    /// anyway), and nobody sits out.
    fn quarantine_recent_seeds(&self) {
        let quarantine = self.quarantine();
        let recent: Vec<Option<Duration>> = self
            .inner
            .nodes
            .iter()
            .map(|node| {
                node.state()
                    .seeded_ago
                    .take()
                    .filter(|ago| *ago < quarantine)
            })
            .collect();
        if recent.iter().all(Option::is_some) {
            return;
        }
        let now = Instant::now();
        for (node, ago) in self.inner.nodes.iter().zip(recent) {
            if let Some(ago) = ago {
                node.state().sits_out_until = Some(now + (quarantine - ago));
                tracing::info!(node = %node.name, "quorum node lost its data recently; it sits out of majorities until any grant it forgot has expired");
            }
        }
    }

    /// The node answered with a boot value other than the one last seen: adopt it, and let
    /// the node sit out for what is left of the quarantine since the value was seeded. A node
    /// that answers for the first time is also checked against the other members.
    fn restarted(&self, index: usize, boot: Boot) {
        let node = &self.inner.nodes[index];
        let until = Instant::now() + self.quarantine().saturating_sub(boot.age);
        let mut state = node.state();
        let first_contact = state.boot.is_empty();
        state.boot = boot.value;
        state.sits_out_until = Some(until);
        let unchecked = state.identity == Identity::Unchecked;
        drop(state);
        if unchecked {
            self.check_identity(index);
        }
        if first_contact {
            tracing::info!(node = %node.name, "quorum node answered for the first time; it sits out of majorities until any grant it may hold has expired");
        } else {
            tracing::warn!(node = %node.name, "quorum node lost its data (restarted or flushed); it sits out of majorities until every grant it forgot has expired");
        }
    }

    /// The answers to a grant or a mint sent at `sent`, each with the instant it came, without
    /// those instants; and for each node, whether it granted (or minted) with a clock ahead of
    /// the other nodes' that did (`clock`: the clock an answer reports, if it granted; see
    /// `clocks.rs`). Logs when a node starts or stops being ahead.
    fn clocks_ahead<T>(
        &self,
        answers: Vec<Answer<(T, Instant)>>,
        clock: impl Fn(&T) -> Option<u64>,
        sent: Instant,
        ttl: Duration,
    ) -> (Vec<Answer<T>>, Vec<bool>) {
        let readings: Vec<Option<clocks::Granted>> = answers
            .iter()
            .map(|answer| match answer {
                Answer::Ok((reply, answered)) => clock(reply).map(|clock_us| clocks::Granted {
                    clock_us,
                    answered: *answered,
                }),
                Answer::Failed(_) => None,
            })
            .collect();
        let grants: Vec<(usize, clocks::Granted)> = readings
            .iter()
            .enumerate()
            .filter(|(index, _)| {
                !matches!(
                    self.inner.nodes[*index].state().identity,
                    Identity::Twin { .. }
                )
            })
            .filter_map(|(index, reading)| reading.map(|r| (index, r)))
            .collect();
        let limit = clocks::limit(ttl);
        let found = clocks::ahead(
            &grants.iter().map(|(_, g)| *g).collect::<Vec<_>>(),
            sent,
            limit,
        );
        let mut ahead = vec![false; readings.len()];
        for ((index, _), is_ahead) in grants.iter().zip(found) {
            ahead[*index] = is_ahead;
            let node = &self.inner.nodes[*index];
            let was = std::mem::replace(&mut node.state().clock_ahead, is_ahead);
            if is_ahead && !was {
                tracing::warn!(node = %node.name, limit = ?limit, "quorum node's clock is ahead of the other nodes' (a clock step?): its keys may expire early, so it does not vote until its clock agrees again");
            } else if was && !is_ahead {
                tracing::info!(node = %node.name, "quorum node's clock agrees with the other nodes' again; it votes");
            }
        }
        let answers = answers
            .into_iter()
            .map(|answer| match answer {
                Answer::Ok((reply, _)) => Answer::Ok(reply),
                Answer::Failed(why) => Answer::Failed(why),
            })
            .collect();
        (answers, ahead)
    }

    /// A node that could not be reached at connect answered: it votes once it is known to be
    /// a server of its own. The same boot value as another member's settles it at once;
    /// otherwise its `run_id` is compared with the others' in the background (asked again
    /// until the node says, or says it will not), and the node sits out meanwhile.
    fn check_identity(&self, index: usize) {
        let nodes = &self.inner.nodes;
        let boot = nodes[index].state().boot.clone();
        if let Some(twin) = nodes
            .iter()
            .enumerate()
            .find(|(j, other)| *j != index && other.state().boot == boot)
        {
            self.found_twin(index, &twin.1.name);
            return;
        }
        let inner = Arc::downgrade(&self.inner);
        tokio::spawn(compare_run_ids(inner, index));
    }

    fn found_twin(&self, index: usize, of: &str) {
        found_twin(&self.inner.nodes[index], of);
    }

    /// What a node's failure says: a timeout of its connection names the response timeout
    /// (the redis crate does not say which deadline passed).
    /// Heals the leases a renewal found held (feature audit L34): on every node that votes
    /// (its quarantine, if any, is over) and answered that a renewed lease's key was gone
    /// there, takes the key again for the lease's token, only if it is free
    /// (`SET key token NX PX ttl`), behind the node's boot check. Without it, a long lease
    /// loses a copy at every restart of a node without persistence, and one more restart than
    /// the spare nodes is its end although it was healthy all along (redsync fixed the same in
    /// its PR #149).
    ///
    /// Safe because the lease held a majority without these copies just now: no other token
    /// can hold a majority meanwhile, and a free key gives nobody's grant away. A node that is
    /// found to have restarted again takes nothing that counts and sits out. Best effort:
    /// bounded by the per-node timeout; what fails is tried at the next renewal.
    async fn heal(
        &self,
        items: &[RenewItem<'_>],
        renewed: &[Ownership],
        answers: &[Answer<Vec<Ownership>>],
        now: Instant,
        shortest: Duration,
    ) {
        let lost_copies = |held: &[Ownership]| -> Vec<LostCopy<'_>> {
            items
                .iter()
                .zip(renewed)
                .zip(held)
                .filter(|((item, renewed), held)| {
                    item.entries == 0
                        && **renewed == Ownership::Ours
                        && **held == Ownership::Expired
                })
                .map(|((item, _), _)| (item.key, item.token, millis(item.ttl)))
                .collect()
        };
        let heals: Vec<(usize, Vec<LostCopy<'_>>)> = self
            .inner
            .nodes
            .iter()
            .zip(answers)
            .enumerate()
            .filter(|(_, (node, _))| node.votes(now))
            .filter_map(|(index, (_, answer))| match answer {
                Answer::Ok(held) => Some((index, lost_copies(held))),
                Answer::Failed(_) => None,
            })
            .filter(|(_, keys)| !keys.is_empty())
            .collect();
        if heals.is_empty() {
            return;
        }
        let limit = self.node_timeout(shortest);
        let calls = heals.into_iter().map(|(index, keys)| async move {
            let node = &self.inner.nodes[index];
            let retaken = tokio::time::timeout(limit, node.checked.retake(&keys)).await;
            (index, keys.len(), retaken)
        });
        for (index, wanted, retaken) in futures_util::future::join_all(calls).await {
            let node = &self.inner.nodes[index];
            match retaken {
                Ok(Ok(Retaken::Keys(taken))) => {
                    let taken = taken.iter().filter(|t| **t).count();
                    tracing::info!(node = %node.name, taken, of = wanted, "quorum node had lost copies of held leases; re-taken where free");
                }
                Ok(Ok(Retaken::Restarted(boot))) => self.restarted(index, boot),
                Ok(Err(err)) => {
                    tracing::debug!(node = %node.name, error = %err, "could not re-take lost copies of leases; the next renewal tries again");
                }
                Err(_) => {
                    tracing::debug!(node = %node.name, "re-taking lost copies of leases got no answer in time; the next renewal tries again");
                }
            }
        }
    }

    /// Releases `token`'s copies on every node (a failed acquire's rollback), bounded by the
    /// response timeout; what cannot be reached expires with its ttl.
    async fn roll_back(&self, keys: &LockKeys, token: &Token) {
        let quorum = self.inner.quorum;
        let answers = self
            .on_every_node_then_grace(
                |so_far| so_far.len() >= quorum,
                |node| async move {
                    // Not batched: on the connection at once, so it cannot leave after the next
                    // attempt's acquire with the same token (which it would then undo).
                    let item = ReleaseItem::of(keys, token);
                    let releases = Releases {
                        publish: Publish::Plain,
                    };
                    let mut held =
                        scripts::call(&releases, &node.conn, std::slice::from_ref(&item)).await?;
                    held.pop().ok_or_else(|| StoreError::Protocol {
                        message: "release answered nothing".to_owned(),
                    })
                },
            )
            .await;
        let failed = answers
            .iter()
            .filter(|a| matches!(a, Answer::Failed(_)))
            .count();
        if failed > 0 {
            tracing::debug!(lock = %keys.name, failed, "a failed quorum acquire could not be undone on every node; those copies expire with their ttl");
        }
    }
}

impl Backend for QuorumStore {
    fn kind(&self) -> StoreKind {
        StoreKind::Quorum
    }

    fn waiter_keeps_token(&self) -> bool {
        true
    }

    fn refuses(&self, capability: Capability) -> Option<&'static str> {
        Some(match capability {
            Capability::HolderSets => HOLDER_SETS_UNSUPPORTED,
            Capability::RateLimits => RATE_LIMITS_UNSUPPORTED,
            Capability::BloomFilters => BLOOM_UNSUPPORTED,
            Capability::ReplicaAcknowledgement => REPLICAS_UNSUPPORTED,
            // A quorum lease is released everywhere and its waiters woken.
            Capability::HandOff => HAND_OFF_UNSUPPORTED,
            Capability::FencedWrites => crate::store::scripts::fenced::UNSUPPORTED,
            Capability::IdempotencyRecords => crate::store::scripts::idempotency::UNSUPPORTED,
            Capability::FairQueues => crate::store::scripts::fair::UNSUPPORTED,
        })
    }

    async fn acquire(&self, req: &Acquire<'_>) -> Result<AcquireReply, StoreError> {
        if req.replicas.is_some() {
            return Err(self.lacks(Capability::ReplicaAcknowledgement));
        }
        let (keys, token, ttl) = (req.keys, req.token, req.ttl);
        let started = Instant::now();
        self.inner
            .longest_ttl_ms
            .fetch_max(millis(ttl), Ordering::Relaxed);
        // No replica requirement (refused above).
        let item = AcquireItem::of(req);
        let answers = self
            .on_every_node(self.node_timeout(ttl), |node| {
                let item = item.clone();
                async move {
                    let reply = node.acquires.run(item).await??;
                    Ok((reply, Instant::now()))
                }
            })
            .await;
        let now = Instant::now();
        let granted_at = |answer: &NodeAcquire| match answer {
            NodeAcquire::Replied {
                reply: AcquireReply::Granted { .. },
                clock_us,
            } => Some(*clock_us),
            _ => None,
        };
        let (answers, ahead) = self.clocks_ahead(answers, granted_at, started, ttl);
        let mut granted = 0;
        // The highest fence a voting node minted (an eager lease's grant).
        let mut fence: Option<u64> = None;
        let mut busy = false;
        let mut longest: Option<Duration> = None;
        for (index, (node, answer)) in self.inner.nodes.iter().zip(&answers).enumerate() {
            match answer {
                Answer::Ok(NodeAcquire::Replied {
                    reply: AcquireReply::Granted { fence: f },
                    ..
                }) => {
                    if node.votes(now) && !ahead[index] {
                        granted += 1;
                        fence = fence.max(*f);
                    }
                }
                Answer::Ok(NodeAcquire::Replied {
                    reply: AcquireReply::Busy { pttl },
                    ..
                }) => {
                    busy = true;
                    longest = longest.max(*pttl);
                }
                Answer::Ok(NodeAcquire::Restarted(boot)) => self.restarted(index, boot.clone()),
                // Not asked for here (a quorum refuses replica requirements).
                Answer::Ok(NodeAcquire::Replied {
                    reply: AcquireReply::Unreplicated { .. },
                    ..
                }) => {}
                Answer::Failed(_) => {}
            }
        }
        // Redlock's validity: what is left of the ttl after the time spent and the drift.
        let drift = ttl / 100 + Duration::from_millis(2);
        let valid = ttl.saturating_sub(now - started).saturating_sub(drift);
        if granted >= self.inner.quorum && !valid.is_zero() {
            return Ok(AcquireReply::Granted { fence });
        }
        self.roll_back(keys, token).await;
        if busy {
            Ok(AcquireReply::Busy { pttl: longest })
        } else if granted >= self.inner.quorum {
            // A majority granted, but too late: the lease would have expired already.
            Err(StoreError::Timeout {
                after: now - started,
            })
        } else {
            Err(self.no_quorum(&answers))
        }
    }

    /// Minted iff a majority of the voting nodes still hold the lease and minted (each node
    /// `max(its last + 1, its clock in µs)`, those whose clock runs ahead of the others' left
    /// out, as at a grant); the fence is the highest of theirs. Not held once a majority can
    /// no longer say yes; otherwise the outcome is unknown (an error: ask again).
    async fn mint(&self, keys: &LockKeys, token: &Token) -> Result<MintReply, StoreError> {
        let sent = Instant::now();
        let ttl = Duration::from_millis(self.inner.longest_ttl_ms.load(Ordering::Relaxed));
        let answers = self
            .on_every_node(self.node_op_timeout(), |node| async move {
                let item = MintItem::of(keys, token);
                let reply = node.mints.run(item).await?;
                Ok((reply, Instant::now()))
            })
            .await;
        let now = Instant::now();
        // A fence is its node's clock in µs, or just above its last one.
        let minted_at = |answer: &MintReply| match answer {
            MintReply::Minted(fence) => Some(*fence),
            MintReply::Not(_) => None,
        };
        let (answers, ahead) = self.clocks_ahead(answers, minted_at, sent, ttl);
        let (mut yes, mut undecided, mut theirs) = (0, 0, false);
        let mut fence = 0;
        for (index, (node, answer)) in self.inner.nodes.iter().zip(&answers).enumerate() {
            match answer {
                Answer::Ok(MintReply::Minted(f)) if node.votes(now) && !ahead[index] => {
                    yes += 1;
                    fence = fence.max(*f);
                }
                Answer::Ok(MintReply::Not(Ownership::Theirs)) => theirs = true,
                Answer::Ok(_) => {}
                Answer::Failed(_) => undecided += 1,
            }
        }
        if yes >= self.inner.quorum {
            Ok(MintReply::Minted(fence))
        } else if yes + undecided < self.inner.quorum {
            Ok(MintReply::Not(if theirs {
                Ownership::Theirs
            } else {
                Ownership::Expired
            }))
        } else {
            Err(self.no_quorum(&answers))
        }
    }

    async fn release(&self, keys: &LockKeys, token: &Token) -> Result<Ownership, StoreError> {
        let quorum = self.inner.quorum;
        let answers = self
            .on_every_node_then_grace(
                // Released: what the others answer changes nothing.
                |so_far| so_far.iter().filter(|h| ***h == Ownership::Ours).count() >= quorum,
                |node| async move {
                    let item = ReleaseItem::of(keys, token);
                    node.releases.run(item).await
                },
            )
            .await;
        let count = |want: Ownership| answered(&answers, |h| *h == want);
        if count(Ownership::Ours) >= self.inner.quorum {
            Ok(Ownership::Ours)
        } else if answered(&answers, |_| true) < self.inner.quorum {
            Err(self.no_quorum(&answers))
        } else if count(Ownership::Theirs) > 0 {
            Ok(Ownership::Theirs)
        } else {
            Ok(Ownership::Expired)
        }
    }

    /// A lease is renewed iff a majority of the nodes that vote renewed it; lost once that
    /// can no longer happen; otherwise the outcome is unknown (an error for the batch, which
    /// the watchdog retries until the leases' deadlines). A renewed lease then heals: on each
    /// voting node whose copy was gone (a node that restarted empty and sat out its
    /// quarantine, say), the key is taken again if it is free there (see [`Self::heal`]).
    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<Ownership>, StoreError> {
        let shortest = items.iter().map(|i| i.ttl).min().unwrap_or_default();
        let answers = self
            .on_every_node(self.node_timeout(shortest), |node| async move {
                renew::run(&node.conn, items).await
            })
            .await;
        let now = Instant::now();
        let mut result = Vec::with_capacity(items.len());
        for i in 0..items.len() {
            let (mut yes, mut undecided) = (0, 0);
            for (node, answer) in self.inner.nodes.iter().zip(&answers) {
                match answer {
                    Answer::Ok(held)
                        if held.get(i) == Some(&Ownership::Ours) && node.votes(now) =>
                    {
                        yes += 1;
                    }
                    Answer::Failed(_) => undecided += 1,
                    Answer::Ok(_) => {}
                }
            }
            if yes >= self.inner.quorum {
                result.push(Ownership::Ours);
            } else if yes + undecided < self.inner.quorum {
                result.push(Ownership::Expired);
            } else {
                return Err(self.no_quorum(&answers));
            }
        }
        self.heal(items, &result, &answers, now, shortest).await;
        Ok(result)
    }

    async fn unmark(&self, keys: &LockKeys) -> Result<(), StoreError> {
        let limit = self.node_op_timeout();
        self.on_every_node(
            limit,
            |node| async move { unmark::run(&node.conn, keys).await },
        )
        .await;
        Ok(())
    }

    fn wakeups(&self) -> &Arc<Wakeups> {
        &self.inner.wakeups
    }

    fn op_timeout(&self) -> Duration {
        self.inner.settings.response_timeout
    }

    /// Written on every node that answers: `Ok(true)` when a majority of the nodes wrote it
    /// (the lease holds a majority of the lock's copies), `Ok(false)` only when a majority
    /// refused it (the lease has lost the lock), else an error (the outcome is unknown).
    async fn leader_put(&self, req: &LeaderPut<'_>) -> Result<bool, StoreError> {
        let answers = self
            .on_every_node(self.node_op_timeout(), |node| async move {
                leader::put(&node.conn, Publish::Plain, req).await
            })
            .await;
        if answered(&answers, |written| *written) >= self.inner.quorum {
            Ok(true)
        } else if answered(&answers, |written| !*written) >= self.inner.quorum {
            // A majority of the lock's copies are not this lease's: it has lost the lock.
            Ok(false)
        } else {
            // Neither: a node that did not answer (or one that lacks its copy of the lock
            // for now) leaves the outcome unknown, which is no proof the lease is lost.
            Err(self.no_quorum(&answers))
        }
    }

    /// The record a majority of the nodes agree on, lease included (each node checks it
    /// against its own copy of the lock), if any.
    async fn leader_read(&self, keys: &LeaderKeys<'_>) -> Result<Option<Record>, StoreError> {
        let answers = self
            .on_every_node(self.node_op_timeout(), |node| async move {
                leader::read_with_digest(&node.conn, Publish::Plain, keys).await
            })
            .await;
        if answered(&answers, |_| true) < self.inner.quorum {
            return Err(self.no_quorum(&answers));
        }
        // Agreement on the whole record: term, identity and the digest of the lease's token.
        let seen: Vec<&(Record, String)> = answers
            .iter()
            .filter_map(|a| match a {
                Answer::Ok(Some(found)) => Some(found),
                _ => None,
            })
            .collect();
        Ok(seen
            .iter()
            .find(|r| seen.iter().filter(|o| o == r).count() >= self.inner.quorum)
            .map(|(record, _)| record.clone()))
    }

    /// On every node that answers; whether a majority deleted it.
    async fn leader_drop(&self, keys: &LeaderKeys<'_>, token: &Token) -> Result<bool, StoreError> {
        let answers = self
            .on_every_node(self.node_op_timeout(), |node| async move {
                leader::drop(&node.conn, Publish::Plain, keys, token).await
            })
            .await;
        Ok(answered(&answers, |dropped| *dropped) >= self.inner.quorum)
    }

    /// What a majority of the nodes hold for one lease, for as long as that majority does.
    async fn lock_value(&self, key: &str) -> Result<Option<(String, Duration)>, StoreError> {
        let reads = self
            .inner
            .nodes
            .iter()
            .map(|node| async move { peek::value_and_ttl(&mut node.conn.clone(), key).await });
        let answers = futures_util::future::join_all(reads).await;
        let mut failures = Vec::new();
        let mut seen: Vec<(String, Duration)> = Vec::new();
        for (node, answer) in self.inner.nodes.iter().zip(answers) {
            match answer {
                Ok(Some(found)) => seen.push(found),
                Ok(None) => {}
                Err(err) => failures.push(NodeFailure {
                    node: node.name.clone(),
                    error: self.node_failure(err),
                }),
            }
        }
        self.majority_answered(failures)?;
        Ok(majority_holder(&seen, self.inner.quorum))
    }

    /// Every node's keys, joined: a key is listed if any node has it (a straggler's too; the
    /// caller's majority read tells). Fails only if fewer than a majority of nodes answered.
    async fn scan_keys(&self, walk: &peek::KeyWalk<'_>) -> Result<peek::KeyScan, StoreError> {
        let mut found = std::collections::BTreeSet::new();
        let mut complete = true;
        let mut failures = Vec::new();
        for node in &self.inner.nodes {
            let call = |cmd: redis::Cmd| {
                let mut conn = node.conn.clone();
                async move { cmd.query_async::<redis::Value>(&mut conn).await }
            };
            let scanned =
                tokio::time::timeout(self.op_timeout(), peek::scan(call, walk, &mut found)).await;
            match scanned {
                Ok(Ok(whole)) => complete &= whole,
                Ok(Err(err)) => failures.push(NodeFailure {
                    node: node.name.clone(),
                    error: self.node_failure(err),
                }),
                Err(_) => failures.push(NodeFailure {
                    node: node.name.clone(),
                    error: format!("no answer within {:?}", self.op_timeout()),
                }),
            }
        }
        let failures = self.majority_answered(failures)?;
        Ok(peek::KeyScan {
            keys: found.into_iter().collect(),
            complete: complete && failures.is_empty(),
        })
    }

    /// The first node that has it.
    #[cfg(feature = "test-util")]
    async fn peek_get(&self, key: &str) -> Result<Option<String>, StoreError> {
        for node in &self.inner.nodes {
            if let Ok(Some(value)) = peek::get(&mut node.conn.clone(), key).await {
                return Ok(Some(value));
            }
        }
        Ok(None)
    }

    /// The longest of the nodes that have it (what a waiter would be told).
    #[cfg(feature = "test-util")]
    async fn peek_pttl(&self, key: &str) -> Result<Option<Duration>, StoreError> {
        let mut longest = None;
        for node in &self.inner.nodes {
            if let Ok(ttl) = peek::pttl(&mut node.conn.clone(), key).await {
                longest = longest.max(ttl);
            }
        }
        Ok(longest)
    }

    /// On every node that answers.
    #[cfg(feature = "test-util")]
    async fn peek_delete(&self, key: &str) -> Result<bool, StoreError> {
        let mut deleted = false;
        for node in &self.inner.nodes {
            deleted |= peek::delete(&mut node.conn.clone(), key)
                .await
                .unwrap_or(false);
        }
        Ok(deleted)
    }

    /// Every node that answers, each key once.
    #[cfg(feature = "test-util")]
    async fn peek_keys(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let mut keys = std::collections::BTreeSet::new();
        for node in &self.inner.nodes {
            if let Ok(found) = peek::keys(&mut node.conn.clone(), prefix).await {
                keys.extend(found);
            }
        }
        Ok(keys.into_iter().collect())
    }

    /// No holder sets on a quorum.
    #[cfg(feature = "test-util")]
    async fn peek_live_entries(&self, _key: &str) -> Result<u64, StoreError> {
        Ok(0)
    }
}

/// Why a quorum client refuses semaphores, read-write and hierarchical locks: majorities do not bound how
/// many hold at once. With 3 nodes and 2 permits, holders on nodes {1, 2}, {2, 3} and {1, 3}
/// each have a majority while no node counts more than 2: three hold 2 permits.
pub(crate) const HOLDER_SETS_UNSUPPORTED: &str = "semaphores, read-write locks and hierarchical \
    locks need one store that counts their holders (on a Redlock quorum, majorities of independent primaries \
    do not bound how many hold at once): keep the quorum for locks and build its client with \
    ClientBuilder::counting_on(<a client of a single primary or a Cluster>) (`counting_on` in \
    a configuration file's [client]), or connect a single primary (Client::connect) or a \
    Cluster (Client::connect_cluster)";

/// Why a quorum client refuses rate limits.
pub(crate) const RATE_LIMITS_UNSUPPORTED: &str = "rate limits need one store that counts \
    (counting on a Redlock quorum's independent primaries is not exact): keep the quorum for \
    locks and build its client with ClientBuilder::counting_on(<a client of a single primary \
    or a Cluster>) (`counting_on` in a configuration file's [client]), or connect a single \
    primary (Client::connect) or a Cluster (Client::connect_cluster)";

/// Why a quorum client refuses replica acknowledgement.
const REPLICAS_UNSUPPORTED: &str = "replica acknowledgement (replicas(n, timeout)) needs a \
    single primary, plain or behind Sentinel; this client is on a Redlock quorum";

/// Why a quorum client passes no lock straight to a waiter.
const HAND_OFF_UNSUPPORTED: &str = "a Redlock quorum releases a lease on every node and wakes \
    its waiters, who take it with a majority of their own";

/// Why a quorum client refuses Bloom filters.
pub(crate) const BLOOM_UNSUPPORTED: &str = "Bloom filters need one store that holds them (a \
    Redlock quorum's independent primaries would each hold a different filter): keep the \
    quorum for locks and build its client with ClientBuilder::counting_on(<a client of a \
    single primary or a Cluster>) (`counting_on` in a configuration file's [client]), or use \
    a client of a single primary or a Cluster";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quorum_holds_while_its_majority_does() {
        let ms = Duration::from_millis;
        let seen = vec![
            ("t1".to_owned(), ms(900)),
            ("t1*".to_owned(), ms(500)),
            ("t2".to_owned(), ms(800)),
        ];
        assert_eq!(majority_holder(&seen, 2), Some(("t1".to_owned(), ms(500))));
        assert_eq!(majority_holder(&seen, 3), None);
        assert_eq!(majority_holder(&seen[2..], 2), None);
    }
}
