//! TLS for the tests: certificates made at test time, and a `redis-server` that speaks TLS
//! only.
//!
//! [`TestCerts::generate`] makes, with the `openssl` command-line tool, in a fresh temp dir:
//! a CA; a server certificate for `127.0.0.1` and `localhost` signed by it; a client
//! certificate signed by it; and an unrelated second CA with a client certificate of its own
//! (for the "wrong CA" cases). Every key is ECDSA P-256, every file PEM; the certificates are
//! valid from now for 2 days.
//!
//! [`TlsServer::start`] runs a `redis-server` with `port 0` (no plaintext listener),
//! `tls-port <free port>`, those server files and `tls-auth-clients` as chosen
//! ([`ClientAuth`]), as a [`RedisNode`] (same lifecycle guarantees as the Sentinel harness:
//! killed with the test process however it ends). [`TlsServer::url`] is its
//! `rediss://127.0.0.1:P/`; the PEM bytes a client needs are [`TlsServer::ca_pem`],
//! [`TlsServer::client_cert_pem`] and [`TlsServer::client_key_pem`].
//!
//! This module builds no redis-rs TLS client itself: it is compiled into every test binary
//! that includes `tests/support` (also distlock-tower's), where redis-rs's rustls backend
//! (distlock's `tls` feature) may be off. The harness talks to the server with
//! `redis-cli --tls` ([`TlsServer::cli`]) instead. See tests/replication/tls.rs for the
//! redis-rs calls.
//!
//! Why `openssl` and not `rcgen`: a Rust certificate generator would have to be a
//! dev-dependency of every package whose tests include `tests/support`; `openssl` is on every
//! machine that runs these tests (Debian's `openssl` package, in the image next to the
//! `libssl3` that `redis-server` links).

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::sentinel::{NodeKind, RedisNode, make_temp_dir_for};

const OPENSSL: &str = "openssl";
const REDIS_CLI: &str = "redis-cli";

/// How long one `openssl` or `redis-cli` run may take.
const TOOL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a single-node TLS cluster may take to say `cluster_state:ok`.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(20);

/// The `openssl` config the certificates are made with: one extension section per kind.
const OPENSSL_CONFIG: &str = "\
[req]
distinguished_name = dn
prompt = no

[dn]
CN = placeholder

[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid

[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";

/// Certificates and keys for one test, as PEM files in a temp dir (removed on drop) and as
/// bytes.
#[derive(Debug)]
pub struct TestCerts {
    dir: PathBuf,
    ca_pem: Vec<u8>,
    client_cert_pem: Vec<u8>,
    client_key_pem: Vec<u8>,
    other_ca_pem: Vec<u8>,
    other_client_cert_pem: Vec<u8>,
    other_client_key_pem: Vec<u8>,
}

impl TestCerts {
    /// Makes a fresh set (a few `openssl` runs, about 50 ms).
    ///
    /// # Panics
    ///
    /// If `openssl` is missing or fails (the message has its output).
    pub fn generate() -> TestCerts {
        let dir = make_temp_dir_for("certs");
        let config = dir.join("openssl.cnf");
        fs::write(&config, OPENSSL_CONFIG).expect("write the openssl config");
        make_ca(&dir, &config, "ca", "distlock test CA");
        make_leaf(&dir, &config, "server", "ca", "localhost", "server_ext");
        make_leaf(
            &dir,
            &config,
            "client",
            "ca",
            "distlock-test-client",
            "client_ext",
        );
        make_ca(&dir, &config, "other-ca", "unrelated test CA");
        make_leaf(
            &dir,
            &config,
            "other-client",
            "other-ca",
            "distlock-test-client",
            "client_ext",
        );
        let read = |name: &str| {
            fs::read(dir.join(name)).unwrap_or_else(|e| panic!("read {name} in {dir:?}: {e}"))
        };
        TestCerts {
            ca_pem: read("ca.crt"),
            client_cert_pem: read("client.crt"),
            client_key_pem: read("client.key"),
            other_ca_pem: read("other-ca.crt"),
            other_client_cert_pem: read("other-client.crt"),
            other_client_key_pem: read("other-client.key"),
            dir,
        }
    }

    /// The dir holding every file (`ca.crt`, `server.crt`, `server.key`, `client.crt`,
    /// `client.key`, `other-ca.crt`, `other-client.crt`, `other-client.key`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate (PEM): what a client must trust.
    pub fn ca_pem(&self) -> &[u8] {
        &self.ca_pem
    }

    pub fn ca_path(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    pub fn server_cert_path(&self) -> PathBuf {
        self.dir.join("server.crt")
    }

    pub fn server_key_path(&self) -> PathBuf {
        self.dir.join("server.key")
    }

    /// A client certificate signed by the CA (PEM), for `tls-auth-clients yes`.
    pub fn client_cert_pem(&self) -> &[u8] {
        &self.client_cert_pem
    }

    /// Its private key (PEM, PKCS#8).
    pub fn client_key_pem(&self) -> &[u8] {
        &self.client_key_pem
    }

    pub fn client_cert_path(&self) -> PathBuf {
        self.dir.join("client.crt")
    }

    pub fn client_key_path(&self) -> PathBuf {
        self.dir.join("client.key")
    }

    /// An unrelated CA (PEM): trusting it instead of [`ca_pem`](Self::ca_pem) must fail.
    pub fn other_ca_pem(&self) -> &[u8] {
        &self.other_ca_pem
    }

    /// A client certificate signed by the unrelated CA (PEM): a server that requires client
    /// certificates must refuse it.
    pub fn other_client_cert_pem(&self) -> &[u8] {
        &self.other_client_cert_pem
    }

    /// Its private key (PEM).
    pub fn other_client_key_pem(&self) -> &[u8] {
        &self.other_client_key_pem
    }
}

impl Drop for TestCerts {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A self-signed CA `<name>.crt` / `<name>.key`.
fn make_ca(dir: &Path, config: &Path, name: &str, cn: &str) {
    run_openssl(
        dir,
        &[
            "req",
            "-x509",
            "-new",
            "-config",
            path_str(config),
            "-extensions",
            "ca_ext",
            "-nodes",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
            "-days",
            "2",
            "-subj",
            &format!("/CN={cn}"),
        ],
    );
}

/// A key and a certificate `<name>.crt` signed by CA `<ca>`, with extension section `ext`.
fn make_leaf(dir: &Path, config: &Path, name: &str, ca: &str, cn: &str, ext: &str) {
    run_openssl(
        dir,
        &[
            "req",
            "-new",
            "-config",
            path_str(config),
            "-nodes",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={cn}"),
        ],
    );
    let serial = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos());
    run_openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-set_serial",
            &format!("0x{serial:x}"),
            "-days",
            "2",
            "-extfile",
            path_str(config),
            "-extensions",
            ext,
            "-out",
            &format!("{name}.crt"),
        ],
    );
}

fn run_openssl(dir: &Path, args: &[&str]) {
    let mut cmd = Command::new(OPENSSL);
    cmd.args(args).current_dir(dir);
    let out = run_tool(cmd, OPENSSL);
    assert!(
        out.status.success(),
        "`openssl {}` failed ({}):\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a short-lived tool to completion (bounded by [`TOOL_TIMEOUT`]; killed then).
fn run_tool(mut cmd: Command, binary: &str) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "{binary} not found on PATH: install it with `sudo apt-get install -y openssl \
             redis-tools` (Debian/Ubuntu)"
        ),
        Err(e) => panic!("failed to spawn {binary}: {e}"),
    };
    let deadline = Instant::now() + TOOL_TIMEOUT;
    while child.try_wait().expect("try_wait on a tool").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect the tool's output");
            panic!(
                "{binary} did not finish within {TOOL_TIMEOUT:?}:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.wait_with_output().expect("collect the tool's output")
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("temp paths are UTF-8")
}

/// `tls-auth-clients`: whether the server asks for a client certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    /// `yes`: a client must present a certificate signed by the CA.
    Required,
    /// `no`: the server asks for none.
    #[default]
    Off,
    /// `optional`: a certificate is checked if the client presents one.
    Optional,
}

impl ClientAuth {
    fn directive(self) -> &'static str {
        match self {
            Self::Required => "yes",
            Self::Off => "no",
            Self::Optional => "optional",
        }
    }
}

/// Options of a [`TlsServer`].
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct TlsServerBuilder {
    client_auth: ClientAuth,
    cluster: bool,
    config: Vec<(String, Vec<String>)>,
}

impl TlsServerBuilder {
    /// `tls-auth-clients` (default [`ClientAuth::Off`]).
    pub fn client_auth(mut self, auth: ClientAuth) -> Self {
        self.client_auth = auth;
        self
    }

    /// Runs the server as a single-node Redis Cluster over TLS (`cluster-enabled yes`,
    /// `tls-cluster yes`, all 16384 slots assigned to it), for cluster clients; `start`
    /// returns once it says `cluster_state:ok` (about 2 s).
    pub fn cluster(mut self) -> Self {
        self.cluster = true;
        self
    }

    /// Adds a config directive, e.g. `.config("user", &["locker", "on", ">pw", "~*",
    /// "+@all"])`. Each value is quoted as one argument.
    pub fn config(mut self, name: &str, values: &[&str]) -> Self {
        let name = super::server::directive_name(name, &[], "TLS harness");
        self.config.push((
            name.to_owned(),
            values.iter().map(|v| (*v).to_owned()).collect(),
        ));
        self
    }

    /// Starts the server; see [`TlsServer::start`].
    pub fn start(self) -> TlsServer {
        TlsServer::start_with(self)
    }

    fn server_config(&self, tls_port: u16, dir: &Path, certs: &TestCerts) -> String {
        let dir_text = path_str(dir);
        let mut text = format!(
            "port 0\n\
             tls-port {tls_port}\n\
             bind 127.0.0.1\n\
             daemonize no\n\
             dir {}\n\
             logfile {}\n\
             save \"\"\n\
             appendonly no\n\
             {}\
             tls-cert-file {}\n\
             tls-key-file {}\n\
             tls-ca-cert-file {}\n\
             tls-auth-clients {}\n",
            quote(dir_text),
            quote(&format!("{dir_text}/redis.log")),
            super::server::debug_command_config(),
            quote(path_str(&certs.server_cert_path())),
            quote(path_str(&certs.server_key_path())),
            quote(path_str(&certs.ca_path())),
            self.client_auth.directive(),
        );
        if self.cluster {
            let bus_port = std::net::TcpListener::bind(("127.0.0.1", 0))
                .and_then(|l| l.local_addr())
                .expect("bind an ephemeral port")
                .port();
            text.push_str(&format!(
                "cluster-enabled yes\n\
                 cluster-config-file nodes.conf\n\
                 cluster-port {bus_port}\n\
                 tls-cluster yes\n\
                 tls-replication yes\n"
            ));
        }
        for (name, values) in &self.config {
            text.push_str(name);
            for v in values {
                text.push(' ');
                text.push_str(&quote(v));
            }
            text.push('\n');
        }
        text
    }
}

fn quote(value: &str) -> String {
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A running `redis-server` that speaks TLS only; killed (and its temp dir and certificates
/// removed) on drop. See the module docs.
#[derive(Debug)]
pub struct TlsServer {
    node: RedisNode,
    certs: TestCerts,
    client_auth: ClientAuth,
    dir: PathBuf,
}

impl TlsServer {
    /// Generates fresh [`TestCerts`] and starts a server with `tls-auth-clients no`; returns
    /// once it is ready (bounded: 10 s).
    ///
    /// # Panics
    ///
    /// If `openssl` or `redis-server` is missing, or the server does not start (the message
    /// has its config and log).
    pub fn start() -> TlsServer {
        Self::builder().start()
    }

    pub fn builder() -> TlsServerBuilder {
        TlsServerBuilder::default()
    }

    fn start_with(builder: TlsServerBuilder) -> TlsServer {
        super::server::require_supported_version();
        if builder.cluster {
            super::server::require_version(
                super::cluster::MIN_VERSION,
                "a Redis Cluster",
                super::cluster::MIN_VERSION_REASON,
            );
        }
        let certs = TestCerts::generate();
        let dir = make_temp_dir_for("tls");
        let node = RedisNode::start(NodeKind::TlsServer, "tls", &dir, |port| {
            builder.server_config(port, &dir, &certs)
        });
        let server = TlsServer {
            node,
            certs,
            client_auth: builder.client_auth,
            dir,
        };
        if builder.cluster {
            server.form_single_node_cluster();
        }
        server
    }

    /// `rediss://127.0.0.1:P/`.
    pub fn url(&self) -> String {
        self.node.url()
    }

    /// `rediss://USER:PASSWORD@127.0.0.1:P/` for an ACL user (the test's own names: no
    /// percent-encoding is done).
    pub fn url_for_user(&self, user: &str, password: &str) -> String {
        format!("rediss://{user}:{password}@{}/", self.addr())
    }

    /// `127.0.0.1:P` (the TLS port).
    pub fn addr(&self) -> SocketAddr {
        self.node.addr()
    }

    pub fn port(&self) -> u16 {
        self.node.port()
    }

    /// The `tls-auth-clients` setting.
    pub fn client_auth(&self) -> ClientAuth {
        self.client_auth
    }

    /// The certificates the server was started with.
    pub fn certs(&self) -> &TestCerts {
        &self.certs
    }

    /// The CA (PEM) that signed the server's certificate.
    pub fn ca_pem(&self) -> &[u8] {
        self.certs.ca_pem()
    }

    /// A client certificate (PEM) the server accepts.
    pub fn client_cert_pem(&self) -> &[u8] {
        self.certs.client_cert_pem()
    }

    /// Its key (PEM).
    pub fn client_key_pem(&self) -> &[u8] {
        self.certs.client_key_pem()
    }

    /// The process (pid, kill, SIGSTOP/SIGCONT, restart, log).
    pub fn node(&self) -> &RedisNode {
        &self.node
    }

    /// The server log (all runs).
    pub fn log(&self) -> String {
        self.node.log()
    }

    /// Runs `redis-cli --tls` (trusting the CA, presenting the client certificate) with
    /// `args` against the server, e.g. `cli(&["SET", "k", "v"])`; `Ok(stdout)` or
    /// `Err(stdout + stderr)` (redis-cli exits 0 on a Redis error reply too: look at the
    /// text).
    pub fn cli(&self, args: &[&str]) -> Result<String, String> {
        let mut cmd = Command::new(REDIS_CLI);
        cmd.args(["--tls", "--cacert"])
            .arg(self.certs.ca_path())
            .arg("--cert")
            .arg(self.certs.client_cert_path())
            .arg("--key")
            .arg(self.certs.client_key_path())
            .args(["-h", "127.0.0.1", "-p", &self.port().to_string()])
            .args(args);
        let out = run_tool(cmd, REDIS_CLI);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            Ok(stdout)
        } else {
            Err(format!(
                "{stdout}{} ({})",
                String::from_utf8_lossy(&out.stderr),
                out.status
            ))
        }
    }

    /// Assigns every slot to this node and waits until it says `cluster_state:ok`.
    fn form_single_node_cluster(&self) {
        let fail = |what: String| -> ! { panic!("{what}\nlog:\n{}", self.log()) };
        match self.cli(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]) {
            Ok(out) if out.trim() == "OK" => {}
            other => fail(format!("CLUSTER ADDSLOTSRANGE: {other:?}")),
        }
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        loop {
            let info = self.cli(&["CLUSTER", "INFO"]);
            if matches!(&info, Ok(text) if text.contains("cluster_state:ok")) {
                return;
            }
            if Instant::now() >= deadline {
                fail(format!(
                    "the single-node TLS cluster is not ok after {CLUSTER_TIMEOUT:?}: {info:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.node.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// How long the TLS Sentinel set-up may take to settle, at start and after a failover.
const TLS_SENTINEL_SETTLE: Duration = Duration::from_secs(30);

/// One primary, its replica and three sentinels that all speak TLS only (`port 0`, a
/// `tls-port`, `tls-auth-clients yes`), with `tls-replication yes` so that replication and
/// the sentinels' own links (to the data nodes and to each other) speak TLS too, presenting
/// the client certificate (`tls-client-cert-file`). One set of [`TestCerts`] for all. A small
/// cousin of [`SentinelSetup`](super::sentinel::SentinelSetup) for the library's Sentinel-over-
/// TLS test, inspected with `redis-cli --tls`; processes killed and files removed on drop.
#[derive(Debug)]
pub struct TlsSentinelSetup {
    certs: TestCerts,
    /// `[0]` started as the primary, `[1]` as its replica.
    nodes: Vec<RedisNode>,
    sentinels: Vec<RedisNode>,
    master: String,
    dir: PathBuf,
}

impl TlsSentinelSetup {
    /// Starts the five processes and returns once every sentinel knows the replica and the
    /// other two sentinels (bounded by 30 s).
    ///
    /// # Panics
    ///
    /// If `openssl`, `redis-server`, `redis-sentinel` or `redis-cli` is missing, a process
    /// does not start, or the set-up does not settle in time (the message has the logs).
    pub fn start() -> TlsSentinelSetup {
        super::server::require_supported_version();
        let certs = TestCerts::generate();
        let dir = make_temp_dir_for("tls-sentinel");
        let mut setup = TlsSentinelSetup {
            certs,
            nodes: Vec::new(),
            sentinels: Vec::new(),
            master: "tlsmaster".to_owned(),
            dir,
        };
        let primary_dir = setup.dir.join("primary");
        let primary = RedisNode::start(NodeKind::TlsServer, "primary", &primary_dir, |port| {
            setup.data_config(port, &primary_dir, None)
        });
        let primary_port = primary.port();
        setup.nodes.push(primary);
        let replica_dir = setup.dir.join("replica");
        let replica = RedisNode::start(NodeKind::TlsServer, "replica", &replica_dir, |port| {
            setup.data_config(port, &replica_dir, Some(primary_port))
        });
        setup.nodes.push(replica);
        setup.wait_until("the replica's first sync", |s| {
            let info = s.cli(&s.nodes[1], &["INFO", "replication"])?;
            if info.contains("master_link_status:up") {
                Ok(())
            } else {
                Err(info)
            }
        });
        for i in 0..3 {
            let dir = setup.dir.join(format!("sentinel-{i}"));
            let name = format!("sentinel-{i}");
            let sentinel = RedisNode::start(NodeKind::TlsSentinel, &name, &dir, |port| {
                setup.sentinel_config(port, &dir, primary_port)
            });
            setup.sentinels.push(sentinel);
        }
        setup.wait_settled(primary_port);
        setup
    }

    /// The name the sentinels monitor the primary under.
    pub fn master_name(&self) -> &str {
        &self.master
    }

    /// `rediss://127.0.0.1:P/` of every sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisNode::url).collect()
    }

    /// The certificates every process was started with.
    pub fn certs(&self) -> &TestCerts {
        &self.certs
    }

    /// The data nodes: `[0]` started as the primary, `[1]` as its replica.
    pub fn nodes(&self) -> &[RedisNode] {
        &self.nodes
    }

    /// Runs `redis-cli --tls` (the CA, the client certificate) with `args` against `node`.
    pub fn cli(&self, node: &RedisNode, args: &[&str]) -> Result<String, String> {
        let mut cmd = Command::new(REDIS_CLI);
        cmd.args(["--tls", "--cacert"])
            .arg(self.certs.ca_path())
            .arg("--cert")
            .arg(self.certs.client_cert_path())
            .arg("--key")
            .arg(self.certs.client_key_path())
            .args(["-h", "127.0.0.1", "-p", &node.port().to_string()])
            .args(args);
        let out = run_tool(cmd, REDIS_CLI);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success()
            && !stdout.starts_with("ERR")
            && !stdout.contains("Could not connect")
        {
            Ok(stdout)
        } else {
            Err(format!(
                "{stdout}{} ({})",
                String::from_utf8_lossy(&out.stderr),
                out.status
            ))
        }
    }

    /// The port every serving sentinel names as the primary's, if they agree.
    pub fn announced_primary(&self) -> Result<u16, String> {
        let mut ports = Vec::new();
        for sentinel in self.sentinels.iter().filter(|s| s.is_serving()) {
            let out = self.cli(
                sentinel,
                &["SENTINEL", "get-master-addr-by-name", &self.master],
            )?;
            let port = out
                .lines()
                .nth(1)
                .and_then(|p| p.trim().parse::<u16>().ok())
                .ok_or_else(|| format!("{}: {out:?}", sentinel.name()))?;
            ports.push(port);
        }
        match ports.first() {
            Some(&port) if ports.iter().all(|&p| p == port) => Ok(port),
            _ => Err(format!("the sentinels disagree: {ports:?}")),
        }
    }

    /// SIGKILLs the primary (`nodes()[0]` at the start) and waits until every sentinel
    /// names the replica and the replica calls itself master; returns how long that took.
    pub fn kill_primary(&self) -> Duration {
        let began = Instant::now();
        self.nodes[0].kill();
        let replica_port = self.nodes[1].port();
        self.wait_until("the failover to the replica", |s| {
            let announced = s.announced_primary()?;
            if announced != replica_port {
                return Err(format!("the sentinels name port {announced}"));
            }
            let role = s.cli(&s.nodes[1], &["ROLE"])?;
            if role.starts_with("master") {
                Ok(())
            } else {
                Err(format!("the replica's ROLE: {role:?}"))
            }
        });
        began.elapsed()
    }

    /// Every process's log, for failure messages.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .chain(&self.sentinels)
            .map(|node| format!("--- {} ---\n{}", node.name(), node.log_tail(40)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits (bounded) until the sentinels name `primary_port`, know one replica and two
    /// other sentinels.
    fn wait_settled(&self, primary_port: u16) {
        self.wait_until("the sentinels to settle", |s| {
            let announced = s.announced_primary()?;
            if announced != primary_port {
                return Err(format!("the sentinels name port {announced}"));
            }
            for sentinel in &s.sentinels {
                let out = s.cli(sentinel, &["SENTINEL", "master", &s.master])?;
                let field = |name: &str| {
                    let mut lines = out.lines();
                    lines.find(|l| l.trim() == name)?;
                    lines.next().map(|v| v.trim().to_owned())
                };
                let (replicas, others) = (field("num-slaves"), field("num-other-sentinels"));
                if replicas.as_deref() != Some("1") || others.as_deref() != Some("2") {
                    return Err(format!(
                        "{}: {replicas:?} replicas, {others:?} other sentinels",
                        sentinel.name()
                    ));
                }
            }
            Ok(())
        });
    }

    /// Polls `check` every 100 ms until it is `Ok`, for at most [`TLS_SENTINEL_SETTLE`].
    fn wait_until(&self, what: &str, check: impl Fn(&Self) -> Result<(), String>) {
        let deadline = Instant::now() + TLS_SENTINEL_SETTLE;
        loop {
            match check(self) {
                Ok(()) => return,
                Err(why) if Instant::now() >= deadline => panic!(
                    "waited {TLS_SENTINEL_SETTLE:?} for {what}: {why}\n{}",
                    self.logs()
                ),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// The TLS lines every process shares.
    fn tls_config(&self) -> String {
        format!(
            "tls-cert-file {}\n\
             tls-key-file {}\n\
             tls-client-cert-file {}\n\
             tls-client-key-file {}\n\
             tls-ca-cert-file {}\n\
             tls-auth-clients yes\n\
             tls-replication yes\n",
            quote(path_str(&self.certs.server_cert_path())),
            quote(path_str(&self.certs.server_key_path())),
            quote(path_str(&self.certs.client_cert_path())),
            quote(path_str(&self.certs.client_key_path())),
            quote(path_str(&self.certs.ca_path())),
        )
    }

    fn data_config(&self, tls_port: u16, dir: &Path, primary: Option<u16>) -> String {
        let dir_text = path_str(dir);
        let mut text = format!(
            "port 0\n\
             tls-port {tls_port}\n\
             bind 127.0.0.1\n\
             daemonize no\n\
             dir {}\n\
             logfile {}\n\
             save \"\"\n\
             appendonly no\n\
             repl-diskless-sync yes\n\
             repl-diskless-sync-delay 0\n\
             {}{}",
            quote(dir_text),
            quote(&format!("{dir_text}/redis.log")),
            super::server::debug_command_config(),
            self.tls_config(),
        );
        if let Some(primary) = primary {
            text.push_str(&format!("replicaof 127.0.0.1 {primary}\n"));
        }
        text
    }

    fn sentinel_config(&self, tls_port: u16, dir: &Path, primary: u16) -> String {
        let dir_text = path_str(dir);
        let name = &self.master;
        format!(
            "port 0\n\
             tls-port {tls_port}\n\
             bind 127.0.0.1\n\
             daemonize no\n\
             dir {}\n\
             logfile {}\n\
             {}\
             sentinel resolve-hostnames no\n\
             sentinel announce-hostnames no\n\
             sentinel announce-ip 127.0.0.1\n\
             sentinel announce-port {tls_port}\n\
             sentinel monitor {name} 127.0.0.1 {primary} 2\n\
             sentinel down-after-milliseconds {name} 1000\n\
             sentinel failover-timeout {name} 2000\n\
             sentinel parallel-syncs {name} 1\n",
            quote(dir_text),
            quote(&format!("{dir_text}/redis.log")),
            self.tls_config(),
        )
    }
}

impl Drop for TlsSentinelSetup {
    fn drop(&mut self) {
        for node in self.nodes.iter().chain(&self.sentinels) {
            node.kill();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}
