//! A real `redis-server` process per test, on a free loopback port.
//!
//! [`RedisServer`] owns the child process and a private temp directory (used as
//! the server's `--dir` and holding its log file). Dropping it SIGKILLs and reaps
//! the process and removes the directory, so no server outlives its test
//! (unless the test process itself is SIGKILLed). Do not keep a `RedisServer`
//! in a `static`: statics are never dropped, so the server would leak.

use std::fmt::Write as _;
use std::fs::{self, OpenOptions};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::files::{LOG_FILE, STDIO_FILE, free_port, log_since, make_temp_dir, read_logs};
use super::node::{inspection_conn, ping};

/// Executable that is spawned; looked up on `PATH`.
const REDIS_SERVER: &str = "redis-server";

/// Message of the panic raised when `redis-server` cannot be found.
const NOT_FOUND_HELP: &str = "redis-server not found on PATH: install it with \
     `sudo apt-get install -y redis-server` (Debian/Ubuntu) or run ./scripts/test.sh, \
     which installs it";

/// The oldest `redis-server` the harness runs, as (major, minor): the oldest the library
/// supports (`distlock::MIN_REDIS_VERSION`). scripts/version-matrix.sh runs the suites on it.
const MIN_VERSION: (u32, u32) = (6, 2);

/// The first version that knows `enable-debug-command` (7.0, where `DEBUG` became opt-in):
/// older servers allow `DEBUG` anyway and exit with "Bad directive or wrong number of
/// arguments" if given the option.
const DEBUG_COMMAND_OPTION_SINCE: (u32, u32) = (7, 0);

/// How long [`RedisServer::start`] / [`RedisServer::restart`] wait for `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// How many fresh ports [`RedisServerBuilder::start`] tries before giving up.
const PORT_ATTEMPTS: usize = 5;

/// Options the harness sets itself; overriding them would break it.
const RESERVED_OPTIONS: &[&str] = &["port", "bind", "dir", "logfile", "daemonize"];

/// Config directive `name` without its leading dashes, checked for every set-up's
/// `config(name, values)`: not empty, and not one of `reserved` (lower case), the directives
/// `harness` sets itself.
///
/// # Panics
///
/// If it is empty or reserved.
pub fn directive_name<'a>(name: &'a str, reserved: &[&str], harness: &str) -> &'a str {
    let name = name.trim_start_matches('-');
    assert!(!name.is_empty(), "config directive name must not be empty");
    assert!(
        !reserved.contains(&name.to_ascii_lowercase().as_str()),
        "{name} is set by the {harness} and cannot be overridden"
    );
    name
}

/// Line redis-server logs once its listening sockets are bound.
const READY_LINE: &str = "Ready to accept connections";

/// Builder for a [`RedisServer`] with extra configuration.
///
/// Every option becomes a `--name value...` argument on the `redis-server`
/// command line, after the harness's fixed arguments (so a later option
/// overrides an earlier one where Redis allows it).
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct RedisServerBuilder {
    args: Vec<String>,
    password: Option<String>,
}

impl RedisServerBuilder {
    /// Adds a single-valued config option, e.g. `.arg("--maxmemory", "1mb")`.
    ///
    /// The leading `--` on `name` is optional. `value` is passed as ONE
    /// argument: to give a directive several arguments (e.g. `user`), use
    /// [`config`](Self::config).
    pub fn arg(self, name: &str, value: &str) -> Self {
        self.config(name, &[value])
    }

    /// Adds a config directive with any number of arguments, e.g.
    /// `.config("--maxmemory-policy", &["noeviction"])`. Each element of
    /// `values` is a separate argument (Redis quotes each one as a unit).
    ///
    /// # Panics
    ///
    /// If `name` is empty or one the harness controls itself (`port`, `bind`,
    /// `dir`, `logfile`, `daemonize`).
    pub fn config(mut self, name: &str, values: &[&str]) -> Self {
        let name = directive_name(name, RESERVED_OPTIONS, "harness");
        self.args.push(format!("--{name}"));
        self.args.extend(values.iter().map(|v| (*v).to_owned()));
        self
    }

    /// Requires `password` for the `default` user (`--requirepass`).
    ///
    /// [`RedisServer::url`] then carries the password, so `client()`/`conn()`
    /// authenticate automatically.
    pub fn password(mut self, password: &str) -> Self {
        self.password = Some(password.to_owned());
        self.config("--requirepass", &[password])
    }

    /// Declares an ACL user (`--user name rule...`), e.g.
    /// `.acl_user("alice", &["on", ">secret", "~*", "&*", "+@all"])`.
    ///
    /// Build a URL for it with [`RedisServer::url_for_user`].
    pub fn acl_user(self, name: &str, rules: &[&str]) -> Self {
        let mut values = Vec::with_capacity(rules.len() + 1);
        values.push(name);
        values.extend_from_slice(rules);
        self.config("--user", &values)
    }

    /// Declares ACL user `name` (password `password`) with exactly what the library needs on a
    /// single primary for keys and channels under `prefix` (the client's key prefix,
    /// `distlock` by default): see
    /// [`library_acl_rules`]. Build a URL for it with [`RedisServer::url_for_user`].
    pub fn library_user(self, name: &str, password: &str, prefix: &str) -> Self {
        let rules = library_acl_rules(password, prefix);
        let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
        self.acl_user(name, &rules)
    }

    /// Makes the server a replica of the server at `primary` (`--replicaof 127.0.0.1
    /// <port>`), e.g. for `WAIT`. The link comes up shortly after the start: wait for it with
    /// [`RedisServer::wait_connected_replicas`] on the primary. A restart keeps the option.
    pub fn replica_of(self, primary: SocketAddr) -> Self {
        self.config(
            "--replicaof",
            &[&primary.ip().to_string(), &primary.port().to_string()],
        )
    }

    /// Spawns the server on a free 127.0.0.1 port and returns once it answers
    /// `PING` (bounded by 10 s).
    ///
    /// Retries with a new port (up to 5 times) if the chosen port was taken by
    /// someone else before the server could bind it.
    ///
    /// # Panics
    ///
    /// If `redis-server` is not on `PATH` or is older than 7.0 (see
    /// [`require_supported_version`]), if it exits for another reason than a
    /// port clash (e.g. bad config; the panic message includes its log), or if
    /// it does not answer in time.
    pub fn start(mut self) -> RedisServer {
        require_supported_version();
        // The run as an ACL user (see `ACL_RUN_ENV`): servers whose tests configure no
        // credentials of their own get the application user.
        let app_user =
            acl_run() && self.password.is_none() && !self.args.iter().any(|a| a == "--user");
        if app_user {
            let rules = acl_run_rules();
            let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
            self = self.acl_user(ACL_RUN_USER, &rules);
        }
        let dir = make_temp_dir("distlock-redis-");
        let mut last_failure = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            let mut server = RedisServer {
                child: None,
                last_pid: 0,
                port,
                dir: dir.clone(),
                args: self.args.clone(),
                password: self.password.clone(),
                app_user,
                stopped: AtomicBool::new(false),
            };
            match server.spawn_and_wait() {
                Ok(()) => return server,
                Err(StartError::PortInUse(log)) => {
                    // `server` drops here: process reaped. Keep the dir for
                    // the next attempt; only the `RedisServer` that is
                    // returned removes it.
                    server.dir = PathBuf::new();
                    last_failure = log;
                }
            }
        }
        let _ = fs::remove_dir_all(&dir);
        panic!(
            "redis-server could not bind a free port after {PORT_ATTEMPTS} attempts; \
             last log:\n{last_failure}"
        );
    }
}

/// A running `redis-server` child process, killed and reaped on drop.
///
/// Started with `--save "" --appendonly no --enable-debug-command yes
/// --bind 127.0.0.1 --port P --dir <own temp dir> --logfile <temp dir>/redis.log`
/// (no `--enable-debug-command` before 7.0: see [`debug_command_args`]) plus any builder
/// options. No persistence: data does not survive
/// [`kill`](Self::kill) / [`restart`](Self::restart).
#[derive(Debug)]
pub struct RedisServer {
    /// `None` after [`kill`](Self::kill) until [`restart`](Self::restart).
    child: Option<Child>,
    /// Pid of the most recently spawned process.
    last_pid: u32,
    port: u16,
    /// Empty path means "not owned, do not remove" (failed start attempts).
    dir: PathBuf,
    /// Builder options, reused verbatim on restart.
    args: Vec<String>,
    /// Password of the `default` user, if `--requirepass` was configured.
    password: Option<String>,
    /// Whether `url()` logs in as the application user of the ACL run (see `ACL_RUN_ENV`).
    app_user: bool,
    /// Whether the process is currently SIGSTOPped by us.
    stopped: AtomicBool,
}

/// Why a spawn attempt failed in a way the caller can retry.
enum StartError {
    /// The port was taken; carries the server log for diagnostics.
    PortInUse(String),
}

impl RedisServer {
    /// Starts a server with the default configuration; see
    /// [`RedisServerBuilder::start`] for the contract and panics.
    pub fn start() -> RedisServer {
        Self::builder().start()
    }

    /// Returns a builder for a server with extra configuration
    /// (`--requirepass`, ACL users, `maxmemory`, ...).
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// `redis://127.0.0.1:PORT/`, or `redis://:PASSWORD@127.0.0.1:PORT/` when a
    /// password was configured for the `default` user. Stable across
    /// [`restart`](Self::restart).
    pub fn url(&self) -> String {
        self.url_via(self.addr())
    }

    /// Like [`url`](Self::url) (same credentials) but pointing at `addr`,
    /// e.g. a [`Proxy`](super::proxy::Proxy) in front of this server.
    pub fn url_via(&self, addr: SocketAddr) -> String {
        if self.app_user {
            return format!(
                "redis://{}:{}@{addr}/",
                percent_encode(ACL_RUN_USER),
                percent_encode(ACL_RUN_PASSWORD)
            );
        }
        self.admin_url_via(addr)
    }

    /// The `default` user's URL (the harness's own connections: inspection, fault injection),
    /// which differs from [`url`](Self::url) only in the run as an ACL user.
    fn admin_url_via(&self, addr: SocketAddr) -> String {
        match &self.password {
            Some(pw) => format!("redis://:{}@{addr}/", percent_encode(pw)),
            None => format!("redis://{addr}/"),
        }
    }

    /// `redis://USER:PASSWORD@127.0.0.1:PORT/` for an ACL user (see
    /// [`RedisServerBuilder::acl_user`]); both parts are percent-encoded.
    pub fn url_for_user(&self, user: &str, password: &str) -> String {
        format!(
            "redis://{}:{}@{}/",
            percent_encode(user),
            percent_encode(password),
            self.addr()
        )
    }

    /// The TCP port the server listens on (same after a restart).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// Pid of the current process (the previous one's after [`kill`](Self::kill),
    /// until [`restart`](Self::restart)).
    pub fn pid(&self) -> u32 {
        self.last_pid
    }

    /// Whether the process is currently running (not killed). A SIGSTOPped
    /// process counts as running.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The server's temp dir (its `--dir`; holds the log file).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Contents of the server log file (all runs, including before a
    /// restart), followed by anything the process wrote to stdout/stderr.
    /// Never panics: unreadable files yield a placeholder. Meant for
    /// assertion/failure messages.
    pub fn log(&self) -> String {
        read_logs(&self.dir, REDIS_SERVER)
    }

    /// A `redis::Client` for [`url`](Self::url) (no connection is made yet).
    /// Connections from it use redis-rs's defaults, notably a 500 ms response
    /// timeout for multiplexed connections.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.admin_url_via(self.addr()))
            .expect("harness url must be a valid redis url")
    }

    /// A fresh multiplexed connection for inspection and fault injection
    /// (`CLIENT PAUSE`, `DEBUG SLEEP`, `CONFIG SET`, `SCRIPT FLUSH`, `PTTL`...).
    ///
    /// Uses a 5 s connect timeout and a 15 s response timeout (instead of
    /// redis-rs's default 500 ms), so `DEBUG SLEEP` of a few seconds works.
    /// Connecting needs the server to answer (redis-rs sends a handshake), so
    /// open it BEFORE [`stop_process`](Self::stop_process) if needed while
    /// the server is frozen.
    ///
    /// # Panics
    ///
    /// If the connection cannot be established (message includes the log).
    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        inspection_conn(&self.client()).await.unwrap_or_else(|e| {
            panic!(
                "cannot connect to redis-server at {}: {e}\nserver log:\n{}",
                self.addr(),
                self.log()
            )
        })
    }

    /// Waits (bounded by 10 s, which only outlasts a busy machine: clients send their
    /// unsubscribes at once) until the server has no pub/sub channel left but the
    /// `<prefix>:revoked` ones: a client that held leases keeps listening there for
    /// operators' forces while its watchdog runs (it idles 30 s before it stops).
    ///
    /// # Panics
    ///
    /// On timeout, with the channels left.
    pub async fn until_no_subscriptions(&self) {
        let mut conn = self.conn().await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let mut channels: Vec<String> = redis::cmd("PUBSUB")
                .arg("CHANNELS")
                .query_async(&mut conn)
                .await
                .expect("PUBSUB");
            channels.retain(|channel| !channel.ends_with(":revoked"));
            if channels.is_empty() {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "server still has subscriptions: {channels:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits (bounded by 10 s) until at least `count` replicas are online on this primary
    /// (`INFO replication`: `slaveN:...,state=online`, e.g. after starting one with
    /// [`RedisServerBuilder::replica_of`]).
    ///
    /// # Panics
    ///
    /// On timeout (the message has `INFO replication` and the log).
    pub async fn wait_connected_replicas(&self, count: usize) {
        let mut conn = self.conn().await;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            let online = info
                .lines()
                .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                .count();
            if online >= count {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{online} of {count} replicas online on {} after {READY_TIMEOUT:?}:\n{info}\n\
                 log:\n{}",
                self.addr(),
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Freezes the process with SIGSTOP: it keeps its sockets (connects still
    /// complete in the kernel backlog) but answers nothing until
    /// [`cont_process`](Self::cont_process). Drop/kill SIGCONTs it first.
    ///
    /// # Panics
    ///
    /// If the server is not running or the signal cannot be sent.
    pub fn stop_process(&self) {
        self.signal(libc::SIGSTOP);
        self.stopped.store(true, Ordering::SeqCst);
    }

    /// Resumes a process frozen by [`stop_process`](Self::stop_process)
    /// (harmless if it is not stopped).
    ///
    /// # Panics
    ///
    /// If the server is not running or the signal cannot be sent.
    pub fn cont_process(&self) {
        self.signal(libc::SIGCONT);
        self.stopped.store(false, Ordering::SeqCst);
    }

    /// SIGSTOPs the process and returns a guard that SIGCONTs it when dropped
    /// (also on panic), e.g. for a scope in which the server must be frozen.
    pub fn stop_guard(&self) -> StoppedGuard<'_> {
        self.stop_process();
        StoppedGuard { server: self }
    }

    /// SIGKILLs the process (SIGCONTing it first if stopped) and reaps it.
    /// The port is then free and connections see EOF/reset; all data is lost.
    /// No-op if already killed. The temp dir (and log) is kept for
    /// [`restart`](Self::restart) and [`log`](Self::log).
    pub fn kill(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if self.stopped.swap(false, Ordering::SeqCst) {
            send_signal(child.id(), libc::SIGCONT);
        }
        // `Child::kill` sends SIGKILL; it only fails if the process was
        // already reaped, which cannot happen while we own `child`.
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Starts the server again on the SAME port with the same arguments,
    /// killing the current process first if it is still running, and waits
    /// until it answers `PING` (bounded by 10 s). The url is unchanged; the
    /// data set starts empty.
    ///
    /// # Panics
    ///
    /// If the server cannot come back up on its port in time (e.g. someone
    /// else took the port meanwhile).
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match self.spawn_and_wait() {
                Ok(()) => return,
                Err(StartError::PortInUse(log)) => {
                    assert!(
                        Instant::now() < deadline,
                        "redis-server could not re-bind port {} on restart:\n{log}",
                        self.port
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    /// Sends `sig` to the running process.
    fn signal(&self, sig: libc::c_int) {
        let child = self
            .child
            .as_ref()
            .expect("redis-server is not running (killed); restart() it first");
        send_signal(child.id(), sig);
    }

    /// Spawns the process on `self.port` and waits until it is ready.
    ///
    /// Returns `Err(PortInUse)` if the server exited because the port was
    /// taken (the child is reaped). Panics on any other failure.
    fn spawn_and_wait(&mut self) -> Result<(), StartError> {
        let log_path = self.dir.join(LOG_FILE);
        // Readiness is detected in the part of the log written by this run.
        let log_offset = fs::metadata(&log_path).map_or(0, |m| m.len());
        let stdio = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(STDIO_FILE))
            .expect("create redis-server stdio file in its temp dir");
        let stderr = stdio.try_clone().expect("duplicate stdio file handle");

        let mut cmd = Command::new(REDIS_SERVER);
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(debug_command_args())
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log_path)
            .args(&self.args)
            // Absolute paths above, and a cwd that we own: startup never
            // depends on the test's current directory.
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(stdio)
            .stderr(stderr);
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == io::ErrorKind::NotFound => panic!("{NOT_FOUND_HELP}"),
            Err(e) => panic!("failed to spawn {REDIS_SERVER}: {e}"),
        };
        self.last_pid = child.id();
        self.stopped.store(false, Ordering::SeqCst);
        self.child = Some(child);

        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let exited = self
                .child
                .as_mut()
                .map(|c| c.try_wait().expect("try_wait on redis-server"));
            if let Some(Some(status)) = exited {
                self.child = None;
                return self.exited_early(status, &log_path, log_offset);
            }
            // The "ready" line proves that OUR process bound the port (and
            // not some other server that grabbed it); it is only missing if
            // the log level was lowered below `notice`.
            let ready_logged =
                !self.logs_ready_line() || log_since(&log_path, log_offset).contains(READY_LINE);
            if ready_logged && ping(self.addr()) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let log = self.log();
                self.kill();
                panic!(
                    "redis-server on port {} did not answer PING within {READY_TIMEOUT:?}; \
                     log:\n{log}",
                    self.port
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether the configured log level includes the [`READY_LINE`] notice.
    fn logs_ready_line(&self) -> bool {
        let quiet = self.args.windows(2).rev().find(|w| w[0] == "--loglevel");
        !quiet.is_some_and(|w| matches!(w[1].as_str(), "warning" | "nothing"))
    }

    /// Classifies an early exit of the freshly spawned process.
    fn exited_early(
        &self,
        status: ExitStatus,
        log_path: &Path,
        log_offset: u64,
    ) -> Result<(), StartError> {
        let log = self.log();
        if log_since(log_path, log_offset).contains("Address already in use") {
            return Err(StartError::PortInUse(log));
        }
        panic!(
            "redis-server exited during startup ({status}) on port {}; args {:?}; log:\n{log}",
            self.port, self.args
        );
    }
}

impl Drop for RedisServer {
    /// SIGCONT (if stopped) + SIGKILL + reap, then remove the temp dir.
    fn drop(&mut self) {
        self.kill();
        if !self.dir.as_os_str().is_empty() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Keeps a server SIGSTOPped; SIGCONTs it on drop. See
/// [`RedisServer::stop_guard`].
#[derive(Debug)]
#[must_use = "the server is resumed as soon as the guard is dropped"]
pub struct StoppedGuard<'a> {
    server: &'a RedisServer,
}

impl Drop for StoppedGuard<'_> {
    fn drop(&mut self) {
        if self.server.is_running() {
            self.server.cont_process();
        }
    }
}

/// The commands an ACL user needs for everything the library does on a single primary (locks:
/// acquire, wait, release, extend, watchdog renewals, hand-off, replica acknowledgement; rate
/// limits of every algorithm), found by experiment (tests/replication/acl.rs checks both that
/// these are enough and that none can be dropped). Add the key and channel patterns of the
/// prefix: [`library_acl_rules`] builds the whole rule set.
///
/// A connection's handshake (`HELLO 3 AUTH`, `AUTH`) needs no rule: Redis lets every user run
/// `AUTH` and `HELLO`.
pub const LIBRARY_ACL_RULES: &[&str] = &[
    // Every operation is one Lua script, sent as EVALSHA (keys checked against `~<prefix>:*`)...
    "+evalsha",
    // ...and loaded when the server answers NOSCRIPT (first use, restart, SCRIPT FLUSH).
    "+script|load",
    // Commands the scripts call (Redis checks each against the user too):
    // locks: read the holder (acquire, release, renew, extend, hand-off, unmark); rate limits:
    // read the state (GCRA, token bucket, fixed and sliding window).
    "+get",
    // Locks: take (SET NX PX), reserve for a starving waiter ('!' PX), mint fences (SET .. GET);
    // rate limits: store the state.
    "+set",
    // Release, unmark: delete the lock key.
    "+del",
    // Read-write locks: a writer's waiting mark keeps new readers out; a permit's or read's
    // release checks for waiters to wake.
    "+exists",
    // Renewals and extend (and a retried grant); sliding log: the key's expiry.
    "+pexpire",
    // Acquire of a busy lock: the holder's remaining ttl (the wait bound).
    "+pttl",
    // Acquire: mark a held lock as waited for ('*', or '!' for a starving waiter).
    "+append",
    // Acquire, unmark: turn a '*' mark into '!' and back.
    "+setrange",
    // Fences and rate limits: the server clock.
    "+time",
    // Release, hand-off: wake the waiters on the release channel (`&<prefix>:*`); an
    // operator's force announces the key it freed on `<prefix>:revoked`.
    "+publish",
    // Sliding log: the sorted set of allowed requests.
    "+zadd",
    "+zcard",
    "+zcount",
    "+zrange",
    "+zrangebyscore",
    "+zremrangebyscore",
    // Sliding log: a refund takes back the newest entries.
    "+zpopmax",
    // Bloom filters on bitmaps: the configuration header (GETRANGE, written with SETRANGE),
    // the bitmap's size (SETBIT of its last bit), the positions (BITFIELD to add,
    // BITFIELD_RO to look up), the approximate count (BITCOUNT).
    "+getrange",
    "+setbit",
    "+bitfield",
    "+bitfield_ro",
    "+bitcount",
    // Semaphores and read holds: each permit is an entry; renewals check it is still there
    // (ZSCORE), a release removes it (ZREM).
    "+zscore",
    "+zrem",
    // Sliding log: trims the set to `limit` members, a safety net that normal use never
    // reaches (kept: the script calls it, and a refusal would fail the check half-applied).
    "+zremrangebyrank",
    // Wake-ups: waiters listen on the release channels (RESP3 push connection), and holders
    // on `<prefix>:revoked`. Without these the library still works, but a waiter only wakes
    // at its PTTL-bounded retry and a forced holder learns at its next renewal.
    "+subscribe",
    "+unsubscribe",
    // `.replicas(n, timeout)`: WAIT behind every grant, renewal and extend.
    "+wait",
];

/// Rules the library works without, but uses when it may.
pub const LIBRARY_ACL_OPTIONAL_RULES: &[&str] = &[
    // `connect` reads `INFO server` to refuse a server older than 6.2 (and, for a cluster,
    // the wrong mode) with a clear error; refused, the check is skipped. (redis-rs also sends
    // `CLIENT SETINFO` on every new connection and ignores its reply: see
    // [`handshake_acl_rules`] for the rule that keeps its refusals out of the ACL LOG.)
    "+info",
    // `bloom_filter(..).open()` asks whether the server has the RedisBloom module (`COMMAND
    // INFO BF.RESERVE`); refused, it uses bitmaps.
    "+command|info",
];

/// The rule that keeps redis-rs's `CLIENT SETINFO` (sent on every new connection; a refusal
/// is ignored, but lands in `ACL LOG`) from being refused, on the servers that accept it:
/// `+client|setinfo` on Redis 6.2 (no such subcommand, but the ACL check of `CLIENT` comes
/// first), 7.2+ and Valkey. Redis 7.0 rejects the rule as unknown, and answers the command
/// "unknown subcommand" before any ACL check: nothing to grant there.
/// [`library_acl_rules`] and [`acl_run_rules`] include it.
pub fn handshake_acl_rules() -> &'static [&'static str] {
    if server_version() == (7, 0) {
        &[]
    } else {
        &["+client|setinfo"]
    }
}

/// What a client that finds the primary through Sentinel also needs on the data nodes.
pub const LIBRARY_ACL_SENTINEL_RULES: &[&str] = &[
    // redis-rs's sentinel lookup checks that the node the sentinels name is a primary with
    // `ROLE` (falling back to `INFO replication`: with neither, `connect_sentinel` fails
    // with NoPermission).
    "+role",
];

/// Set this environment variable (to anything) to run a test binary as an ACL user: every
/// server the harness starts without credentials of its own also gets user
/// [`ACL_RUN_USER`] with [`acl_run_rules`], and [`RedisServer::url`] (what the tests give the
/// library) logs in as it, while the harness's own connections stay the `default` user.
/// `scripts/test.sh` runs the core suites this way, so they prove the README's ACL rules
/// enough for everything they do.
pub const ACL_RUN_ENV: &str = "DISTLOCK_TEST_AS_ACL_USER";
pub const ACL_RUN_USER: &str = "distlock-app";
const ACL_RUN_PASSWORD: &str = "app-secret";

/// The URL a test's own connection to the data it guards should use (a counter, a fenced
/// resource): `url` without the ACL run's application user, whose rules cover only what the
/// library runs. Any other URL is returned as it is.
pub fn resource_url(url: &str) -> String {
    let user = format!(
        "{}:{}@",
        percent_encode(ACL_RUN_USER),
        percent_encode(ACL_RUN_PASSWORD)
    );
    url.replacen(&user, "", 1)
}

/// A library client of `url` with short timeouts (300 ms to answer and to connect, one
/// reconnect), so that an outage is found quickly. Its first connection is retried a few
/// times: on a loaded machine the handshake of a healthy server can take longer than 300 ms,
/// and the tests that use it are about outages that come after the connect.
pub async fn short_client(url: &str) -> distlock::Client {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match distlock::Client::builder()
            .response_timeout(Duration::from_millis(300))
            .connect_timeout(Duration::from_millis(300))
            .reconnect_retries(1)
            .connect(url)
            .await
        {
            Ok(client) => return client,
            Err(e) if attempt < 5 && e.is_transient() => {
                eprintln!("connect to {url}, attempt {attempt}: {e}; retrying");
            }
            Err(e) => panic!("connect to {url}: {e}"),
        }
    }
}

/// A connection to the data a test guards ([`resource_url`] of `url`), with the roomy timeouts
/// of [`RedisServer::conn`]. redis-rs's default response timeout (500 ms) is shorter than a
/// busy machine can delay an answer, which made children die on a plain `INCR`.
pub async fn resource_conn(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(resource_url(url)).expect("url");
    inspection_conn(&client)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"))
}

/// How many clients the server counts on `channel` (`PUBSUB NUMSUB`).
pub async fn subscribers(conn: &mut redis::aio::MultiplexedConnection, channel: &str) -> u64 {
    let (_, count): (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(conn)
        .await
        .expect("PUBSUB NUMSUB");
    count
}

/// Waits (bounded, 10 s) until at least `at_least` clients listen on `channel`: a message
/// published before a client listens reaches nobody. `who` names the listeners in the failure.
pub async fn until_subscribed(
    conn: &mut redis::aio::MultiplexedConnection,
    channel: &str,
    at_least: u64,
    who: &str,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let listening = subscribers(conn, channel).await;
        if listening >= at_least {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{listening} of {at_least} {who} listen on {channel}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn acl_run() -> bool {
    std::env::var_os(ACL_RUN_ENV).is_some()
}

/// [`LIBRARY_ACL_RULES`], [`LIBRARY_ACL_OPTIONAL_RULES`] and [`handshake_acl_rules`], owned:
/// the library's part of every ACL user the tests make.
fn library_rules() -> impl Iterator<Item = String> {
    LIBRARY_ACL_RULES
        .iter()
        .chain(LIBRARY_ACL_OPTIONAL_RULES)
        .chain(handshake_acl_rules())
        .map(|r| (*r).to_owned())
}

/// The ACL run's user: the library's rules ([`LIBRARY_ACL_RULES`], the optional ones and
/// [`handshake_acl_rules`]) on
/// every key and channel (the tests use many prefixes; key patterns are tested apart, in
/// tests/replication/acl.rs), plus what the tests themselves ask of the library's
/// connection: `+select` (a URL with a database number), `+keys` (the `__inspect().keys()`
/// hook), and `+scan`, the operators' rule for `held_locks` (the guide lists it apart: a
/// service that does not list locks does not need it).
pub fn acl_run_rules() -> Vec<String> {
    let mut rules = vec![
        "on".to_owned(),
        format!(">{ACL_RUN_PASSWORD}"),
        "~*".to_owned(),
        "&*".to_owned(),
    ];
    rules.extend(library_rules());
    rules.extend(["+select".to_owned(), "+keys".to_owned(), "+scan".to_owned()]);
    rules
}

/// The full rule set of a library user with password `password` on key prefix `prefix`:
/// `on`, `>password`, `resetchannels`, `~<prefix>:*` (every key the library makes:
/// `<prefix>:lock:{..}`, `<prefix>:fence`, `<prefix>:rl:..`), `&<prefix>:*` (the release
/// channels `<prefix>:released:{..}`), then [`LIBRARY_ACL_RULES`],
/// [`LIBRARY_ACL_OPTIONAL_RULES`] and [`handshake_acl_rules`] (for the server on `PATH`).
pub fn library_acl_rules(password: &str, prefix: &str) -> Vec<String> {
    let mut rules = vec![
        "on".to_owned(),
        format!(">{password}"),
        "resetchannels".to_owned(),
        format!("~{prefix}:*"),
        format!("&{prefix}:*"),
    ];
    rules.extend(library_rules());
    rules
}

/// Panics unless `redis-server --version` reports at least 6.2, with a message
/// that says which version was found and how to get a newer one.
///
/// Runs `redis-server --version` once per process; later calls repeat the
/// first verdict. [`RedisServerBuilder::start`] calls it before spawning
/// anything; call it first in any other harness that starts `redis-server`.
pub fn require_supported_version() {
    server_version();
}

/// The (major, minor) version of the `redis-server` on `PATH`, after
/// [`require_supported_version`]'s check (which panics).
pub fn server_version() -> (u32, u32) {
    static VERDICT: OnceLock<Result<(u32, u32), String>> = OnceLock::new();
    match VERDICT.get_or_init(check_version) {
        Ok(version) => *version,
        Err(message) => panic!("{message}"),
    }
}

/// Panics unless the `redis-server` on `PATH` is at least `need`, saying that `what` needs it
/// and why (`because`), for a harness whose servers or features are newer than 6.2 (a Redis
/// Cluster: sharded pub/sub and `cluster-port` are 7.0). scripts/version-matrix.sh leaves such
/// suites out on older servers, with the same reason.
pub fn require_version(need: (u32, u32), what: &str, because: &str) {
    let found = server_version();
    let (major, minor) = need;
    assert!(
        found >= need,
        "{what} needs redis-server ≥ {major}.{minor} ({because}), found {}.{}: put a newer \
         one first on PATH",
        found.0,
        found.1
    );
}

/// `--enable-debug-command yes` for a server that knows the option (7.0+), nothing for an
/// older one, which always allows `DEBUG` (see [`DEBUG_COMMAND_OPTION_SINCE`]).
pub fn debug_command_args() -> &'static [&'static str] {
    if server_version() >= DEBUG_COMMAND_OPTION_SINCE {
        &["--enable-debug-command", "yes"]
    } else {
        &[]
    }
}

/// [`debug_command_args`] as a config file line (`"enable-debug-command yes\n"` or `""`).
pub fn debug_command_config() -> &'static str {
    if server_version() >= DEBUG_COMMAND_OPTION_SINCE {
        "enable-debug-command yes\n"
    } else {
        ""
    }
}

/// Runs `redis-server --version` and compares it with [`MIN_VERSION`].
fn check_version() -> Result<(u32, u32), String> {
    let output = match Command::new(REDIS_SERVER)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
    {
        Ok(output) => output,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(NOT_FOUND_HELP.to_owned()),
        Err(e) => return Err(format!("failed to run `{REDIS_SERVER} --version`: {e}")),
    };
    let banner = String::from_utf8_lossy(&output.stdout);
    let banner = banner.trim();
    let Some((found, version)) = parse_version(banner) else {
        return Err(format!(
            "cannot read the version of {REDIS_SERVER} from `{REDIS_SERVER} --version`, \
             which printed {banner:?} ({})",
            output.status
        ));
    };
    if version < MIN_VERSION {
        let (major, minor) = MIN_VERSION;
        return Err(format!(
            "the test harness needs redis-server ≥ {major}.{minor} (the oldest distlock \
             supports), found {found}. Install a newer one \
             (`./scripts/test.sh --check-only` says how) or put one first on PATH"
        ));
    }
    Ok(version)
}

/// The version in a `redis-server --version` banner (`Redis server v=7.0.15
/// sha=...`; Valkey prints `Valkey server v=8.0.1 ...`): the text after `v=`
/// and its (major, minor).
fn parse_version(banner: &str) -> Option<(&str, (u32, u32))> {
    let found = banner
        .split_whitespace()
        .find_map(|word| word.strip_prefix("v="))?;
    let mut parts = found.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((found, (major, minor)))
}

/// Sends `sig` to `pid`, panicking on failure.
fn send_signal(pid: u32, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).expect("pid fits in pid_t");
    // SAFETY: kill(2) has no memory-safety preconditions; `pid` is our own,
    // not yet reaped child, so it cannot refer to a recycled pid.
    let rc = unsafe { libc::kill(pid, sig) };
    assert!(
        rc == 0,
        "kill({pid}, {sig}) failed: {}",
        io::Error::last_os_error()
    );
}

/// Percent-encodes everything but RFC 3986 unreserved characters, for URL
/// userinfo.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// How many times the server behind `conn` has run `command` (lower case, as `INFO
/// commandstats` names it: `evalsha`, `set`, `scan`...), 0 if never.
pub async fn command_calls(conn: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().expect("a count"))
}
