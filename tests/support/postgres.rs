//! A real PostgreSQL server per test, on a free loopback port, in a temp dir of its own.
//!
//! [`PostgresServer::start`] runs Debian's server binaries (package `postgresql`, under
//! `/usr/lib/postgresql/<version>/bin/`; the newest version there is used, or the directory
//! named by `DISTLOCK_TEST_PG_BIN`): `initdb` makes a fresh cluster (trust authentication for
//! the superuser `postgres`, no fsync), then `postgres` runs it in the foreground as this
//! process's child, listening on 127.0.0.1 only (no Unix socket), its output in a log file
//! that failure messages quote. Dropping the server asks it for an immediate shutdown
//! (SIGQUIT), SIGKILLs it if it is still there after a few seconds, reaps it and removes the
//! directory; a parent-death signal kills it if the test process dies first.
//!
//! PostgreSQL refuses to run as root, and tests run as root in CI. Run as root, the harness
//! starts `initdb` and `postgres` under the unprivileged `postgres` account the package
//! creates (or `nobody` without it), by setting the child's uid and gid before it runs
//! (`CommandExt::uid`/`gid`, which also drop supplementary groups), and gives that account the
//! temp dir. Run as anyone else, they run as that user.
//!
//! A missing binary fails the test with instructions; nothing is ever skipped.

use std::fs;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::files::{free_port, log_since, make_temp_dir};
use crate::support::process::die_with_parent;

/// Environment variable naming a directory with `initdb` and `postgres`, instead of the
/// newest `/usr/lib/postgresql/<version>/bin`.
pub const BIN_ENV: &str = "DISTLOCK_TEST_PG_BIN";
/// Where Debian's packages put each version's server binaries.
const DEBIAN_LIB: &str = "/usr/lib/postgresql";
/// The superuser `initdb` makes.
pub const SUPERUSER: &str = "postgres";

const NOT_FOUND_HELP: &str = "PostgreSQL's server binaries (initdb, postgres) not found under \
    /usr/lib/postgresql/<version>/bin (or in $DISTLOCK_TEST_PG_BIN): install them with \
    `sudo apt-get install -y postgresql` (Debian/Ubuntu) or run ./scripts/test.sh, which \
    installs them";

/// How long `initdb` may take.
const INITDB_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a shutdown (SIGQUIT) may take before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Fresh ports tried before giving up.
const PORT_ATTEMPTS: usize = 5;
const LOG_FILE: &str = "postgres.log";
const READY_LINE: &str = "database system is ready to accept connections";
const PORT_IN_USE: &str = "Address already in use";

/// A running PostgreSQL server, shut down and removed on drop.
pub struct PostgresServer {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
}

/// Who runs the server: this process's user, or (as root) an unprivileged account.
#[derive(Clone, Copy)]
struct RunAs {
    account: Option<(u32, u32)>,
}

impl PostgresServer {
    /// Makes a fresh cluster and starts a server on it; returns once it accepts connections.
    ///
    /// # Panics
    /// If the binaries are missing, `initdb` fails, or the server does not come up; the
    /// message carries their output and the server log.
    pub fn start() -> Self {
        let bin = server_bin();
        let run_as = RunAs::current();
        let dir = make_temp_dir("distlock-pg-");
        if let Some((uid, gid)) = run_as.account {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .unwrap_or_else(|e| panic!("cannot give {} to uid {uid}: {e}", dir.display()));
        }
        initdb(&bin, &dir, run_as);
        let mut last_log = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            let mut server = Self {
                child: None,
                dir: dir.clone(),
                port,
            };
            match server.spawn_and_wait(&bin, run_as) {
                Ok(()) => return server,
                Err(log) => {
                    // Another process took the port meanwhile: keep the cluster, try another.
                    server.dir = PathBuf::new();
                    last_log = log;
                }
            }
        }
        let _ = fs::remove_dir_all(&dir);
        panic!(
            "postgres could not bind a free port in {PORT_ATTEMPTS} attempts; last log:\n{last_log}"
        );
    }

    /// The TCP port it listens on, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A `tokio-postgres` connection string for the superuser's database.
    pub fn config(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user={SUPERUSER} dbname=postgres connect_timeout=10",
            self.port
        )
    }

    /// A new connection (its connection task spawned on the current runtime).
    pub async fn connect(&self) -> tokio_postgres::Client {
        connect(&self.config()).await.unwrap_or_else(|e| {
            panic!("cannot connect to the test PostgreSQL: {e}\n{}", self.log())
        })
    }

    /// The server's log, for failure messages.
    pub fn log(&self) -> String {
        let text = fs::read_to_string(self.dir.join(LOG_FILE)).unwrap_or_default();
        format!("--- PostgreSQL log ({}) ---\n{text}", self.dir.display())
    }

    fn spawn_and_wait(&mut self, bin: &Path, run_as: RunAs) -> Result<(), String> {
        let log_path = self.dir.join(LOG_FILE);
        let offset = fs::metadata(&log_path).map_or(0, |m| m.len());
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("open the PostgreSQL log file");
        let mut cmd = Command::new(bin.join("postgres"));
        cmd.arg("-D")
            .arg(self.dir.join("data"))
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "unix_socket_directories="])
            .args(["-c", "fsync=off"])
            .args(["-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off"])
            .args(["-c", "max_connections=40"])
            .args(["-c", "shared_buffers=16MB"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("duplicate the log file handle"))
            .stderr(log);
        run_as.apply(&mut cmd);
        die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.join("postgres").display()));
        self.child = Some(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let text = log_since(&log_path, offset);
            if text.contains(READY_LINE) {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().expect("wait for postgres"));
            if let Some(status) = exited {
                self.child = None;
                if text.contains(PORT_IN_USE) {
                    return Err(text);
                }
                panic!(
                    "postgres exited ({status}) before accepting connections:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not accept connections within {READY_TIMEOUT:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for PostgresServer {
    /// Immediate shutdown (SIGQUIT), SIGKILL after [`STOP_TIMEOUT`], reap, remove the dir.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own,
                // not yet reaped child.
                unsafe { libc::kill(pid, libc::SIGQUIT) };
            }
            let deadline = Instant::now() + STOP_TIMEOUT;
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        if !self.dir.as_os_str().is_empty() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Connects to `config` and spawns the connection's task on the current runtime.
pub async fn connect(config: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(config, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        // Ends when the client is dropped or the server goes away; the client's calls report
        // the error.
        let _ = connection.await;
    });
    Ok(client)
}

impl RunAs {
    /// Root runs the server as `postgres` (or `nobody`); anyone else as themselves.
    fn current() -> Self {
        // SAFETY: geteuid(2) has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Self { account: None };
        }
        let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
        let account = ["postgres", "nobody"]
            .iter()
            .find_map(|name| account(&passwd, name))
            .unwrap_or_else(|| {
                panic!(
                    "running as root, and /etc/passwd has neither a `postgres` nor a `nobody` \
                     account to run PostgreSQL as (it refuses to run as root): \
                     `sudo apt-get install -y postgresql` creates `postgres`"
                )
            });
        Self {
            account: Some(account),
        }
    }

    fn apply(self, cmd: &mut Command) {
        if let Some((uid, gid)) = self.account {
            cmd.uid(uid).gid(gid);
        }
    }
}

/// The uid and gid of account `name` in the text of /etc/passwd.
fn account(passwd: &str, name: &str) -> Option<(u32, u32)> {
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        if fields.first() != Some(&name) || fields.len() < 4 {
            return None;
        }
        Some((fields[2].parse().ok()?, fields[3].parse().ok()?))
    })
}

/// `initdb` into `<dir>/data`: the superuser `postgres`, trusted on 127.0.0.1, UTF-8.
fn initdb(bin: &Path, dir: &Path, run_as: RunAs) {
    let mut cmd = Command::new(bin.join("initdb"));
    cmd.arg("-D")
        .arg(dir.join("data"))
        .args([
            "-U",
            SUPERUSER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
        ])
        // initdb changes into the data dir's parent and reads its own path: run it from a
        // directory the account may enter.
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    run_as.apply(&mut cmd);
    let started = Instant::now();
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.join("initdb").display()));
    let out = child.wait_with_output().expect("wait for initdb");
    assert!(
        out.status.success(),
        "initdb failed ({}) after {:?}:\n{}\n{}",
        out.status,
        started.elapsed(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        started.elapsed() < INITDB_TIMEOUT,
        "initdb took {:?}",
        started.elapsed()
    );
}

/// The directory holding `initdb` and `postgres`: `$DISTLOCK_TEST_PG_BIN`, or the newest
/// version under /usr/lib/postgresql. Panics with install instructions when there is none.
fn server_bin() -> PathBuf {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(dir) = std::env::var_os(BIN_ENV) {
        let dir = PathBuf::from(dir);
        assert!(
            has_both(&dir),
            "{BIN_ENV}={} has no initdb and postgres",
            dir.display()
        );
        return dir;
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = fs::read_dir(DEBIAN_LIB)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let version = name
                .split('.')
                .map(|p| p.parse().ok())
                .collect::<Option<Vec<u32>>>()?;
            let bin = entry.path().join("bin");
            has_both(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .unwrap_or_else(|| panic!("{NOT_FOUND_HELP}"))
}
