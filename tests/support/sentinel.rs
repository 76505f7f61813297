//! A real Redis Sentinel topology for the replication tests: one primary, one replica and three
//! sentinels, on free loopback ports.
//!
//! [`SentinelSetup::start`] spawns a `redis-server` primary, a `redis-server` replica
//! (`replicaof` the primary) and three `redis-sentinel` processes, each with its own temp dir,
//! config file and log, and returns once the topology has *settled* (see
//! [`SentinelSetup::wait_settled`]): every sentinel names the same primary, which calls itself
//! master; every sentinel knows the replica (link ok) and the two other sentinels; the
//! replica's link to the primary is up. Dropping the setup SIGKILLs and reaps every process and
//! removes the temp dirs.
//!
//! Fault tools, while clients keep talking to it:
//! * [`SentinelSetup::kill_primary`]: SIGKILL of the primary, then the sentinels' automatic
//!   failover (failure detection after `down-after-milliseconds`, agreement, election,
//!   promotion), timed ([`Promotion`]);
//! * [`SentinelSetup::failover`]: `SENTINEL FAILOVER <name>` (a forced promotion that needs no
//!   agreement; the harness first waits until the replica has everything the primary had);
//! * [`SentinelSetup::freeze_replica`]: SIGSTOP of the replica (for `WAIT`), resumed on drop;
//! * [`SentinelSetup::restart_node`], and per process ([`RedisNode`]): [`RedisNode::kill`],
//!   [`RedisNode::stop_process`] / [`RedisNode::cont_process`], [`RedisNode::restart`].
//!
//! No process outlives the test binary, as in `cluster.rs`:
//! * every process is forked by one long-lived "spawner" thread with
//!   `prctl(PR_SET_PDEATHSIG, SIGKILL)`, so the kernel kills it when the test process dies,
//!   however it dies (even SIGKILL);
//! * an `atexit` hook SIGKILLs and reaps every process still registered when the test binary
//!   exits (normally, or through a failing test's `process::exit(101)`);
//! * [`RedisNode`] kills and reaps its process on drop.
//!
//! [`RedisNode`] is also the process type of the TLS server (`tls.rs`).
//!
//! ## Settings
//! * Data nodes (a config file each, `redis.conf`, so that Sentinel's `CONFIG REWRITE` after a
//!   reconfiguration persists, as in production): `save ""`, `appendonly no`,
//!   `enable-debug-command yes` (7.0+) like [`RedisServer`](super::server::RedisServer) (a
//!   killed node comes back empty); `repl-diskless-sync yes`, `repl-diskless-sync-delay 0` (a
//!   full sync starts at once).
//! * Sentinels (`sentinel.conf`, rewritten by the sentinel itself): `sentinel monitor <name>
//!   127.0.0.1 <primary port> 2`, `down-after-milliseconds 1000`, `failover-timeout 2000`,
//!   `parallel-syncs 1`, `resolve-hostnames no`, `announce-ip 127.0.0.1`, `announce-port
//!   <port>` (builder: [`SentinelSetupBuilder`]). A failed election is retried after twice the
//!   failover timeout, so a short one keeps an unlucky split vote from stalling a test.
//!
//! ## Timings (measured on a 2-core machine, Redis 7.0.15; tests/replication prints them)
//! * start: about 2.2 s (the sentinels find each other through their hello messages, sent
//!   every 2 s);
//! * [`SentinelSetup::kill_primary`]: replica promoted 1.3–1.4 s after the SIGKILL, named by
//!   every sentinel after about 2.3 s (which is also when redis-rs's sentinel client first
//!   reaches it), settled after about 3.2 s;
//! * [`SentinelSetup::failover`]: promoted after 0.15–0.3 s, named after about 1.2 s, settled
//!   after about 11 s: the sentinels reconfigure the old primary and close its client
//!   connections (`CLIENT KILL TYPE normal`), then list it as a replica flagged
//!   `disconnected` for about 10 s (observed; a replica in that state could not be promoted,
//!   so the harness waits it out);
//! * [`SentinelSetup::restart_node`] of a killed primary: about 10 s until it is a replica of
//!   the new primary (Sentinel waits before reconfiguring a node that calls itself master).
//!
//! Stopped (SIGSTOPped) processes count as down for every wait of the harness.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use super::files::{LOG_FILE, free_port};
use super::node::{
    NodeProcess, Poll, block_on_isolated, info_section, inspection_conn, ping, probe,
};

const REDIS_SERVER: &str = "redis-server";
const REDIS_SENTINEL: &str = "redis-sentinel";

const INSTALL_HELP: &str = "install Redis with `sudo apt-get install -y redis-server \
     redis-sentinel redis-tools` (Debian/Ubuntu) or run ./scripts/test.sh, which installs it";

/// Name under which the sentinels monitor the primary (by default).
pub const DEFAULT_MASTER_NAME: &str = "distlock-primary";

/// Sentinels of a [`SentinelSetup`].
pub const SENTINELS: usize = 3;

/// Sentinels that must agree that the primary is down (`sentinel monitor ... <quorum>`).
pub const QUORUM: usize = 2;

/// Default `sentinel down-after-milliseconds`.
pub const DEFAULT_DOWN_AFTER: Duration = Duration::from_millis(1000);

/// Default `sentinel failover-timeout`.
pub const DEFAULT_FAILOVER_TIMEOUT: Duration = Duration::from_millis(2000);

/// How long a process may take to answer after being spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the replica may take to sync with the primary at start.
const SYNC_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`SentinelSetup::wait_settled`] waits by default.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a promotion (automatic or forced) may take.
const PROMOTION_TIMEOUT: Duration = Duration::from_secs(30);

/// Pause between two polls.
const POLL: Duration = Duration::from_millis(20);

/// How many fresh ports a process tries at start-up before giving up.
const PORT_ATTEMPTS: usize = 5;

/// Lines of each process's log included in failure messages.
pub const LOG_TAIL_LINES: usize = 80;

const SERVER_CONFIG: &str = "redis.conf";
const SENTINEL_CONFIG: &str = "sentinel.conf";

/// Directives the harness writes itself into a data node's config.
const RESERVED_OPTIONS: &[&str] = &[
    "port",
    "bind",
    "dir",
    "logfile",
    "daemonize",
    "replicaof",
    "slaveof",
    "requirepass",
    "masterauth",
    "masteruser",
    "tls-port",
];

// ---------------------------------------------------------------------------
// One process
// ---------------------------------------------------------------------------

/// What a [`RedisNode`] runs, and so how it is started and when it counts as ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// `redis-server <dir>/redis.conf`; ready once it logged "Ready to accept connections"
    /// and answers `PING` on its port.
    Server,
    /// `redis-sentinel <dir>/sentinel.conf`; ready once it logged its "Sentinel ID" and
    /// answers `PING`.
    Sentinel,
    /// `redis-server <dir>/redis.conf` with `port 0` and a `tls-port`: ready once it logged
    /// "Ready to accept connections" and accepts TCP connections on the TLS port (the harness
    /// speaks no TLS itself).
    TlsServer,
    /// `redis-sentinel <dir>/sentinel.conf` with `port 0` and a `tls-port`: ready once it
    /// logged its "Sentinel ID" and accepts TCP connections on the TLS port.
    TlsSentinel,
}

impl NodeKind {
    fn binary(self) -> &'static str {
        match self {
            Self::Server | Self::TlsServer => REDIS_SERVER,
            Self::Sentinel | Self::TlsSentinel => REDIS_SENTINEL,
        }
    }

    fn config_file(self) -> &'static str {
        match self {
            Self::Server | Self::TlsServer => SERVER_CONFIG,
            Self::Sentinel | Self::TlsSentinel => SENTINEL_CONFIG,
        }
    }

    fn ready_line(self) -> &'static str {
        match self {
            Self::Server | Self::TlsServer => "Ready to accept connections",
            Self::Sentinel | Self::TlsSentinel => "Sentinel ID is",
        }
    }
}

/// A role as `ROLE` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeRole {
    Primary,
    /// A replica, with the port of the primary it follows and its link state (`connected`,
    /// `connect`, `connecting`, `sync`, `handshake`).
    Replica {
        primary_port: u16,
        state: String,
    },
    Sentinel,
}

/// One `redis-server` or `redis-sentinel` process with its own temp dir (its `dir`, config
/// file and log). Its port, dir and url never change (a restart reuses them and the config
/// file as the process last rewrote it). Killed and reaped on drop; the dir is removed by
/// the owner ([`SentinelSetup`] or `TlsServer`).
#[derive(Debug)]
pub struct RedisNode {
    kind: NodeKind,
    name: String,
    port: u16,
    /// Its dir (its `dir`, config file and log) and the running process.
    process: NodeProcess,
}

/// The node's process: [`pid`](NodeProcess::pid), [`dir`](NodeProcess::dir) (its temp dir,
/// with its config and log), [`is_running`](NodeProcess::is_running) (a SIGSTOPped one counts),
/// [`is_serving`](NodeProcess::is_serving) (running and not SIGSTOPped),
/// [`log`](NodeProcess::log) and [`log_tail`](NodeProcess::log_tail).
impl std::ops::Deref for RedisNode {
    type Target = NodeProcess;

    fn deref(&self) -> &NodeProcess {
        &self.process
    }
}

impl RedisNode {
    /// Writes `config(port)` to the node's config file in `dir` (created if needed) and
    /// starts the process, retrying with fresh ports if the port was taken; returns once it
    /// is ready (bounded: 10 s per attempt).
    ///
    /// # Panics
    ///
    /// If the binary is missing, the process exits during start-up for another reason than
    /// a port clash, or does not get ready in time (the message has its log).
    pub fn start(
        kind: NodeKind,
        name: &str,
        dir: &Path,
        config: impl Fn(u16) -> String,
    ) -> RedisNode {
        fs::create_dir_all(dir).expect("create a node's dir");
        let mut last_failure = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            let node = RedisNode {
                kind,
                name: name.to_owned(),
                port,
                process: NodeProcess::new(kind.binary(), INSTALL_HELP, dir.to_owned()),
            };
            fs::write(node.config_path(), config(port)).expect("write a node's config file");
            match node.spawn_and_wait() {
                Ok(()) => return node,
                Err(log) => last_failure = log,
            }
        }
        panic!(
            "{name} ({}) could not bind a free port after {PORT_ATTEMPTS} attempts; last \
             log:\n{last_failure}",
            kind.binary()
        );
    }

    /// What the node runs.
    pub fn kind(&self) -> NodeKind {
        self.kind
    }

    /// The name the harness gave it (`primary`, `replica`, `sentinel-0`, `tls`...): stable,
    /// unlike roles.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Client port (the TLS port of a TLS server).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// `redis://127.0.0.1:PORT/` (`rediss://` for a TLS server).
    pub fn url(&self) -> String {
        match self.kind {
            NodeKind::TlsServer | NodeKind::TlsSentinel => format!("rediss://{}/", self.addr()),
            _ => format!("redis://{}/", self.addr()),
        }
    }

    /// Its config file, as the process last rewrote it.
    pub fn config_path(&self) -> PathBuf {
        self.dir().join(self.kind.config_file())
    }

    /// A plain `redis::Client` for this node (no connection is made yet).
    ///
    /// # Panics
    ///
    /// On a TLS server: build its client with the certificates (see `tls.rs`).
    pub fn client(&self) -> redis::Client {
        assert!(
            !matches!(self.kind, NodeKind::TlsServer | NodeKind::TlsSentinel),
            "{} speaks TLS only: build a client with its certificates (tests/support/tls.rs)",
            self.name
        );
        redis::Client::open(self.url()).expect("harness url must be a valid redis url")
    }

    /// A fresh multiplexed connection to this node, for assertions and fault injection (5 s
    /// connect and 15 s response timeouts). Open it BEFORE freezing the node if needed while
    /// it is frozen (the handshake needs an answer). A connection is bound to the runtime it
    /// was made on.
    ///
    /// # Panics
    ///
    /// If the connection fails (the message has the node's log), or on a TLS server.
    pub async fn conn(&self) -> MultiplexedConnection {
        inspection_conn(&self.client()).await.unwrap_or_else(|e| {
            panic!(
                "cannot connect to {} ({}): {e}\nlog tail:\n{}",
                self.name,
                self.addr(),
                self.log_tail(LOG_TAIL_LINES)
            )
        })
    }

    /// `ROLE` of this node.
    ///
    /// # Panics
    ///
    /// If it does not answer or the reply cannot be read.
    pub async fn role(&self) -> NodeRole {
        match self.try_role().await {
            Ok(role) => role,
            Err(e) => panic!("ROLE on {} ({}): {e}", self.name, self.addr()),
        }
    }

    /// `INFO <section>` of this node as a field map.
    ///
    /// # Panics
    ///
    /// If it does not answer.
    pub async fn info(&self, section: &str) -> HashMap<String, String> {
        match info_section(self.addr(), section).await {
            Ok(info) => info,
            Err(e) => panic!("{} ({}): {e}", self.name, self.addr()),
        }
    }

    /// SIGKILLs and reaps the process (no-op if not running). Its dir, config and log stay
    /// for [`restart`](Self::restart).
    pub fn kill(&self) {
        self.process.kill();
    }

    /// Freezes the process with SIGSTOP: it keeps its sockets (connects still complete in the
    /// kernel backlog) but answers nothing, neither clients nor replication nor sentinels,
    /// until [`cont_process`](Self::cont_process).
    ///
    /// # Panics
    ///
    /// If the process is not running.
    pub fn stop_process(&self) {
        self.process.stop(&self.name);
    }

    /// Resumes a process frozen by [`stop_process`](Self::stop_process) (harmless if it is
    /// not stopped).
    ///
    /// # Panics
    ///
    /// If the process is not running.
    pub fn cont_process(&self) {
        self.process.cont(&self.name);
    }

    /// SIGSTOPs the process and returns a guard that SIGCONTs it when dropped (also on
    /// panic).
    pub fn stop_guard(&self) -> NodeStoppedGuard<'_> {
        self.stop_process();
        NodeStoppedGuard { node: self }
    }

    /// Starts the process again on the SAME port with its config file as it last rewrote it,
    /// killing the current one first if it still runs, and waits (blocking, bounded by 10 s)
    /// until it is ready. A data node comes back empty.
    ///
    /// # Panics
    ///
    /// If it cannot come back on its port in time.
    pub fn restart(&self) {
        self.kill();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match self.spawn_and_wait() {
                Ok(()) => return,
                Err(log) => {
                    assert!(
                        Instant::now() < deadline,
                        "{} could not re-bind port {} on restart:\n{log}",
                        self.name,
                        self.port
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    /// Spawns the process and waits until it is ready. `Err(log)` if the port was taken (the
    /// child is reaped); panics on any other failure.
    fn spawn_and_wait(&self) -> Result<(), String> {
        let log_offset = self.spawn();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match self.poll_ready(log_offset) {
                Poll::Ready => return Ok(()),
                Poll::NotYet if Instant::now() < deadline => std::thread::sleep(POLL / 2),
                Poll::NotYet => self.start_failure(&format!("not ready within {READY_TIMEOUT:?}")),
                Poll::Failed(what) => self.start_failure(&what),
                Poll::PortInUse(log) => return Err(log),
            }
        }
    }

    /// Spawns the process (not waiting for it) and returns the log offset at which this run's
    /// output starts.
    fn spawn(&self) -> u64 {
        // Absolute paths in the config.
        self.process.spawn([self.config_path()])
    }

    /// One readiness check of a freshly spawned process.
    fn poll_ready(&self, log_offset: u64) -> Poll {
        self.process
            .poll_ready(log_offset, self.kind.ready_line(), || match self.kind {
                NodeKind::TlsServer | NodeKind::TlsSentinel => {
                    TcpStream::connect_timeout(&self.addr(), Duration::from_millis(500)).is_ok()
                }
                NodeKind::Server | NodeKind::Sentinel => ping(self.addr()),
            })
    }

    fn start_failure(&self, what: &str) -> ! {
        let log = self.log();
        let config = fs::read_to_string(self.config_path()).unwrap_or_default();
        self.kill();
        panic!(
            "{} ({} on port {}) failed to start: {what}\nconfig:\n{config}\nlog:\n{log}",
            self.name,
            self.kind.binary(),
            self.port
        );
    }

    async fn try_role(&self) -> Result<NodeRole, String> {
        let reply: redis::Value = probe(self.addr(), &redis::cmd("ROLE")).await?;
        parse_role(&reply)
    }

    /// A header line for failure messages.
    fn header(&self) -> String {
        let state = match (self.is_running(), self.is_serving()) {
            (false, _) => "killed",
            (true, false) => "SIGSTOPped",
            (true, true) => "running",
        };
        format!(
            "{} ({}) 127.0.0.1:{} pid {} {state}",
            self.name,
            self.kind.binary(),
            self.port,
            self.pid()
        )
    }
}

/// Keeps a node SIGSTOPped; SIGCONTs it on drop. See [`RedisNode::stop_guard`].
#[derive(Debug)]
#[must_use = "the node is resumed as soon as the guard is dropped"]
pub struct NodeStoppedGuard<'a> {
    node: &'a RedisNode,
}

impl NodeStoppedGuard<'_> {
    /// The frozen node.
    pub fn node(&self) -> &RedisNode {
        self.node
    }
}

impl Drop for NodeStoppedGuard<'_> {
    fn drop(&mut self) {
        if self.node.is_running() {
            self.node.cont_process();
        }
    }
}

fn parse_role(reply: &redis::Value) -> Result<NodeRole, String> {
    use redis::Value;
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let bad = || format!("unexpected ROLE reply {reply:?}");
    let Value::Array(items) = reply else {
        return Err(bad());
    };
    match items.first().and_then(text).as_deref() {
        Some("master") => Ok(NodeRole::Primary),
        Some("sentinel") => Ok(NodeRole::Sentinel),
        Some("slave") => {
            let primary_port = match items.get(2) {
                Some(Value::Int(p)) => u16::try_from(*p).map_err(|_| bad())?,
                _ => return Err(bad()),
            };
            let state = items.get(3).and_then(text).ok_or_else(bad)?;
            Ok(NodeRole::Replica {
                primary_port,
                state,
            })
        }
        _ => Err(bad()),
    }
}

// ---------------------------------------------------------------------------
// Builder
// ---------------------------------------------------------------------------

/// Options of a [`SentinelSetup`]; see the module docs for the defaults.
#[derive(Debug, Clone)]
#[must_use]
pub struct SentinelSetupBuilder {
    master_name: String,
    down_after: Duration,
    failover_timeout: Duration,
    data_config: Vec<(String, Vec<String>)>,
}

impl Default for SentinelSetupBuilder {
    fn default() -> Self {
        Self {
            master_name: DEFAULT_MASTER_NAME.to_owned(),
            down_after: DEFAULT_DOWN_AFTER,
            failover_timeout: DEFAULT_FAILOVER_TIMEOUT,
            data_config: Vec::new(),
        }
    }
}

impl SentinelSetupBuilder {
    /// The name the sentinels monitor the primary under (default
    /// [`DEFAULT_MASTER_NAME`]).
    pub fn master_name(mut self, name: &str) -> Self {
        assert!(
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)),
            "master name {name:?}: use letters, digits, '-', '_', '.'"
        );
        self.master_name = name.to_owned();
        self
    }

    /// `sentinel down-after-milliseconds` (default 1 s): how long the primary must be silent
    /// before a sentinel thinks it is down.
    pub fn down_after(mut self, after: Duration) -> Self {
        self.down_after = after;
        self
    }

    /// `sentinel failover-timeout` (default 2 s).
    pub fn failover_timeout(mut self, timeout: Duration) -> Self {
        self.failover_timeout = timeout;
        self
    }

    /// Adds a directive to both data nodes' config, e.g. `.config("user", &["locker", "on",
    /// ">pw", "~*", "+@all"])` or `.config("maxmemory", &["10mb"])`. Each value is quoted
    /// as one argument.
    ///
    /// # Panics
    ///
    /// If `name` is empty or a directive the harness controls (ports, dirs, replication,
    /// passwords: the sentinels and the replica connect without credentials).
    pub fn config(mut self, name: &str, values: &[&str]) -> Self {
        let name = super::server::directive_name(name, RESERVED_OPTIONS, "sentinel harness");
        self.data_config.push((
            name.to_owned(),
            values.iter().map(|v| (*v).to_owned()).collect(),
        ));
        self
    }

    /// Declares ACL user `name` on both data nodes with the library's rules for key prefix
    /// `prefix` plus what a client behind Sentinel needs: [`library_acl_rules`] and
    /// [`LIBRARY_ACL_SENTINEL_RULES`]. Connect as it with the client's primary credentials
    /// (the sentinels need none).
    ///
    /// [`library_acl_rules`]: super::server::library_acl_rules
    /// [`LIBRARY_ACL_SENTINEL_RULES`]: super::server::LIBRARY_ACL_SENTINEL_RULES
    pub fn library_user(self, name: &str, password: &str, prefix: &str) -> Self {
        let mut values = vec![name.to_owned()];
        values.extend(super::server::library_acl_rules(password, prefix));
        values.extend(
            super::server::LIBRARY_ACL_SENTINEL_RULES
                .iter()
                .map(|r| (*r).to_owned()),
        );
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        self.config("user", &values)
    }

    /// Starts the topology; see [`SentinelSetup::start`].
    pub fn start(self) -> SentinelSetup {
        SentinelSetup::start_with(self)
    }

    fn data_config(&self, port: u16, dir: &Path, primary: Option<u16>) -> String {
        let mut text = String::new();
        let dir = dir.to_str().expect("temp dir path is UTF-8");
        let _ = writeln!(text, "port {port}");
        text.push_str("bind 127.0.0.1\ndaemonize no\n");
        let _ = writeln!(text, "dir {}", quote(dir));
        let _ = writeln!(text, "logfile {}", quote(&format!("{dir}/{LOG_FILE}")));
        text.push_str("save \"\"\nappendonly no\n");
        text.push_str(super::server::debug_command_config());
        text.push_str("repl-diskless-sync yes\nrepl-diskless-sync-delay 0\n");
        if let Some(primary) = primary {
            let _ = writeln!(text, "replicaof 127.0.0.1 {primary}");
        }
        for (name, values) in &self.data_config {
            text.push_str(name);
            for v in values {
                text.push(' ');
                text.push_str(&quote(v));
            }
            text.push('\n');
        }
        text
    }

    fn sentinel_config(&self, port: u16, dir: &Path, primary: u16) -> String {
        let dir = dir.to_str().expect("temp dir path is UTF-8");
        let name = &self.master_name;
        format!(
            "port {port}\n\
             bind 127.0.0.1\n\
             daemonize no\n\
             dir {}\n\
             logfile {}\n\
             sentinel resolve-hostnames no\n\
             sentinel announce-hostnames no\n\
             sentinel announce-ip 127.0.0.1\n\
             sentinel announce-port {port}\n\
             sentinel monitor {name} 127.0.0.1 {primary} {QUORUM}\n\
             sentinel down-after-milliseconds {name} {}\n\
             sentinel failover-timeout {name} {}\n\
             sentinel parallel-syncs {name} 1\n",
            quote(dir),
            quote(&format!("{dir}/{LOG_FILE}")),
            self.down_after.as_millis(),
            self.failover_timeout.as_millis(),
        )
    }
}

/// A config-file argument in double quotes (Redis's `sdssplitargs` reads `\\` and `\"`).
fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            _ => out.push(c),
        }
    }
    out.push('"');
    out
}

// ---------------------------------------------------------------------------
// The topology
// ---------------------------------------------------------------------------

/// Outcome of [`SentinelSetup::kill_primary`] / [`SentinelSetup::failover`].
#[derive(Debug, Clone, Copy)]
pub struct Promotion<'a> {
    pub old_primary: &'a RedisNode,
    pub new_primary: &'a RedisNode,
    /// From the SIGKILL / `SENTINEL FAILOVER` until the replica called itself master
    /// (`ROLE`).
    pub promoted_after: Duration,
    /// ... until every live sentinel named it in `SENTINEL get-master-addr-by-name` (what a
    /// client asking the sentinels sees).
    pub announced_after: Duration,
    /// ... until the topology had settled (every sentinel done with the failover, `SENTINEL
    /// MASTERS` flags plain `master` again, which redis-rs's sentinel client waits for; the
    /// other live data node a replica of the new primary with its link up).
    pub settled_after: Duration,
}

/// A running primary + replica + 3 sentinels on loopback; processes killed and temp dirs
/// removed on drop. See the module docs.
#[derive(Debug)]
pub struct SentinelSetup {
    /// `[0]` started as the primary, `[1]` as its replica; roles change with failovers.
    nodes: Vec<RedisNode>,
    sentinels: Vec<RedisNode>,
    master_name: String,
    root: PathBuf,
    startup: Duration,
}

impl SentinelSetup {
    /// Starts a fresh topology with the default settings and returns once it has settled
    /// (bounded: 10 s per process to start, 10 s for the replica's first sync, 30 s to
    /// settle).
    ///
    /// Callable from sync code and from inside a tokio runtime (it blocks the calling thread;
    /// the waiting runs on a private thread).
    ///
    /// # Panics
    ///
    /// If `redis-server` or `redis-sentinel` is missing, a process does not start, or the
    /// topology does not settle in time; the message carries the reason and every process's
    /// log. Everything started is killed and removed before the panic propagates.
    pub fn start() -> SentinelSetup {
        Self::builder().start()
    }

    /// A builder for non-default settings.
    pub fn builder() -> SentinelSetupBuilder {
        SentinelSetupBuilder::default()
    }

    fn start_with(builder: SentinelSetupBuilder) -> SentinelSetup {
        super::server::require_supported_version();
        let began = Instant::now();
        let mut setup = SentinelSetup {
            nodes: Vec::with_capacity(2),
            sentinels: Vec::with_capacity(SENTINELS),
            master_name: builder.master_name.clone(),
            root: make_temp_dir_for("sentinel"),
            startup: Duration::ZERO,
        };
        let dir = setup.root.join("primary");
        let primary = RedisNode::start(NodeKind::Server, "primary", &dir, |port| {
            builder.data_config(port, &dir, None)
        });
        let primary_port = primary.port;
        setup.nodes.push(primary);
        let dir = setup.root.join("replica");
        let replica = RedisNode::start(NodeKind::Server, "replica", &dir, |port| {
            builder.data_config(port, &dir, Some(primary_port))
        });
        setup.nodes.push(replica);
        // The sentinels discover replicas through the primary's INFO, which they read at once
        // when they connect and then only every 10 s: start them once the replica is listed.
        if let Err(reason) = block_on_isolated(setup.wait_first_sync()) {
            panic!(
                "the replica did not sync with the primary within {SYNC_TIMEOUT:?}: {reason}\n{}",
                block_on_isolated(setup.describe())
            );
        }
        for i in 0..SENTINELS {
            let dir = setup.root.join(format!("sentinel-{i}"));
            let sentinel =
                RedisNode::start(NodeKind::Sentinel, &format!("sentinel-{i}"), &dir, |port| {
                    builder.sentinel_config(port, &dir, primary_port)
                });
            setup.sentinels.push(sentinel);
        }
        let expected = setup.nodes[0].addr();
        let settled = block_on_isolated(setup.try_wait_settled(SETTLE_TIMEOUT, |primary| {
            if primary == expected {
                Ok(())
            } else {
                Err(format!(
                    "the sentinels name {primary}, not the primary {expected}"
                ))
            }
        }));
        if let Err(reason) = settled {
            panic!(
                "the Sentinel topology did not settle within {SETTLE_TIMEOUT:?}: {reason}\n{}",
                block_on_isolated(setup.describe())
            );
        }
        setup.startup = began.elapsed();
        setup
    }

    /// The name the sentinels monitor the primary under.
    pub fn master_name(&self) -> &str {
        &self.master_name
    }

    /// `redis://127.0.0.1:P/` of every sentinel: what a client connecting through the
    /// sentinels is given, e.g.
    /// `redis::sentinel::SentinelClient::build(setup.sentinel_urls(), setup.master_name(),
    /// None, SentinelServerType::Master)`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisNode::url).collect()
    }

    /// `127.0.0.1:P` of every sentinel.
    pub fn sentinel_addrs(&self) -> Vec<SocketAddr> {
        self.sentinels.iter().map(RedisNode::addr).collect()
    }

    /// The three sentinels.
    pub fn sentinels(&self) -> &[RedisNode] {
        &self.sentinels
    }

    /// Both data nodes in a stable order: `[0]` started as the primary, `[1]` as the replica
    /// (roles change: see [`primary`](Self::primary)).
    pub fn nodes(&self) -> &[RedisNode] {
        &self.nodes
    }

    /// The data node listening on `addr`.
    ///
    /// # Panics
    ///
    /// If there is none.
    pub fn node_at(&self, addr: SocketAddr) -> &RedisNode {
        self.nodes
            .iter()
            .find(|n| n.addr() == addr)
            .unwrap_or_else(|| panic!("no data node at {addr} in this setup"))
    }

    /// How long [`start`](Self::start) took.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// The temp dir holding every process's dir.
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// Pids of every running process (data nodes and sentinels).
    pub fn pids(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .chain(&self.sentinels)
            .filter(|n| n.is_running())
            .map(|node| node.pid())
            .collect()
    }

    /// The primary's address as the sentinels report it (`SENTINEL get-master-addr-by-name`
    /// on the first live sentinel that answers). During a failover this is the promoted
    /// replica as soon as it is promoted.
    ///
    /// # Panics
    ///
    /// If no sentinel answers.
    pub async fn primary_addr(&self) -> SocketAddr {
        let mut errors = Vec::new();
        for sentinel in self.sentinels.iter().filter(|s| s.is_serving()) {
            match master_addr(sentinel, &self.master_name).await {
                Ok(addr) => return addr,
                Err(e) => errors.push(format!("{}: {e}", sentinel.name)),
            }
        }
        panic!(
            "no sentinel reports the primary's address: {errors:?}\n{}",
            self.describe().await
        );
    }

    /// What each live sentinel answers to `SENTINEL get-master-addr-by-name`, in sentinel
    /// order.
    pub async fn primary_addrs(&self) -> Vec<(SocketAddr, Result<SocketAddr, String>)> {
        let mut all = Vec::new();
        for sentinel in self.sentinels.iter().filter(|s| s.is_serving()) {
            all.push((
                sentinel.addr(),
                master_addr(sentinel, &self.master_name).await,
            ));
        }
        all
    }

    /// The data node the sentinels name as the primary.
    ///
    /// # Panics
    ///
    /// If no sentinel answers, or they name no node of this setup.
    pub async fn primary(&self) -> &RedisNode {
        self.node_at(self.primary_addr().await)
    }

    /// The data node the sentinels do not name as the primary (running or not).
    pub async fn replica(&self) -> &RedisNode {
        let primary = self.primary_addr().await;
        self.nodes
            .iter()
            .find(|n| n.addr() != primary)
            .expect("two data nodes")
    }

    /// `redis://127.0.0.1:P/` of the current primary (see [`primary`](Self::primary)).
    pub async fn primary_url(&self) -> String {
        self.primary().await.url()
    }

    /// SIGSTOPs the current replica (see [`replica`](Self::replica)) and returns a guard that
    /// resumes it on drop: the primary keeps serving, but `WAIT 1 <ms>` on it returns 0 after
    /// `<ms>`. The sentinels flag the replica `s_down` after `down-after`; it is not promoted
    /// meanwhile (the primary is up).
    ///
    /// # Panics
    ///
    /// If the replica is not running.
    pub async fn freeze_replica(&self) -> NodeStoppedGuard<'_> {
        self.replica().await.stop_guard()
    }

    /// Waits (bounded by 10 s) until the replica has received everything the primary had
    /// written when this was called (`slave_repl_offset` ≥ `master_repl_offset`). No-op when
    /// the replica is not serving.
    ///
    /// # Panics
    ///
    /// On timeout.
    pub async fn wait_replication_synced(&self) {
        let primary = self.primary().await;
        let replica = self.replica().await;
        if !replica.is_serving() {
            return;
        }
        let target: u64 = primary
            .info("replication")
            .await
            .get("master_repl_offset")
            .and_then(|v| v.parse().ok())
            .expect("master_repl_offset in INFO replication");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let offset = info_section(replica.addr(), "replication")
                .await
                .ok()
                .and_then(|r| r.get("slave_repl_offset")?.parse::<u64>().ok());
            if offset.is_some_and(|o| o >= target) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not reach offset {target} of {} (at {offset:?})\n{}",
                replica.name,
                primary.name,
                self.describe().await
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// SIGKILLs the current primary and waits for the sentinels' automatic failover: the
    /// replica promoted, announced by every live sentinel, and the topology settled without
    /// the dead node. The dead node stays down (its dir is kept):
    /// [`restart_node`](Self::restart_node) brings it back as a replica. Writes the replica
    /// had not received are lost, as in production; see
    /// [`wait_replication_synced`](Self::wait_replication_synced).
    ///
    /// # Panics
    ///
    /// If the replica is not serving or linked, or the failover does not complete within
    /// 30 s (the message has every process's state and log).
    pub async fn kill_primary(&self) -> Promotion<'_> {
        let (old, candidate) = self.failover_pair().await;
        let began = Instant::now();
        old.kill();
        self.finish_promotion(old, candidate, began, "SIGKILL of the primary")
            .await
    }

    /// `SENTINEL FAILOVER <name>`: the sentinels promote the replica without waiting for the
    /// primary to fail and turn the old primary into its replica. Sentinel does not stop
    /// writes first, so the harness waits until the replica has everything the primary had
    /// before sending it (writes that race the promotion may still be lost, as in
    /// production). Waits until the topology has settled with the roles swapped.
    ///
    /// # Panics
    ///
    /// If the replica is not serving or linked, or the failover does not complete within
    /// 30 s.
    pub async fn failover(&self) -> Promotion<'_> {
        let (old, candidate) = self.failover_pair().await;
        self.wait_replication_synced().await;
        let began = Instant::now();
        let deadline = began + PROMOTION_TIMEOUT;
        // A sentinel answers NOGOODSLAVE while its view of the replica is stale: ask again.
        'sent: loop {
            let mut errors = Vec::new();
            for sentinel in self.sentinels.iter().filter(|s| s.is_serving()) {
                let cmd = redis::cmd("SENTINEL")
                    .arg("FAILOVER")
                    .arg(&self.master_name)
                    .clone();
                match probe::<String>(sentinel.addr(), &cmd).await {
                    Ok(_) => break 'sent,
                    Err(e) => errors.push(format!("{}: {e}", sentinel.name)),
                }
            }
            if Instant::now() >= deadline {
                panic!(
                    "SENTINEL FAILOVER {} kept failing for {PROMOTION_TIMEOUT:?}: {errors:?}\n{}",
                    self.master_name,
                    self.describe().await
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.finish_promotion(old, candidate, began, "SENTINEL FAILOVER")
            .await
    }

    /// Restarts `node` (SIGKILL if it runs, then the same port and config file; a data node
    /// comes back empty) and waits until the topology has settled with it (a former primary
    /// is turned into a replica by the sentinels, about 8 s after it is back). Returns how long
    /// the settling took after the process was back.
    ///
    /// # Panics
    ///
    /// If `node` is not part of this setup, or the topology does not settle within 30 s.
    pub async fn restart_node(&self, node: &RedisNode) -> Duration {
        assert!(
            self.nodes
                .iter()
                .chain(&self.sentinels)
                .any(|n| std::ptr::eq(n, node)),
            "{} is not a process of this setup",
            node.name
        );
        node.restart();
        let began = Instant::now();
        self.wait_settled().await;
        began.elapsed()
    }

    /// Waits (bounded by 30 s) until the topology has settled: every live sentinel names the
    /// same primary (`SENTINEL get-master-addr-by-name`), a serving data node that calls
    /// itself master; every live sentinel's `SENTINEL MASTER` flags are plain `master` (no
    /// `s_down`, `o_down`, failover in progress); it knows every other serving data node as
    /// a replica (flagged `slave`) and every other live sentinel (flagged `sentinel`; for
    /// both, none of `s_down`, `o_down`, `disconnected` or a reconfiguration in progress);
    /// every other serving data node says (`INFO replication`) that it replicates the primary
    /// with its link `up`. (What a sentinel reports about a replica's link comes from an
    /// `INFO` it refreshes only every 10 s, so it is not waited for.) Stopped (SIGSTOPped)
    /// processes count as down.
    ///
    /// # Panics
    ///
    /// If it does not settle in time (message: the last reason, every view and every log).
    pub async fn wait_settled(&self) {
        self.wait_settled_within(SETTLE_TIMEOUT).await;
    }

    /// [`wait_settled`](Self::wait_settled) with another bound.
    pub async fn wait_settled_within(&self, timeout: Duration) {
        if let Err(reason) = self.try_wait_settled(timeout, |_| Ok(())).await {
            panic!(
                "the Sentinel topology did not settle within {timeout:?}: {reason}\n{}",
                self.describe().await
            );
        }
    }

    /// The last [`LOG_TAIL_LINES`] lines of every process's log, with a header per process.
    /// Never panics.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for node in self.nodes.iter().chain(&self.sentinels) {
            let _ = writeln!(
                out,
                "=== {}: last {LOG_TAIL_LINES} log lines ===",
                node.header()
            );
            out.push_str(&node.log_tail(LOG_TAIL_LINES));
            out.push('\n');
        }
        out
    }

    /// Every live process's view (sentinels: the primary they name, its flags, the replicas
    /// and sentinels they know; data nodes: `ROLE`) followed by [`logs`](Self::logs), for
    /// failure messages. Never panics.
    pub async fn describe(&self) -> String {
        let mut out = String::from("--- sentinel views ---\n");
        for sentinel in &self.sentinels {
            let _ = writeln!(out, "{}", sentinel.header());
            if !sentinel.is_serving() {
                continue;
            }
            let name = &self.master_name;
            let addr = master_addr(sentinel, name).await;
            let master = sentinel_map(sentinel, "MASTER", name).await.map(|m| {
                [
                    "flags",
                    "num-slaves",
                    "num-other-sentinels",
                    "failover-state",
                ]
                .iter()
                .filter_map(|k| m.get(*k).map(|v| format!("{k}={v}")))
                .collect::<Vec<_>>()
                .join(" ")
            });
            let replicas = sentinel_maps(sentinel, "REPLICAS", name)
                .await
                .map(|list| summarize(&list, &["port", "flags", "master-link-status"]));
            let sentinels = sentinel_maps(sentinel, "SENTINELS", name)
                .await
                .map(|list| summarize(&list, &["port", "flags"]));
            let _ = writeln!(
                out,
                "  primary {addr:?}\n  master {master:?}\n  replicas {replicas:?}\n  \
                 sentinels {sentinels:?}"
            );
        }
        out.push_str("--- data nodes ---\n");
        for node in &self.nodes {
            let role = if node.is_serving() {
                format!("{:?}", node.try_role().await)
            } else {
                "-".into()
            };
            let _ = writeln!(out, "{}: ROLE {role}", node.header());
        }
        out.push_str("--- logs ---\n");
        out.push_str(&self.logs());
        out
    }

    /// The serving primary (as the sentinels name it) and the data node to promote, which
    /// must be serving and linked to it.
    async fn failover_pair(&self) -> (&RedisNode, &RedisNode) {
        let old = self.primary().await;
        assert!(old.is_serving(), "the primary {} is not serving", old.name);
        let candidate = self
            .nodes
            .iter()
            .find(|n| !std::ptr::eq(*n, old))
            .expect("two data nodes");
        let linked = candidate.is_serving()
            && matches!(
                candidate.try_role().await,
                Ok(NodeRole::Replica { primary_port, ref state })
                    if primary_port == old.port && state == "connected"
            );
        if !linked {
            panic!(
                "{} is not a linked replica of {}: nothing to promote\n{}",
                candidate.name,
                old.name,
                self.describe().await
            );
        }
        (old, candidate)
    }

    /// Waits for `candidate`'s promotion, its announcement by every live sentinel, and the
    /// settled topology.
    async fn finish_promotion<'a>(
        &'a self,
        old: &'a RedisNode,
        candidate: &'a RedisNode,
        began: Instant,
        what: &str,
    ) -> Promotion<'a> {
        let deadline = began + PROMOTION_TIMEOUT;
        loop {
            if matches!(candidate.try_role().await, Ok(NodeRole::Primary)) {
                break;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{} was not promoted within {PROMOTION_TIMEOUT:?} after the {what}\n{}",
                    candidate.name,
                    self.describe().await
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let promoted_after = began.elapsed();
        loop {
            let addrs = self.primary_addrs().await;
            if !addrs.is_empty()
                && addrs
                    .iter()
                    .all(|(_, a)| a.as_ref().is_ok_and(|a| *a == candidate.addr()))
            {
                break;
            }
            if Instant::now() >= deadline {
                panic!(
                    "the sentinels did not all name {} within {PROMOTION_TIMEOUT:?} after the \
                     {what}: {addrs:?}\n{}",
                    candidate.name,
                    self.describe().await
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let announced_after = began.elapsed();
        let left = deadline.saturating_duration_since(Instant::now()) + SETTLE_TIMEOUT;
        let want = candidate.addr();
        let settled = self
            .try_wait_settled(left, |primary| {
                if primary == want {
                    Ok(())
                } else {
                    Err(format!("the sentinels name {primary}, not {want}"))
                }
            })
            .await;
        if let Err(reason) = settled {
            panic!(
                "the topology did not settle after the {what}: {reason}\n{}",
                self.describe().await
            );
        }
        Promotion {
            old_primary: old,
            new_primary: candidate,
            promoted_after,
            announced_after,
            settled_after: began.elapsed(),
        }
    }

    /// Waits (bounded by 10 s) for the replica's first sync: it says `master_link_status:up`
    /// and the primary lists it as an online replica.
    async fn wait_first_sync(&self) -> Result<(), String> {
        let (primary, replica) = (&self.nodes[0], &self.nodes[1]);
        let deadline = Instant::now() + SYNC_TIMEOUT;
        loop {
            let reason = match (
                info_section(replica.addr(), "replication").await,
                info_section(primary.addr(), "replication").await,
            ) {
                (Ok(r), Ok(p)) => {
                    let link = r.get("master_link_status").map(String::as_str);
                    let listed = p.get("slave0").is_some_and(|v| {
                        v.contains(&format!("port={}", replica.port)) && v.contains("state=online")
                    });
                    if link == Some("up") && listed {
                        return Ok(());
                    }
                    format!(
                        "replica link {link:?}, primary's slave0 {:?}",
                        p.get("slave0")
                    )
                }
                (Err(e), _) | (_, Err(e)) => e,
            };
            if Instant::now() >= deadline {
                return Err(reason);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Polls [`check_settled`](Self::check_settled) plus `extra` (on the agreed primary)
    /// until both pass or `timeout`; `Err(last reason)`.
    async fn try_wait_settled(
        &self,
        timeout: Duration,
        extra: impl Fn(SocketAddr) -> Result<(), String>,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let reason = match self.check_settled().await {
                Ok(primary) => match extra(primary) {
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

    /// One check of the settled condition; `Ok(agreed primary)` or why not.
    async fn check_settled(&self) -> Result<SocketAddr, String> {
        let live: Vec<&RedisNode> = self.sentinels.iter().filter(|s| s.is_serving()).collect();
        if live.is_empty() {
            return Err("no sentinel is running".into());
        }
        let name = &self.master_name;
        let mut agreed: Option<SocketAddr> = None;
        for sentinel in &live {
            let addr = master_addr(sentinel, name)
                .await
                .map_err(|e| format!("{}: {e}", sentinel.name))?;
            match agreed {
                None => agreed = Some(addr),
                Some(a) if a == addr => {}
                Some(a) => {
                    return Err(format!(
                        "{} names {addr}, {} names {a}",
                        sentinel.name, live[0].name
                    ));
                }
            }
        }
        let primary_addr = agreed.expect("at least one live sentinel");
        let Some(primary) = self.nodes.iter().find(|n| n.addr() == primary_addr) else {
            return Err(format!(
                "the sentinels name {primary_addr}, not a node of ours"
            ));
        };
        if !primary.is_serving() {
            return Err(format!(
                "the sentinels name {}, which is down",
                primary.name
            ));
        }
        match primary.try_role().await {
            Ok(NodeRole::Primary) => {}
            other => {
                return Err(format!(
                    "{} (named primary) has ROLE {other:?}",
                    primary.name
                ));
            }
        }
        let replicas: Vec<&RedisNode> = self
            .nodes
            .iter()
            .filter(|n| n.is_serving() && n.addr() != primary_addr)
            .collect();
        for sentinel in &live {
            let at = &sentinel.name;
            let master = sentinel_map(sentinel, "MASTER", name)
                .await
                .map_err(|e| format!("{at}: {e}"))?;
            let flags = master.get("flags").map_or("", String::as_str);
            if flags != "master" {
                return Err(format!("{at}: the primary's flags are {flags:?}"));
            }
            let known = sentinel_maps(sentinel, "REPLICAS", name)
                .await
                .map_err(|e| format!("{at}: {e}"))?;
            for replica in &replicas {
                let port = replica.port.to_string();
                let entry = known
                    .iter()
                    .find(|m| m.get("port") == Some(&port))
                    .ok_or_else(|| format!("{at} does not know {} as a replica", replica.name))?;
                let flags = entry.get("flags").map_or("", String::as_str);
                if !healthy(flags, "slave") {
                    return Err(format!(
                        "{at} sees replica {} with flags {flags:?}",
                        replica.name
                    ));
                }
            }
            let others = sentinel_maps(sentinel, "SENTINELS", name)
                .await
                .map_err(|e| format!("{at}: {e}"))?;
            for other in live.iter().filter(|o| !std::ptr::eq(**o, *sentinel)) {
                let port = other.port.to_string();
                let flags = others
                    .iter()
                    .find(|m| m.get("port") == Some(&port))
                    .and_then(|m| m.get("flags"))
                    .map(String::as_str);
                if !flags.is_some_and(|f| healthy(f, "sentinel")) {
                    return Err(format!("{at} sees {} with flags {flags:?}", other.name));
                }
            }
        }
        for replica in &replicas {
            let repl = info_section(replica.addr(), "replication").await?;
            let get = |k: &str| repl.get(k).map(String::as_str);
            let port = primary.port.to_string();
            if get("role") != Some("slave")
                || get("master_port") != Some(port.as_str())
                || get("master_link_status") != Some("up")
            {
                return Err(format!(
                    "{}: role {:?}, master_port {:?} (want {port}), master_link_status {:?}",
                    replica.name,
                    get("role"),
                    get("master_port"),
                    get("master_link_status")
                ));
            }
        }
        Ok(primary_addr)
    }
}

impl Drop for SentinelSetup {
    fn drop(&mut self) {
        for node in self.nodes.iter().chain(&self.sentinels) {
            node.kill();
        }
        let _ = fs::remove_dir_all(&self.root);
    }
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Whether a sentinel's `flags` field says `kind` and nothing bad: not down, disconnected or
/// being reconfigured. (A sentinel keeps `master_down` on its peers for a while after a
/// failover: a stale note about the old primary, not a fault.)
fn healthy(flags: &str, kind: &str) -> bool {
    let flags: Vec<&str> = flags.split(',').collect();
    flags.contains(&kind)
        && !flags.iter().any(|f| {
            matches!(
                *f,
                "s_down" | "o_down" | "disconnected" | "promoted" | "reconf_sent" | "reconf_inprog"
            )
        })
}

/// `SENTINEL get-master-addr-by-name <name>` on `sentinel`.
async fn master_addr(sentinel: &RedisNode, name: &str) -> Result<SocketAddr, String> {
    let cmd = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(name)
        .clone();
    let reply: Option<(String, u16)> = probe(sentinel.addr(), &cmd).await?;
    let (ip, port) = reply.ok_or_else(|| format!("does not know master {name:?}"))?;
    let ip: Ipv4Addr = ip
        .parse()
        .map_err(|_| format!("reports a non-IPv4 address {ip:?}"))?;
    Ok(SocketAddr::V4(SocketAddrV4::new(ip, port)))
}

/// `SENTINEL <what> <name>` answered with one field map (`MASTER`).
async fn sentinel_map(
    sentinel: &RedisNode,
    what: &str,
    name: &str,
) -> Result<HashMap<String, String>, String> {
    let cmd = redis::cmd("SENTINEL").arg(what).arg(name).clone();
    probe(sentinel.addr(), &cmd).await
}

/// `SENTINEL <what> <name>` answered with a list of field maps (`REPLICAS`, `SENTINELS`).
async fn sentinel_maps(
    sentinel: &RedisNode,
    what: &str,
    name: &str,
) -> Result<Vec<HashMap<String, String>>, String> {
    let cmd = redis::cmd("SENTINEL").arg(what).arg(name).clone();
    probe(sentinel.addr(), &cmd).await
}

fn summarize(list: &[HashMap<String, String>], fields: &[&str]) -> Vec<String> {
    list.iter()
        .map(|m| {
            fields
                .iter()
                .map(|f| format!("{f}={}", m.get(*f).map_or("?", String::as_str)))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect()
}

/// Every temp dir this module and `tls.rs` make starts with this, then `<kind>-<test process
/// pid>-` (the pid lets a test find the processes of a given test process by their cwd).
pub fn temp_dir_prefix() -> &'static str {
    "distlock-repl-"
}

/// A fresh dir `distlock-repl-<kind>-<pid>-<n>-<nanos>` under the system temp dir.
pub(crate) fn make_temp_dir_for(kind: &str) -> PathBuf {
    super::files::make_temp_dir(&format!("{}{kind}-", temp_dir_prefix()))
}
