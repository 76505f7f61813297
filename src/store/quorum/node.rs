//! A quorum's nodes: each one's connection, batchers and state (its boot value, quarantine,
//! identity and clock), and how a node is connected and told apart from the others.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::time::Instant;

use super::Inner;
use super::boot::{self, Boot, NodeAcquires};
use super::members;
use crate::error::StoreError;
use crate::store::batch::{Batcher, batcher};
use crate::store::connect::{RedisSettings, check_cluster_mode, probe};
use crate::store::scripts::mint::Mints;
use crate::store::scripts::release::Releases;
use crate::store::scripts::{OnConn, Publish};
use crate::token::Token;

/// One independent primary, with a batcher per kind: a plain primary has no slot rule, so
/// the concurrent acquires (or releases) of many locks share one script call per node.
pub(super) struct Node {
    /// `host:port`, for errors (never the password).
    pub(super) name: String,
    pub(super) conn: ConnectionManager,
    pub(super) state: Arc<Mutex<NodeState>>,
    pub(super) acquires: Batcher<NodeAcquires>,
    /// The node's connection with its boot check, for what is not batched (re-taking lost
    /// copies of leases).
    pub(super) checked: NodeAcquires,
    pub(super) releases: Batcher<OnConn<Releases, ConnectionManager>>,
    pub(super) mints: Batcher<OnConn<Mints, ConnectionManager>>,
}

pub(in crate::store) struct NodeState {
    /// The boot value last seen on this node ("" before it ever answered).
    pub(super) boot: String,
    /// Until when the node's votes do not count (it lost its data).
    pub(super) sits_out_until: Option<Instant>,
    /// At connect: how long ago the node's boot value was seeded. A node that lost its data
    /// shortly before this client came may have forgotten grants of other clients, so the
    /// quarantine runs from the seeding (applied by the store, which knows the quarantine).
    pub(super) seeded_ago: Option<Duration>,
    /// The server's `run_id` when last asked (`None`: not yet, or it does not say).
    pub(super) run_id: Option<String>,
    /// Whether the node is known to be a server of its own (see `members.rs`).
    pub(super) identity: Identity,
    /// Whether the node's clock was ahead of the others' at its last grant (see `clocks.rs`),
    /// so that the warning is logged when that starts and the end when it ends.
    pub(super) clock_ahead: bool,
}

/// Whether a member is a server of its own, or another member under a second name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Identity {
    /// Checked against every other member (at connect, or when it first answered).
    Distinct,
    /// Not checked yet: it could not be reached at connect. It does not vote.
    Unchecked,
    /// Another member (named here) under a second name. It never votes.
    Twin { of: String },
}

pub(in crate::store) fn lock_state(
    state: &Mutex<NodeState>,
) -> std::sync::MutexGuard<'_, NodeState> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Node {
    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, NodeState> {
        lock_state(&self.state)
    }

    pub(super) fn votes(&self, now: Instant) -> bool {
        let state = self.state();
        state.identity == Identity::Distinct
            && state.sits_out_until.is_none_or(|until| until <= now)
    }
}

/// A node's connection manager: as on a single primary, but a command on a node that is down
/// fails at once instead of waiting for reconnect attempts (one reconnect per command): the
/// other nodes decide meanwhile, and the node rejoins when it answers again.
pub(super) fn node_config(settings: &RedisSettings) -> redis::aio::ConnectionManagerConfig {
    settings.manager_config().set_number_of_retries(0)
}

/// `host:port` of a node, for messages.
pub(super) fn node_name(info: &redis::ConnectionInfo) -> String {
    info.addr().to_string()
}

/// At connect: refuses two members that keep one boot value (one server and database under
/// two names, or a copy of one's data) or report one `run_id` (one server process).
pub(super) fn refuse_twins(nodes: &[Node]) -> Result<(), StoreError> {
    let known = |value: &str| Some(value.to_owned()).filter(|v| !v.is_empty());
    let boots: Vec<_> = nodes.iter().map(|n| known(&n.state().boot)).collect();
    if let Some((i, j)) = members::first_shared(&boots) {
        return Err(members::twice(
            &nodes[i].name,
            &nodes[j].name,
            "they keep one boot value: one server and database, or a copy of one's data",
        ));
    }
    let run_ids: Vec<_> = nodes.iter().map(|n| n.state().run_id.clone()).collect();
    if let Some((i, j)) = members::first_shared(&run_ids) {
        return Err(members::twice(
            &nodes[i].name,
            &nodes[j].name,
            "they report one run_id: one server process",
        ));
    }
    Ok(())
}

pub(super) fn found_twin(node: &Node, of: &str) {
    node.state().identity = Identity::Twin { of: of.to_owned() };
    tracing::error!(node = %node.name, same_as = %of, "quorum member is another member under a second name: it never votes; configure distinct, independent primaries");
}

/// The background half of `QuorumStore::check_identity`: asks node `index` for its
/// `run_id` until it answers (or says it will not), then compares it with the other members'
/// (asked afresh, or as last known where they do not answer). Ends when the store is dropped.
pub(super) async fn compare_run_ids(inner: Weak<Inner>, index: usize) {
    let mut pause = Duration::from_millis(50);
    loop {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let limit = inner.settings.response_timeout;
        let node = &inner.nodes[index];
        let mine = tokio::time::timeout(limit, members::run_id(&mut node.conn.clone())).await;
        match mine {
            Ok(Ok(None)) => {
                // It will not say (an ACL without INFO): its boot value differed, which is
                // all that can be known.
                node.state().identity = Identity::Distinct;
                return;
            }
            Ok(Ok(Some(mine))) => {
                for (j, other) in inner.nodes.iter().enumerate() {
                    if j == index {
                        continue;
                    }
                    let asked =
                        tokio::time::timeout(limit, members::run_id(&mut other.conn.clone())).await;
                    let theirs = match asked {
                        Ok(Ok(Some(id))) => {
                            other.state().run_id = Some(id.clone());
                            Some(id)
                        }
                        _ => other.state().run_id.clone(),
                    };
                    if theirs.as_deref() == Some(mine.as_str()) {
                        found_twin(node, &other.name);
                        return;
                    }
                }
                let mut state = node.state();
                state.run_id = Some(mine);
                state.identity = Identity::Distinct;
                return;
            }
            Ok(Err(_)) | Err(_) => {}
        }
        drop(inner);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// Connects to one node: probe (credentials, version, not a cluster node), the connection
/// manager, and the node's boot value (seeded if missing).
pub(super) async fn connect_node(
    info: &redis::ConnectionInfo,
    settings: &RedisSettings,
    boot_key: &str,
) -> Result<Node, StoreError> {
    let client = settings.client(info.clone())?;
    let mut conn = probe(client.clone(), settings).await?;
    check_cluster_mode(&mut conn, false).await?;
    let seeded: (String, u64) = redis::Script::new(boot::SEED_BOOT)
        .key(boot_key)
        .arg(Token::generate().as_str())
        .invoke_async(&mut conn)
        .await?;
    let boot = Boot::parse(&seeded.0, seeded.1);
    let run_id = members::run_id(&mut conn).await?;
    drop(conn);
    let limit = settings.connect_timeout.saturating_mul(2);
    let manager = tokio::time::timeout(
        limit,
        ConnectionManager::new_with_config(client, node_config(settings)),
    )
    .await
    .map_err(|_| StoreError::Timeout { after: limit })??;
    let node = node(info, manager, boot_key, boot, settings.response_timeout);
    let mut state = node.state();
    state.run_id = run_id;
    state.identity = Identity::Distinct;
    drop(state);
    Ok(node)
}

/// A node that could not be reached at connect: it connects on first use, and sits out
/// until its boot value is known.
pub(super) fn lazy_node(
    info: &redis::ConnectionInfo,
    settings: &RedisSettings,
    boot_key: &str,
) -> Result<Node, StoreError> {
    let client = settings.client(info.clone())?;
    let manager = ConnectionManager::new_lazy_with_config(client, node_config(settings))?;
    let unknown = Boot {
        value: String::new(),
        age: Duration::ZERO,
    };
    Ok(node(
        info,
        manager,
        boot_key,
        unknown,
        settings.response_timeout,
    ))
}

/// A node over `conn`, last seen with `boot`; its batchers bound each call by `timeout`.
pub(super) fn node(
    info: &redis::ConnectionInfo,
    conn: ConnectionManager,
    boot_key: &str,
    boot: Boot,
    timeout: Duration,
) -> Node {
    let state = Arc::new(Mutex::new(NodeState {
        seeded_ago: (!boot.value.is_empty()).then_some(boot.age),
        boot: boot.value,
        sits_out_until: None,
        run_id: None,
        identity: Identity::Unchecked,
        clock_ahead: false,
    }));
    let checked = NodeAcquires {
        conn: conn.clone(),
        boot_key: boot_key.into(),
        state: state.clone(),
    };
    Node {
        name: node_name(info),
        acquires: batcher(checked.clone(), timeout),
        checked,
        releases: OnConn::plain(
            Releases {
                publish: Publish::Plain,
            },
            conn.clone(),
            timeout,
        ),
        mints: OnConn::plain(Mints, conn.clone(), timeout),
        conn,
        state,
    }
}
