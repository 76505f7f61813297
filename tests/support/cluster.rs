//! A real local Redis Cluster (3 masters + 3 replicas) for the cluster tests.
//!
//! [`RedisCluster::start`] spawns six `redis-server` processes with
//! `--cluster-enabled yes` on free loopback ports (each with its own temp dir,
//! `nodes.conf` and log), joins them with
//! `redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes`, and
//! returns once the cluster has *settled* (see [`RedisCluster::wait_settled`]):
//! every node says `cluster_state:ok`, all 16384 slots are served, every node
//! has the same view of who owns which slot and who replicates whom, and every
//! replica's link to its master is up. Dropping it SIGKILLs and reaps the
//! processes and removes the temp dirs.
//!
//! Topology-changing tools work on a running cluster, while clients keep
//! talking to it:
//! * [`RedisCluster::migrate_slot`] (or [`RedisCluster::begin_migration`] +
//!   [`SlotMigration::move_keys`] + [`SlotMigration::finish`]): the online
//!   resharding protocol (`SETSLOT IMPORTING/MIGRATING`, `MIGRATE ... KEYS`,
//!   `SETSLOT NODE`), so clients see `ASK`/`MOVED` meanwhile;
//! * [`RedisCluster::failover`] (graceful `CLUSTER FAILOVER`),
//!   [`RedisCluster::kill_master`] (SIGKILL + automatic promotion, timed),
//!   [`RedisCluster::restart_node`], [`ClusterNode::kill`],
//!   [`ClusterNode::stop_process`] / [`ClusterNode::cont_process`].
//!
//! [`RedisCluster::shared`] is one cluster per test binary for tests that do
//! not change the topology (starting six servers costs a few seconds). It is
//! never dropped; no server outlives the test process anyway:
//! * every process is spawned by one long-lived "spawner" thread with
//!   `prctl(PR_SET_PDEATHSIG, SIGKILL)`, so the kernel kills it when the test
//!   process dies, however it dies (even SIGKILL);
//! * an `atexit` hook SIGKILLs and reaps every server still registered and
//!   removes the shared cluster's temp dirs when the test binary exits
//!   (normally or through a failing test's `process::exit(101)`).
//!
//! A redis-rs cluster client is built from [`RedisCluster::seed_urls`] (see
//! there). No mock anywhere: if `redis-server` or `redis-cli` is missing, or the
//! cluster does not form in time, [`RedisCluster::start`] panics with the
//! reason and the nodes' logs.
//!
//! ## Settings (same on every node)
//! * `--cluster-node-timeout 1000` (builder: [`RedisClusterBuilder::node_timeout`]):
//!   failure detection and so automatic failover take about the node timeout
//!   plus 0.5–1.5 s (replica election delay); 1 s keeps failover tests short
//!   while staying far above scheduling hiccups of idle local servers.
//! * `--cluster-port <free port>`: the default bus port is `port + 10000`,
//!   which overflows for ephemeral ports above 55535.
//! * `--cluster-replica-validity-factor 0`: a replica may always be promoted,
//!   however long its link was down (otherwise a killed-and-restarted topology
//!   can end up with no eligible replica and never recover).
//! * `--cluster-allow-replica-migration no`: the topology only changes when a
//!   test changes it (no replica wandering to another master, no master that
//!   turns itself into a replica after its last slot was migrated away).
//! * `--cluster-require-full-coverage yes` (Redis's default, what production
//!   runs; builder: [`RedisClusterBuilder::require_full_coverage`]): while a
//!   dead master's slots are unserved, the whole cluster answers
//!   `CLUSTERDOWN`. Use `false` to keep the other shards serving.
//! * `--repl-diskless-sync yes --repl-diskless-sync-delay 0`: a replica's
//!   full sync starts at once (the default waits 5 s for more replicas).
//! * `--save "" --appendonly no --enable-debug-command yes`, like
//!   [`RedisServer`](super::server::RedisServer): no persistence, so a
//!   restarted node comes back empty (it keeps its `nodes.conf`, so it keeps
//!   its node id and rejoins).
//!
//! ## Timings (measured on a 2-core machine, Redis 7.0.15)
//! * start: about 2.1 s, of which Redis itself imposes most: a fresh master
//!   keeps `cluster_state:fail` for 2 s after its start, and
//!   `redis-cli --cluster create` waits in steps of 1 s for the join;
//! * [`RedisCluster::kill_master`]: replica promoted 2.1–2.7 s after the
//!   SIGKILL, settled about 0.1 s later;
//! * [`RedisCluster::failover`]: promoted after 5–30 ms, settled after
//!   0.2–0.6 s (the old master resyncs as a replica);
//! * [`RedisCluster::migrate_slot`] of ~500 keys: 50–150 ms.
//!
//! Stopped (SIGSTOPped) nodes count as down for every wait of the harness.

use std::collections::BTreeSet;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use super::files::{LOG_FILE, free_ports, make_temp_dir};
use super::node::{
    NodeProcess, PROBE_CONNECT_TIMEOUT, PROBE_RESPONSE_TIMEOUT, Poll, block_on_isolated,
    info_section, inspection_conn, ping, probe, spawn_error,
};
use super::process::{registry, spawn_tied};

#[path = "cluster/migration.rs"]
mod migration;
#[path = "cluster/slots.rs"]
mod slots;
#[path = "cluster/view.rs"]
mod view;

pub use migration::SlotMigration;
pub use slots::{SLOTS, hash_tag_for_slot, key_in_slot, slot_of};
pub use view::{ClusterInfo, ClusterView, NodeEntry};

/// Masters (and replicas: one per master) of a [`RedisCluster`].
pub const MASTERS: usize = 3;

/// All nodes of a [`RedisCluster`].
pub const NODES: usize = 2 * MASTERS;

const REDIS_SERVER: &str = "redis-server";
const REDIS_CLI: &str = "redis-cli";

/// The oldest `redis-server` a cluster runs on here, and why: [`start`](RedisCluster::start)
/// refuses an older one with this reason (scripts/version-matrix.sh leaves the cluster tests
/// out on it, saying the same).
pub const MIN_VERSION: (u32, u32) = (7, 0);
pub const MIN_VERSION_REASON: &str = "distlock's cluster wake-ups use sharded pub/sub \
     (SSUBSCRIBE, Redis 7.0) and connect_cluster refuses an older cluster; the harness sets \
     cluster-port (7.0)";

const INSTALL_HELP: &str = "install Redis with `sudo apt-get install -y redis-server` \
     (Debian/Ubuntu; it ships redis-server and redis-cli) or run ./scripts/test.sh, which installs it";

/// Default `--cluster-node-timeout`.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(1000);

/// How long a node may take to answer `PING` after being spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `redis-cli --cluster create` may take.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`RedisCluster::wait_settled`] waits by default.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a replica may take to be promoted (graceful or automatic).
const PROMOTION_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one manual failover attempt may take before it is retried (Redis
/// aborts a manual failover after 5 s).
const MANUAL_FAILOVER_ATTEMPT: Duration = Duration::from_secs(8);

/// Pause between two polls of the cluster's state.
const POLL: Duration = Duration::from_millis(20);

/// How many fresh port pairs a node tries at start-up before giving up.
const PORT_ATTEMPTS: usize = 5;

/// Lines of each node's log included in failure messages.
const LOG_TAIL_LINES: usize = 60;

const CLI_LOG_FILE: &str = "redis-cli-create.log";
const READY_LINE: &str = "Ready to accept connections";

/// Options the harness sets itself.
const RESERVED_OPTIONS: &[&str] = &[
    "port",
    "bind",
    "dir",
    "logfile",
    "daemonize",
    "cluster-enabled",
    "cluster-config-file",
    "cluster-port",
];

// ---------------------------------------------------------------------------
// Builder
// ---------------------------------------------------------------------------

/// Options of a [`RedisCluster`]; see the module docs for the defaults.
#[derive(Debug, Clone)]
#[must_use]
pub struct RedisClusterBuilder {
    node_timeout: Duration,
    require_full_coverage: bool,
    args: Vec<String>,
}

impl Default for RedisClusterBuilder {
    fn default() -> Self {
        Self {
            node_timeout: DEFAULT_NODE_TIMEOUT,
            require_full_coverage: true,
            args: Vec::new(),
        }
    }
}

impl RedisClusterBuilder {
    /// `--cluster-node-timeout` (default 1 s).
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// `--cluster-require-full-coverage` (default `true`, Redis's default).
    pub fn require_full_coverage(mut self, yes: bool) -> Self {
        self.require_full_coverage = yes;
        self
    }

    /// Adds a config directive to every node, e.g.
    /// `.config("--maxmemory", &["10mb"])`. Passed after the harness's own
    /// options, so it overrides the tunables (not the ports, dirs or
    /// cluster mode).
    ///
    /// # Panics
    ///
    /// If `name` is empty or an option the harness controls.
    pub fn config(mut self, name: &str, values: &[&str]) -> Self {
        let name = super::server::directive_name(name, RESERVED_OPTIONS, "cluster harness");
        let lower = name.to_ascii_lowercase();
        assert!(
            !matches!(lower.as_str(), "requirepass" | "masterauth" | "masteruser"),
            "--{name}: the cluster harness does not support password-protected nodes \
             (redis-cli, the replicas and its probes connect without credentials)"
        );
        self.args.push(format!("--{name}"));
        self.args.extend(values.iter().map(|v| (*v).to_owned()));
        self
    }

    /// Starts the cluster; see [`RedisCluster::start`].
    pub fn start(self) -> RedisCluster {
        RedisCluster::start_with(self)
    }

    fn node_args(&self, port: u16, bus_port: u16, dir: &Path) -> Vec<String> {
        let dir = dir.to_str().expect("temp dir path is UTF-8").to_owned();
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        let mut args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--cluster-port",
            &bus_port.to_string(),
            "--bind",
            "127.0.0.1",
            "--daemonize",
            "no",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            &self.node_timeout.as_millis().to_string(),
            "--cluster-replica-validity-factor",
            "0",
            "--cluster-allow-replica-migration",
            "no",
            "--cluster-require-full-coverage",
            yes_no(self.require_full_coverage),
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "yes",
            "--dir",
            &dir,
            "--logfile",
            &format!("{dir}/{LOG_FILE}"),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.extend(self.args.iter().cloned());
        args
    }
}

// ---------------------------------------------------------------------------
// Nodes
// ---------------------------------------------------------------------------

/// One `redis-server` process of a [`RedisCluster`]. Its port, node id, dir
/// and url never change (a restart reuses them); its role may (see
/// [`RedisCluster::masters`] / [`ClusterNode::role`]).
#[derive(Debug)]
pub struct ClusterNode {
    index: usize,
    port: u16,
    bus_port: u16,
    id: String,
    args: Vec<String>,
    /// Its dir (`--dir`, with `nodes.conf` and the log) and the running `redis-server`.
    process: NodeProcess,
    /// Part of the shared cluster: the fault tools refuse to act.
    shared: bool,
}

/// Role of a node in its own view of the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Master,
    Replica,
}

/// The node's process: [`pid`](NodeProcess::pid), [`dir`](NodeProcess::dir) (its temp dir,
/// with its config and log), [`is_running`](NodeProcess::is_running) (a SIGSTOPped one counts),
/// [`is_serving`](NodeProcess::is_serving) (running and not SIGSTOPped),
/// [`log`](NodeProcess::log) and [`log_tail`](NodeProcess::log_tail).
impl std::ops::Deref for ClusterNode {
    type Target = NodeProcess;

    fn deref(&self) -> &NodeProcess {
        &self.process
    }
}

impl ClusterNode {
    /// Position of the node in [`RedisCluster::nodes`] (stable).
    pub fn index(&self) -> usize {
        self.index
    }

    /// Client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Cluster bus port (`--cluster-port`).
    pub fn bus_port(&self) -> u16 {
        self.bus_port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr())
    }

    /// The 40-hex-digit cluster node id (stable across restarts: it lives in
    /// the node's `nodes.conf`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// A plain `redis::Client` for this node only (commands for other nodes'
    /// slots get `MOVED`).
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("harness url must be a valid redis url")
    }

    /// A fresh multiplexed connection to this node only, for assertions and
    /// fault injection (5 s connect and 15 s response timeouts). Open a new
    /// one per tokio runtime: a connection is bound to the runtime it was
    /// made on.
    ///
    /// # Panics
    ///
    /// If the connection fails (message includes the node's log).
    pub async fn conn(&self) -> MultiplexedConnection {
        inspection_conn(&self.client()).await.unwrap_or_else(|e| {
            panic!(
                "cannot connect to cluster node {} ({}): {e}\nlog tail:\n{}",
                self.addr(),
                self.id,
                self.log_tail(LOG_TAIL_LINES)
            )
        })
    }

    /// `CLUSTER INFO` of this node.
    ///
    /// # Panics
    ///
    /// If the node does not answer.
    pub async fn cluster_info(&self) -> ClusterInfo {
        match self.try_cluster_info().await {
            Ok(info) => info,
            Err(e) => panic!("CLUSTER INFO on {}: {e}", self.addr()),
        }
    }

    /// This node's `CLUSTER NODES`, parsed.
    ///
    /// # Panics
    ///
    /// If the node does not answer or the reply cannot be parsed.
    pub async fn view(&self) -> ClusterView {
        match self.try_view().await {
            Ok(view) => view,
            Err(e) => panic!("CLUSTER NODES on {}: {e}", self.addr()),
        }
    }

    /// The role this node gives itself (`myself,master` / `myself,slave`).
    pub async fn role(&self) -> Role {
        let view = self.view().await;
        let me = view.myself().expect("CLUSTER NODES has a `myself` line");
        if me.is_master() {
            Role::Master
        } else {
            Role::Replica
        }
    }

    /// SIGKILLs and reaps the process (no-op if not running). Its dir, log and
    /// `nodes.conf` stay for [`RedisCluster::restart_node`]. The cluster is
    /// not waited for: see [`RedisCluster::kill_master`] for that.
    ///
    /// # Panics
    ///
    /// On a node of the [shared](RedisCluster::shared) cluster.
    pub fn kill(&self) {
        self.assert_not_shared("kill");
        self.kill_process();
    }

    fn kill_process(&self) {
        self.process.kill();
    }

    /// Freezes the process with SIGSTOP (it keeps its sockets but answers
    /// nothing, not even the cluster bus: after the node timeout the others
    /// mark it failing).
    ///
    /// # Panics
    ///
    /// If the node is not running or belongs to the shared cluster.
    pub fn stop_process(&self) {
        self.assert_not_shared("stop_process");
        self.process.stop("cluster node");
    }

    /// Resumes a process frozen by [`stop_process`](Self::stop_process).
    ///
    /// # Panics
    ///
    /// If the node is not running or belongs to the shared cluster.
    pub fn cont_process(&self) {
        self.assert_not_shared("cont_process");
        self.process.cont("cluster node");
    }

    fn assert_not_shared(&self, what: &str) {
        assert!(
            !self.shared,
            "{what} changes the topology: not allowed on RedisCluster::shared(); \
             start an own cluster with RedisCluster::start()"
        );
    }

    /// Spawns the process (not waiting for it) and returns the log offset at
    /// which this run's output starts.
    fn spawn(&self) -> u64 {
        self.process.spawn(&self.args)
    }

    /// One readiness check of a freshly spawned process.
    fn poll_ready(&self, log_offset: u64) -> Poll {
        self.process
            .poll_ready(log_offset, READY_LINE, || ping(self.addr()))
    }

    fn start_failure(&self, what: &str) -> ! {
        let log = self.log();
        self.kill_process();
        panic!(
            "cluster node on port {} (bus {}) failed to start: {what}; args {:?}; log:\n{log}",
            self.port, self.bus_port, self.args
        );
    }

    async fn try_cluster_info(&self) -> Result<ClusterInfo, String> {
        probe::<String>(self.addr(), redis::cmd("CLUSTER").arg("INFO"))
            .await
            .map(|text| ClusterInfo::parse(&text))
    }

    async fn try_view(&self) -> Result<ClusterView, String> {
        let text = probe::<String>(self.addr(), redis::cmd("CLUSTER").arg("NODES")).await?;
        ClusterView::parse(&text)
    }
}

/// A master with its replicas and slots, from [`RedisCluster::shards`].
#[derive(Debug, Clone)]
pub struct Shard<'a> {
    pub master: &'a ClusterNode,
    pub replicas: Vec<&'a ClusterNode>,
    pub slots: Vec<RangeInclusive<u16>>,
}

/// Outcome of [`RedisCluster::failover`] / [`RedisCluster::kill_master`].
#[derive(Debug, Clone, Copy)]
pub struct Promotion<'a> {
    pub old_master: &'a ClusterNode,
    pub new_master: &'a ClusterNode,
    /// From the `CLUSTER FAILOVER` / SIGKILL until the replica called itself master.
    pub promoted_after: Duration,
    /// From the `CLUSTER FAILOVER` / SIGKILL until the cluster had settled
    /// (every live node agrees, `cluster_state:ok`, links up).
    pub settled_after: Duration,
}

// ---------------------------------------------------------------------------
// The cluster
// ---------------------------------------------------------------------------

/// A running 3-master + 3-replica Redis Cluster on loopback; processes killed
/// and temp dirs removed on drop. See the module docs.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<ClusterNode>,
    root: PathBuf,
    startup: Duration,
    shared: bool,
}

impl RedisCluster {
    /// Starts a fresh cluster with the default settings and returns once it
    /// has settled (bounded: 10 s per node to answer, 30 s for
    /// `redis-cli --cluster create`, 30 s to settle).
    ///
    /// Callable from sync code and from inside a tokio runtime (it blocks the
    /// calling thread; the waiting runs on a private thread).
    ///
    /// # Panics
    ///
    /// If `redis-server` or `redis-cli` is missing, a node does not start, or
    /// the cluster does not form in time; the message carries the reason,
    /// `redis-cli`'s output and the nodes' logs. Everything started is killed
    /// and removed before the panic propagates.
    pub fn start() -> RedisCluster {
        Self::builder().start()
    }

    /// A builder for non-default settings.
    pub fn builder() -> RedisClusterBuilder {
        RedisClusterBuilder::default()
    }

    /// The hash slot of `key`; same as the module's [`slot_of`].
    pub fn slot_of(key: impl AsRef<[u8]>) -> u16 {
        slot_of(key)
    }

    /// The cluster shared by all tests of this test binary that do not
    /// change its topology: started on first use (by whichever test comes
    /// first; the others wait), never dropped, killed when the process exits
    /// (see the module docs). Keys from different tests share it: use
    /// distinct key names (e.g. the test's name as a prefix) and never
    /// `FLUSHALL`. Slot migration, failover, kill/stop/restart panic on it.
    pub fn shared() -> &'static RedisCluster {
        static SHARED: OnceLock<RedisCluster> = OnceLock::new();
        SHARED.get_or_init(|| {
            let mut cluster = RedisCluster::start();
            cluster.shared = true;
            for node in &mut cluster.nodes {
                node.shared = true;
            }
            registry().dirs.push(cluster.root.clone());
            cluster
        })
    }

    fn start_with(builder: RedisClusterBuilder) -> RedisCluster {
        super::server::require_version(MIN_VERSION, "a Redis Cluster", MIN_VERSION_REASON);
        let began = Instant::now();
        let root = make_temp_dir(temp_dir_prefix());
        let mut cluster = RedisCluster {
            nodes: Vec::with_capacity(NODES),
            root,
            startup: Duration::ZERO,
            shared: false,
        };
        // Ports are picked together so that they are at least distinct among
        // themselves; a clash with another process is retried per node.
        let ports = free_ports(2 * NODES);
        for index in 0..NODES {
            let dir = cluster.root.join(format!("node{index}"));
            fs::create_dir(&dir).expect("create a cluster node's dir");
            let (port, bus_port) = (ports[2 * index], ports[2 * index + 1]);
            cluster.nodes.push(ClusterNode {
                index,
                port,
                bus_port,
                id: String::new(),
                args: builder.node_args(port, bus_port, &dir),
                process: NodeProcess::new(REDIS_SERVER, INSTALL_HELP, dir),
                shared: false,
            });
        }
        let offsets: Vec<u64> = cluster.nodes.iter().map(ClusterNode::spawn).collect();
        for (index, offset) in offsets.into_iter().enumerate() {
            cluster.wait_first_start(&builder, index, offset);
        }
        for node in &mut cluster.nodes {
            node.id = node_id(node);
        }
        cluster.create();
        let settled = block_on_isolated(cluster.try_wait_settled(SETTLE_TIMEOUT, |_| Ok(())));
        if let Err(reason) = settled {
            let description = block_on_isolated(cluster.describe());
            panic!(
                "the Redis Cluster did not settle within {SETTLE_TIMEOUT:?} after \
                 `redis-cli --cluster create`: {reason}\n{description}\nredis-cli output:\n{}",
                cluster.cli_log()
            );
        }
        let shards = block_on_isolated(cluster.shards());
        let shape_ok = shards.len() == MASTERS && shards.iter().all(|s| s.replicas.len() == 1);
        if !shape_ok {
            let description = block_on_isolated(cluster.describe());
            panic!(
                "the Redis Cluster formed with an unexpected shape (want {MASTERS} masters \
                 with one replica each): {shards:?}\n{description}"
            );
        }
        cluster.startup = began.elapsed();
        cluster
    }

    /// Waits for node `index`'s first start, re-spawning it on fresh ports
    /// if its ports were taken meanwhile.
    fn wait_first_start(&mut self, builder: &RedisClusterBuilder, index: usize, offset: u64) {
        let mut offset = offset;
        let mut attempts = 1;
        let mut deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let node = &self.nodes[index];
            match node.poll_ready(offset) {
                Poll::Ready => return,
                Poll::NotYet if Instant::now() < deadline => std::thread::sleep(POLL / 2),
                Poll::NotYet => {
                    node.start_failure(&format!("no PING answer within {READY_TIMEOUT:?}"))
                }
                Poll::Failed(what) => node.start_failure(&what),
                Poll::PortInUse(log) => {
                    assert!(
                        attempts < PORT_ATTEMPTS,
                        "cluster node could not bind free ports after {PORT_ATTEMPTS} attempts; \
                         last log:\n{log}"
                    );
                    attempts += 1;
                    let taken: BTreeSet<u16> = self
                        .nodes
                        .iter()
                        .flat_map(|n| [n.port, n.bus_port])
                        .collect();
                    let fresh: Vec<u16> = free_ports(2 * NODES + 2)
                        .into_iter()
                        .filter(|p| !taken.contains(p))
                        .take(2)
                        .collect();
                    let node = &mut self.nodes[index];
                    node.port = fresh[0];
                    node.bus_port = fresh[1];
                    node.args = builder.node_args(node.port, node.bus_port, node.process.dir());
                    offset = node.spawn();
                    deadline = Instant::now() + READY_TIMEOUT;
                }
            }
        }
    }

    /// `redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes`.
    fn create(&self) {
        let out_path = self.root.join(CLI_LOG_FILE);
        let out = fs::File::create(&out_path).expect("create the redis-cli output file");
        let err = out.try_clone().expect("duplicate file handle");
        let mut cmd = Command::new(REDIS_CLI);
        cmd.args(["--cluster", "create"])
            .args(self.nodes.iter().map(|n| n.addr().to_string()))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let mut cli = spawn_tied(cmd).unwrap_or_else(|e| spawn_error(REDIS_CLI, &e, INSTALL_HELP));
        let deadline = Instant::now() + CREATE_TIMEOUT;
        let status = loop {
            if let Some(status) = cli.try_wait() {
                break status;
            }
            if Instant::now() >= deadline {
                drop(cli);
                panic!(
                    "`redis-cli --cluster create` did not finish within {CREATE_TIMEOUT:?}; \
                     its output:\n{}\n{}",
                    self.cli_log(),
                    self.logs()
                );
            }
            std::thread::sleep(POLL);
        };
        assert!(
            status.success(),
            "`redis-cli --cluster create` failed ({status}); its output:\n{}\n{}",
            self.cli_log(),
            self.logs()
        );
    }

    /// What `redis-cli --cluster create` printed.
    pub fn cli_log(&self) -> String {
        fs::read(self.root.join(CLI_LOG_FILE))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_else(|e| format!("<no redis-cli output: {e}>"))
    }

    /// How long [`start`](Self::start) took, from spawning to settled.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// Whether this is the [`shared`](Self::shared) cluster.
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// The temp dir holding every node's dir.
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// All six nodes, in a stable order (roles may change: see
    /// [`masters`](Self::masters)).
    pub fn nodes(&self) -> &[ClusterNode] {
        &self.nodes
    }

    /// The node with cluster id `id`.
    ///
    /// # Panics
    ///
    /// If no node has that id.
    pub fn node(&self, id: &str) -> &ClusterNode {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .unwrap_or_else(|| panic!("no node with id {id} in this cluster"))
    }

    /// The node listening on `port`.
    ///
    /// # Panics
    ///
    /// If no node has that port.
    pub fn node_by_port(&self, port: u16) -> &ClusterNode {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on port {port} in this cluster"))
    }

    /// `redis://127.0.0.1:P/` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(ClusterNode::url).collect()
    }

    /// Seed URLs for a cluster client: every node's (so that any one node
    /// being down does not matter), e.g.
    /// `redis::cluster::ClusterClient::new(cluster.seed_urls())`.
    ///
    /// (This module builds no cluster client itself: it is compiled into every
    /// test binary that includes `tests/support`, and redis-rs's
    /// `cluster-async` feature is a dev-dependency of the root package only.)
    pub fn seed_urls(&self) -> Vec<String> {
        self.urls()
    }

    /// Pids of the current processes of the running nodes.
    pub fn pids(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .map(|node| node.pid())
            .collect()
    }

    /// The cluster as the first answering live node sees it (all live nodes
    /// agree whenever the harness's helpers have returned).
    ///
    /// # Panics
    ///
    /// If no live node answers.
    pub async fn view(&self) -> ClusterView {
        let mut errors = Vec::new();
        for node in self.nodes.iter().filter(|n| n.is_serving()) {
            match node.try_view().await {
                Ok(view) => return view,
                Err(e) => errors.push(format!("{}: {e}", node.addr())),
            }
        }
        panic!("no live cluster node answers CLUSTER NODES: {errors:?}");
    }

    /// The live, non-failed masters, ordered by their first slot (masters
    /// without slots last). At start: `masters()[0]` owns slot 0.
    pub async fn masters(&self) -> Vec<&ClusterNode> {
        let view = self.view().await;
        let mut masters: Vec<(u16, &ClusterNode)> = view
            .entries
            .iter()
            .filter(|e| e.is_master() && !e.is_failed())
            .filter_map(|e| {
                let node = self.nodes.iter().find(|n| n.id == e.id)?;
                let first = e.slots.iter().map(|r| *r.start()).min().unwrap_or(u16::MAX);
                node.is_running().then_some((first, node))
            })
            .collect();
        masters.sort_by_key(|&(first, node)| (first, node.index));
        masters.into_iter().map(|(_, node)| node).collect()
    }

    /// The live, non-failed replicas.
    pub async fn replicas(&self) -> Vec<&ClusterNode> {
        let view = self.view().await;
        view.entries
            .iter()
            .filter(|e| e.is_replica() && !e.is_failed())
            .filter_map(|e| self.nodes.iter().find(|n| n.id == e.id))
            .filter(|n| n.is_running())
            .collect()
    }

    /// The live replicas of `master`.
    pub async fn replicas_of(&self, master: &ClusterNode) -> Vec<&ClusterNode> {
        let view = self.view().await;
        view.entries
            .iter()
            .filter(|e| e.is_replica() && !e.is_failed())
            .filter(|e| e.master_id.as_deref() == Some(master.id()))
            .filter_map(|e| self.nodes.iter().find(|n| n.id == e.id))
            .filter(|n| n.is_running())
            .collect()
    }

    /// Every live master with its live replicas and slots, as
    /// [`masters`](Self::masters) orders them.
    pub async fn shards(&self) -> Vec<Shard<'_>> {
        let view = self.view().await;
        let mut shards = Vec::new();
        for master in self.masters().await {
            let slots = view
                .get(master.id())
                .map(|e| e.slots.clone())
                .unwrap_or_default();
            shards.push(Shard {
                master,
                replicas: self.replicas_of(master).await,
                slots,
            });
        }
        shards
    }

    /// The master that owns `slot` now.
    ///
    /// # Panics
    ///
    /// If no master owns it (e.g. during a failover).
    pub async fn master_of_slot(&self, slot: u16) -> &ClusterNode {
        let view = self.view().await;
        let owner = view
            .owner_of(slot)
            .unwrap_or_else(|| panic!("no master owns slot {slot}:\n{view}"));
        self.node(&owner.id)
    }

    /// The master that owns `key`'s slot now.
    pub async fn master_of_key(&self, key: impl AsRef<[u8]>) -> &ClusterNode {
        self.master_of_slot(slot_of(key)).await
    }

    /// `CLUSTER INFO` of every live node, as `(port, info)`.
    ///
    /// # Panics
    ///
    /// If a live node does not answer.
    pub async fn cluster_info(&self) -> Vec<(u16, ClusterInfo)> {
        let mut all = Vec::new();
        for node in self.nodes.iter().filter(|n| n.is_serving()) {
            all.push((node.port, node.cluster_info().await));
        }
        all
    }

    /// The tail of every node's log, with a header per node, for failure
    /// messages ([`NodeProcess::log`] has a whole log).
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            let state = if node.is_running() {
                "running"
            } else {
                "killed"
            };
            out.push_str(&format!(
                "=== node {} 127.0.0.1:{} (bus {}) id {} pid {} {state}: last {LOG_TAIL_LINES} log lines ===\n",
                node.index,
                node.port,
                node.bus_port,
                node.id,
                node.pid()
            ));
            out.push_str(&node.log_tail(LOG_TAIL_LINES));
            out.push('\n');
        }
        out
    }

    /// Every live node's `CLUSTER NODES` and `CLUSTER INFO` state plus
    /// [`logs`](Self::logs), for failure messages. Never panics.
    pub async fn describe(&self) -> String {
        let mut out = String::from("--- cluster views ---\n");
        for node in &self.nodes {
            if !node.is_serving() {
                out.push_str(&format!(
                    "node {} port {}: not running/stopped\n",
                    node.index, node.port
                ));
                continue;
            }
            let state = match node.try_cluster_info().await {
                Ok(info) => format!(
                    "cluster_state:{} slots_ok:{} epoch:{}",
                    info.get("cluster_state").unwrap_or("?"),
                    info.get("cluster_slots_ok").unwrap_or("?"),
                    info.get("cluster_current_epoch").unwrap_or("?")
                ),
                Err(e) => format!("CLUSTER INFO failed: {e}"),
            };
            out.push_str(&format!(
                "node {} port {} ({state}) sees:\n",
                node.index, node.port
            ));
            match node.try_view().await {
                Ok(view) => out.push_str(view.raw()),
                Err(e) => out.push_str(&format!("  CLUSTER NODES failed: {e}\n")),
            }
        }
        out.push_str("--- logs ---\n");
        out.push_str(&self.logs());
        out
    }

    /// Waits (bounded by 30 s) until the cluster has settled: every live node
    /// answers with `cluster_state:ok` and all 16384 slots ok; all live nodes
    /// have the same view (per node: role, master, slots, failed); no live
    /// node is suspected or failed, all bus links are connected; no slot is
    /// migrating/importing; every slot belongs to a live master; every live
    /// replica's `master_link_status` is `up` with the right master.
    /// Stopped (SIGSTOPped) nodes count as down.
    ///
    /// # Panics
    ///
    /// If it does not settle in time (message: the last reason, every view
    /// and the logs).
    pub async fn wait_settled(&self) {
        self.wait_settled_within(SETTLE_TIMEOUT).await;
    }

    /// [`wait_settled`](Self::wait_settled) with another bound.
    pub async fn wait_settled_within(&self, timeout: Duration) {
        if let Err(reason) = self.try_wait_settled(timeout, |_| Ok(())).await {
            panic!(
                "the Redis Cluster did not settle within {timeout:?}: {reason}\n{}",
                self.describe().await
            );
        }
    }

    /// Polls [`check_settled`](Self::check_settled) plus `extra` (on the
    /// agreed view) until both pass or `timeout`; `Err(last reason)`.
    async fn try_wait_settled(
        &self,
        timeout: Duration,
        extra: impl Fn(&ClusterView) -> Result<(), String>,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let reason = match self.check_settled().await {
                Ok(view) => match extra(&view) {
                    Ok(()) => return Ok(()),
                    Err(reason) => reason,
                },
                Err(reason) => reason,
            };
            if Instant::now() >= deadline {
                return Err(reason);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// One check of the settled condition; `Ok(agreed view)` or why not.
    async fn check_settled(&self) -> Result<ClusterView, String> {
        let live: Vec<&ClusterNode> = self.nodes.iter().filter(|n| n.is_serving()).collect();
        if live.is_empty() {
            return Err("no node is running".into());
        }
        let mut views = Vec::with_capacity(live.len());
        for node in &live {
            let at = node.addr();
            let info = node
                .try_cluster_info()
                .await
                .map_err(|e| format!("{at}: {e}"))?;
            if !info.is_ok() {
                return Err(format!("{at}: cluster_state is not ok"));
            }
            for (field, want) in [
                ("cluster_slots_assigned", u64::from(SLOTS)),
                ("cluster_slots_ok", u64::from(SLOTS)),
                ("cluster_known_nodes", NODES as u64),
            ] {
                if info.number(field) != Some(want) {
                    return Err(format!(
                        "{at}: {field} is {:?}, want {want}",
                        info.get(field)
                    ));
                }
            }
            let view = node.try_view().await.map_err(|e| format!("{at}: {e}"))?;
            if let Some(open) = view
                .myself()
                .map(|m| &m.open_slots)
                .filter(|o| !o.is_empty())
            {
                return Err(format!("{at}: open slots {open:?}"));
            }
            for entry in &view.entries {
                let Some(subject) = self.nodes.iter().find(|n| n.id == entry.id) else {
                    return Err(format!("{at}: knows a foreign node {}", entry.id));
                };
                if entry.has_flag("handshake") || entry.has_flag("noaddr") {
                    return Err(format!("{at}: node {} is {:?}", entry.id, entry.flags));
                }
                if subject.is_serving() {
                    if entry.is_failed() || entry.has_flag("fail?") {
                        return Err(format!(
                            "{at}: live node {} flagged {:?}",
                            subject.addr(),
                            entry.flags
                        ));
                    }
                    if !entry.is_myself() && !entry.connected {
                        return Err(format!(
                            "{at}: bus link to {} not connected",
                            subject.addr()
                        ));
                    }
                }
            }
            views.push((at, view));
        }
        let (first_at, first) = &views[0];
        let reference = first.normalized();
        for (at, view) in &views[1..] {
            if view.normalized() != reference {
                return Err(format!("{at} and {first_at} disagree on the topology"));
            }
        }
        let view = first.clone();
        for slot in 0..SLOTS {
            let owner = view
                .owner_of(slot)
                .ok_or_else(|| format!("slot {slot} has no owner"))?;
            let serving = self
                .nodes
                .iter()
                .any(|n| n.id == owner.id && n.is_serving());
            if !serving || owner.is_failed() {
                return Err(format!("slot {slot} belongs to a dead master {}", owner.id));
            }
        }
        for node in &live {
            let entry = view
                .get(&node.id)
                .ok_or("a live node is missing from the view")?;
            if !entry.is_replica() {
                continue;
            }
            let master = entry
                .master_id
                .as_deref()
                .map(|id| self.node(id))
                .ok_or_else(|| format!("replica {} has no master", node.addr()))?;
            if !master.is_serving() {
                continue;
            }
            let repl = info_section(node.addr(), "replication").await?;
            let link = repl.get("master_link_status").map(String::as_str);
            let port = repl.get("master_port").map(String::as_str);
            if repl.get("role").map(String::as_str) != Some("slave")
                || port != Some(master.port.to_string().as_str())
                || link != Some("up")
            {
                return Err(format!(
                    "replica {}: role {:?}, master_port {port:?} (want {}), master_link_status {link:?}",
                    node.addr(),
                    repl.get("role"),
                    master.port
                ));
            }
        }
        Ok(view)
    }

    /// Waits (bounded by 10 s) until every live replica has received all that
    /// its master had written when this was called (replica
    /// `slave_repl_offset` ≥ master `master_repl_offset`). Use it before a
    /// [`kill_master`](Self::kill_master) that must not lose writes.
    ///
    /// # Panics
    ///
    /// On timeout.
    pub async fn wait_replication_synced(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        for master in self.masters().await {
            let repl = info_section(master.addr(), "replication")
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let target: u64 = repl
                .get("master_repl_offset")
                .and_then(|v| v.parse().ok())
                .expect("master_repl_offset in INFO replication");
            for replica in self.replicas_of(master).await {
                loop {
                    let offset = info_section(replica.addr(), "replication")
                        .await
                        .ok()
                        .and_then(|r| r.get("slave_repl_offset")?.parse::<u64>().ok());
                    if offset.is_some_and(|o| o >= target) {
                        break;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "replica {} did not reach offset {target} of master {} (at {offset:?})\n{}",
                        replica.addr(),
                        master.addr(),
                        self.describe().await
                    );
                    tokio::time::sleep(POLL).await;
                }
            }
        }
    }

    fn assert_not_shared(&self, what: &str) {
        assert!(
            !self.shared,
            "{what} changes the topology: not allowed on RedisCluster::shared(); \
             start an own cluster with RedisCluster::start()"
        );
    }

    // -- failover ------------------------------------------------------------

    /// Graceful failover of `master`: `CLUSTER FAILOVER` on its replica
    /// (which waits for replication to catch up, so no acknowledged write is
    /// lost), retried if Redis aborts it; waits until the replica is master
    /// and the cluster has settled (the old master then replicates it).
    ///
    /// # Panics
    ///
    /// If `master` has no live replica, or the failover does not complete.
    pub async fn failover(&self, master: &ClusterNode) -> Promotion<'_> {
        self.assert_not_shared("failover");
        let old_master = self.node(&master.id);
        let replica = self.replica_to_promote(old_master).await;
        let began = Instant::now();
        let deadline = began + PROMOTION_TIMEOUT;
        loop {
            let sent = probe::<String>(replica.addr(), redis::cmd("CLUSTER").arg("FAILOVER")).await;
            if let Err(e) = sent {
                panic!(
                    "CLUSTER FAILOVER on {}: {e}\n{}",
                    replica.addr(),
                    self.describe().await
                );
            }
            let attempt_end = (Instant::now() + MANUAL_FAILOVER_ATTEMPT).min(deadline);
            if self.wait_self_master(replica, attempt_end).await {
                break;
            }
            if Instant::now() >= deadline {
                panic!(
                    "graceful failover of {} to {} did not happen within {PROMOTION_TIMEOUT:?}\n{}",
                    old_master.addr(),
                    replica.addr(),
                    self.describe().await
                );
            }
        }
        self.settle_promotion(old_master, replica, began).await
    }

    /// SIGKILLs `master` and waits for its replica's automatic promotion
    /// (failure detection after the node timeout, then an election) and for
    /// the cluster to settle without it. The dead node stays down (its dir is
    /// kept): [`restart_node`](Self::restart_node) brings it back as a
    /// replica. Writes its replica had not received are lost, as in
    /// production; see [`wait_replication_synced`](Self::wait_replication_synced).
    ///
    /// # Panics
    ///
    /// If `master` has no live replica, or no promotion happens within 30 s.
    pub async fn kill_master(&self, master: &ClusterNode) -> Promotion<'_> {
        self.assert_not_shared("kill_master");
        let old_master = self.node(&master.id);
        let replica = self.replica_to_promote(old_master).await;
        let began = Instant::now();
        old_master.kill();
        if !self
            .wait_self_master(replica, began + PROMOTION_TIMEOUT)
            .await
        {
            panic!(
                "replica {} was not promoted within {PROMOTION_TIMEOUT:?} after SIGKILL of \
                 master {}\n{}",
                replica.addr(),
                old_master.addr(),
                self.describe().await
            );
        }
        self.settle_promotion(old_master, replica, began).await
    }

    /// Starts `node` again (same ports, dir, `nodes.conf` and id; empty data
    /// set), killing it first if it still runs, and waits until the cluster
    /// has settled with it. A master that was failed over comes back as a
    /// replica of its successor; one that was not (no time for a failover)
    /// comes back as the (empty) master of its slots.
    ///
    /// # Panics
    ///
    /// If the node cannot start on its ports again, or the cluster does not
    /// settle.
    pub async fn restart_node(&self, node: &ClusterNode) {
        self.assert_not_shared("restart_node");
        let node = self.node(&node.id);
        node.kill();
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut offset = node.spawn();
        loop {
            match node.poll_ready(offset) {
                Poll::Ready => break,
                Poll::NotYet if Instant::now() < deadline => tokio::time::sleep(POLL / 2).await,
                Poll::NotYet => node.start_failure("no PING answer after a restart"),
                Poll::Failed(what) => node.start_failure(&what),
                Poll::PortInUse(log) => {
                    assert!(
                        Instant::now() < deadline,
                        "cluster node could not re-bind ports {}/{} on restart:\n{log}",
                        node.port,
                        node.bus_port
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    offset = node.spawn();
                }
            }
        }
        self.wait_settled().await;
    }

    /// Kills a node without waiting for anything (same as [`ClusterNode::kill`],
    /// but refused on the shared cluster).
    pub fn kill_node(&self, node: &ClusterNode) {
        self.assert_not_shared("kill_node");
        node.kill();
    }

    /// SIGSTOPs a node (refused on the shared cluster); see
    /// [`ClusterNode::stop_process`].
    pub fn stop_node(&self, node: &ClusterNode) {
        self.assert_not_shared("stop_node");
        node.stop_process();
    }

    /// SIGCONTs a node frozen by [`stop_node`](Self::stop_node).
    pub fn cont_node(&self, node: &ClusterNode) {
        self.assert_not_shared("cont_node");
        node.cont_process();
    }

    /// Once `replica` calls itself master in `old_master`'s place (the failover began at
    /// `began`): waits for the cluster to settle and says how long each step took.
    async fn settle_promotion<'a>(
        &'a self,
        old_master: &'a ClusterNode,
        replica: &'a ClusterNode,
        began: Instant,
    ) -> Promotion<'a> {
        let promoted_after = began.elapsed();
        self.wait_settled().await;
        Promotion {
            old_master,
            new_master: replica,
            promoted_after,
            settled_after: began.elapsed(),
        }
    }

    /// The replica that a failover of `master` promotes (its only one).
    async fn replica_to_promote(&self, master: &ClusterNode) -> &ClusterNode {
        assert!(master.is_serving(), "{} is not running", master.addr());
        let view = self.view().await;
        let entry = view.get(&master.id).expect("master in the view");
        assert!(
            entry.is_master(),
            "{} is not a master:\n{view}",
            master.addr()
        );
        let replicas = self.replicas_of(master).await;
        match replicas.first() {
            Some(replica) => self.node(&replica.id),
            None => panic!(
                "master {} has no live replica to promote\n{}",
                master.addr(),
                self.describe().await
            ),
        }
    }

    /// Polls until `node` calls itself master; `false` at `deadline`.
    async fn wait_self_master(&self, node: &ClusterNode, deadline: Instant) -> bool {
        loop {
            if let Ok(view) = node.try_view().await
                && view.myself().is_some_and(NodeEntry::is_master)
            {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &self.nodes {
            node.kill_process();
        }
        let _ = fs::remove_dir_all(&self.root);
    }
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// `CLUSTER MYID` of a freshly started node (sync: runs before any runtime).
fn node_id(node: &ClusterNode) -> String {
    let result = (|| -> redis::RedisResult<String> {
        let mut conn = node
            .client()
            .get_connection_with_timeout(PROBE_CONNECT_TIMEOUT)?;
        conn.set_read_timeout(Some(PROBE_RESPONSE_TIMEOUT))?;
        redis::cmd("CLUSTER").arg("MYID").query(&mut conn)
    })();
    match result {
        Ok(id) if id.len() == 40 => id,
        other => node.start_failure(&format!("CLUSTER MYID answered {other:?}")),
    }
}

/// Every cluster temp dir's name starts with this, then `<test process pid>-`.
pub fn temp_dir_prefix() -> &'static str {
    "distlock-cluster-"
}
