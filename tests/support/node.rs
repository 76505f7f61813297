//! The process half of one node of a multi-process set-up (a Cluster node, a Sentinel
//! set-up's server or sentinel, a TLS server): spawned tied to the test
//! ([`spawn_tied`](super::process::spawn_tied)), waited for until ready, its logs, SIGSTOP /
//! SIGCONT / SIGKILL, and a new run in the same dir (so on the same port) after a kill. The
//! set-ups keep what differs (ports, config, what "ready" means) and delegate the rest.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::future::Future;
use std::io::{self, BufRead, BufReader, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use redis::aio::MultiplexedConnection;

use super::files::{LOG_FILE, STDIO_FILE, log_since, read_logs, tail};
use super::process::{TiedChild, spawn_tied};

/// One node's process: its dir (cwd, log and stdio files), and the running child if any
/// (SIGKILLed and reaped when dropped, as every [`TiedChild`]).
#[derive(Debug)]
pub struct NodeProcess {
    /// What runs (`redis-server`, `redis-sentinel`): spawned, and named in messages.
    binary: &'static str,
    /// How to install `binary`, for the panic when it is missing.
    install_help: &'static str,
    dir: PathBuf,
    state: Mutex<ProcessState>,
}

#[derive(Debug)]
struct ProcessState {
    child: Option<TiedChild>,
    /// Pid of the most recently spawned process.
    pid: u32,
    /// Whether it is SIGSTOPped by us.
    stopped: bool,
}

/// One readiness check of a freshly spawned process ([`NodeProcess::poll_ready`]).
pub enum Poll {
    Ready,
    NotYet,
    /// It exited because its port was taken (it is reaped); carries its log.
    PortInUse(String),
    /// It exited or vanished for another reason.
    Failed(String),
}

impl NodeProcess {
    /// A node that runs `binary` in `dir` (not spawned yet).
    pub fn new(binary: &'static str, install_help: &'static str, dir: PathBuf) -> Self {
        NodeProcess {
            binary,
            install_help,
            dir,
            state: Mutex::new(ProcessState {
                child: None,
                pid: 0,
                stopped: false,
            }),
        }
    }

    /// The executable it runs.
    pub fn binary(&self) -> &'static str {
        self.binary
    }

    /// Its dir (cwd, log and stdio files).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Pid of the current process (the last one's after [`kill`](Self::kill)).
    pub fn pid(&self) -> u32 {
        self.state().pid
    }

    /// Whether the process runs (a SIGSTOPped one counts as running).
    pub fn is_running(&self) -> bool {
        self.state().child.is_some()
    }

    /// Whether the process runs and is not SIGSTOPped.
    pub fn is_serving(&self) -> bool {
        let p = self.state();
        p.child.is_some() && !p.stopped
    }

    /// The log file (all runs) and anything the process printed on stdout/stderr. Never
    /// panics.
    pub fn log(&self) -> String {
        read_logs(&self.dir, self.binary)
    }

    /// The last `lines` lines of [`log`](Self::log).
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log(), lines)
    }

    /// SIGKILLs and reaps the process (no-op if not running); its dir stays for the next run.
    pub fn kill(&self) {
        let mut p = self.state();
        p.stopped = false;
        // TiedChild's drop: unregister, SIGKILL (stopped or not), reap.
        drop(p.child.take());
    }

    /// Freezes the process with SIGSTOP.
    ///
    /// # Panics
    ///
    /// If it is not running (`"{who} is not running"`).
    pub fn stop(&self, who: &str) {
        self.signal(libc::SIGSTOP, who);
        self.state().stopped = true;
    }

    /// Resumes a process frozen by [`stop`](Self::stop) (harmless if it is not stopped).
    ///
    /// # Panics
    ///
    /// If it is not running (`"{who} is not running"`).
    pub fn cont(&self, who: &str) {
        self.signal(libc::SIGCONT, who);
        self.state().stopped = false;
    }

    fn signal(&self, sig: libc::c_int, who: &str) {
        self.state()
            .child
            .as_ref()
            .unwrap_or_else(|| panic!("{who} is not running"))
            .signal(sig);
    }

    /// Spawns `binary args...` in the dir, its stdout and stderr appended to the stdio file,
    /// without waiting for it, and returns the log offset at which this run's output starts
    /// (for [`poll_ready`](Self::poll_ready)).
    ///
    /// # Panics
    ///
    /// If the binary is missing (with how to install it) or cannot be spawned.
    pub fn spawn<I, S>(&self, args: I) -> u64
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let log_offset = fs::metadata(self.dir.join(LOG_FILE)).map_or(0, |m| m.len());
        let stdio = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(STDIO_FILE))
            .expect("create the node's stdio file");
        let stderr = stdio.try_clone().expect("duplicate stdio file handle");
        let mut cmd = Command::new(self.binary);
        cmd.args(args)
            // Absolute paths in the arguments and config, and a cwd that we own (it also
            // tells which test process a redis process belongs to: see the leak tests).
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(stdio)
            .stderr(stderr);
        let child =
            spawn_tied(cmd).unwrap_or_else(|e| spawn_error(self.binary, &e, self.install_help));
        let mut p = self.state();
        p.pid = child.pid();
        p.stopped = false;
        p.child = Some(child);
        log_offset
    }

    /// One readiness check of the process spawned at `log_offset`: ready once its log (this
    /// run's part) has `ready_line` and `answers()` says it serves.
    pub fn poll_ready(
        &self,
        log_offset: u64,
        ready_line: &str,
        answers: impl FnOnce() -> bool,
    ) -> Poll {
        let exited = {
            let mut p = self.state();
            match p.child.as_mut() {
                Some(child) => child.try_wait(),
                None => return Poll::Failed("the process is gone (killed meanwhile?)".into()),
            }
        };
        let since = log_since(&self.dir.join(LOG_FILE), log_offset);
        if let Some(status) = exited {
            self.state().child = None;
            if since.contains("Address already in use") {
                return Poll::PortInUse(self.log());
            }
            return Poll::Failed(format!("exited during start-up ({status})"));
        }
        if since.contains(ready_line) && answers() {
            Poll::Ready
        } else {
            Poll::NotYet
        }
    }

    fn state(&self) -> MutexGuard<'_, ProcessState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Panics with `install_help` if `err` says `binary` does not exist, or with the error.
pub fn spawn_error(binary: &str, err: &io::Error, install_help: &str) -> ! {
    if err.kind() == io::ErrorKind::NotFound {
        panic!("{binary} not found on PATH: {install_help}");
    }
    panic!("failed to spawn {binary}: {err}");
}

/// Sends a raw RESP `PING` and reports whether the server answered. Any answer but
/// `-LOADING` counts: with `requirepass` an unauthenticated PING gets `-NOAUTH`, which still
/// proves the server serves.
pub fn ping(addr: SocketAddr) -> bool {
    let attempt = || -> io::Result<String> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
        stream.set_read_timeout(Some(Duration::from_secs(1)))?;
        stream.set_write_timeout(Some(Duration::from_secs(1)))?;
        stream.write_all(b"*1\r\n$4\r\nPING\r\n")?;
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line)?;
        Ok(line)
    };
    matches!(attempt(), Ok(line) if !line.is_empty() && !line.starts_with("-LOADING"))
}

/// Runs `fut` to completion on a fresh current-thread runtime in a scoped thread, so that
/// sync code can wait on async helpers even when called from inside another runtime. Panics
/// propagate.
pub fn block_on_isolated<F>(fut: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    std::thread::scope(|scope| {
        let handle = scope.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("build a tokio runtime for the test harness")
                .block_on(fut)
        });
        match handle.join() {
            Ok(output) => output,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Timeouts of the harness's own connections for inspection and fault injection (`conn()` of
/// every set-up): roomy, so that `DEBUG SLEEP` of a few seconds or a busy machine does not
/// fail them (redis-rs's default response timeout is 500 ms).
pub const CONN_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const CONN_RESPONSE_TIMEOUT: Duration = Duration::from_secs(15);

/// Timeouts of the harness's own short-lived probing connections ([`probe`]).
pub const PROBE_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
pub const PROBE_RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);

/// The config of the harness's inspection connections: [`CONN_CONNECT_TIMEOUT`] and
/// [`CONN_RESPONSE_TIMEOUT`].
pub fn inspection_conn_config() -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONN_CONNECT_TIMEOUT))
        .set_response_timeout(Some(CONN_RESPONSE_TIMEOUT))
}

/// A fresh multiplexed connection from `client` with [`inspection_conn_config`].
pub async fn inspection_conn(client: &redis::Client) -> redis::RedisResult<MultiplexedConnection> {
    client
        .get_multiplexed_async_connection_with_config(&inspection_conn_config())
        .await
}

/// Runs `cmd` on a fresh short-lived connection to `addr` (no credentials), with the probe
/// timeouts; any failure as text.
pub async fn probe<T: redis::FromRedisValue>(
    addr: SocketAddr,
    cmd: &redis::Cmd,
) -> Result<T, String> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(PROBE_CONNECT_TIMEOUT))
        .set_response_timeout(Some(PROBE_RESPONSE_TIMEOUT));
    let client = redis::Client::open(format!("redis://{addr}/")).map_err(|e| e.to_string())?;
    let mut conn: MultiplexedConnection = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    cmd.query_async(&mut conn).await.map_err(|e| e.to_string())
}

/// `INFO <section>` of `addr` as a field map ([`probe`]).
pub async fn info_section(
    addr: SocketAddr,
    section: &str,
) -> Result<HashMap<String, String>, String> {
    let text = probe::<String>(addr, redis::cmd("INFO").arg(section))
        .await
        .map_err(|e| format!("{addr}: INFO {section}: {e}"))?;
    Ok(text
        .lines()
        .filter_map(|l| l.trim().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}
