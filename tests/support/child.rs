//! Tests that need several OS processes re-run their own test binary as a child: the child
//! runs one ignored entry test (selected with `--exact --ignored`) in the role named in its
//! environment, and reports to the parent in lines that start with [`MARK`].
//!
//! When a child does not report or does not exit cleanly, the failure says why: whether it is
//! still running, its exit status or the signal that killed it, and the last lines it wrote to
//! stderr (where its panic message is). Everything it writes to stderr is also passed on to
//! the test's own output, which libtest shows for a failed test.

use std::collections::VecDeque;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const ROLE_VAR: &str = "DISTLOCK_TEST_CHILD_ROLE";
const URL_VAR: &str = "DISTLOCK_TEST_REDIS_URL";
/// Start of every report line.
pub const MARK: &str = "CHILD ";
/// How many of the child's last stderr lines a failure shows.
const STDERR_TAIL: usize = 40;

/// In a child: its (role, Redis URL). `None` in a normal test run, where the entry test then
/// does nothing.
pub fn role() -> Option<(String, String)> {
    Some((std::env::var(ROLE_VAR).ok()?, std::env::var(URL_VAR).ok()?))
}

/// In a child: reports `line` to the parent at once.
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{MARK}{line}");
    let _ = out.flush();
}

/// In a child: waits for `tasks` to end (a panic in one fails the child), then reports `DONE`.
pub async fn finish_tasks(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for task in tasks {
        task.await.expect("task");
    }
    say("DONE");
}

/// Runs `count` children of this binary's `entry` test in `role` against `url` to the end:
/// waits up to `within` for each one's `DONE` report, then up to 10 s for each to exit
/// successfully; a child that does not fails the test with why (see [`ChildProcess`]).
pub fn run_children_to_done(entry: &str, role: &str, url: &str, count: usize, within: Duration) {
    let children: Vec<ChildProcess> = (0..count)
        .map(|_| ChildProcess::spawn(entry, role, url))
        .collect();
    for child in &children {
        child.expect_line("DONE", within);
    }
    for child in children {
        child.wait_success(Duration::from_secs(10));
    }
}

/// Starts this test binary again to run only its ignored test `entry` (e.g.
/// `processes::child_entry`), with `env` set and stdout and stderr piped. Returns the child
/// and the lines it reports (those that hold `mark`, from there on, without it), read by a
/// thread of their own.
pub fn spawn_self(
    entry: &str,
    env: &[(&str, &std::ffi::OsStr)],
    mark: &'static str,
) -> (Child, mpsc::Receiver<String>) {
    let exe = std::env::current_exe().expect("path of this test binary");
    let mut child = Command::new(exe)
        .args([
            "--exact",
            entry,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a child test process");
    let stdout = child.stdout.take().expect("child stdout");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest may have printed `test ... ` on the same line before ours.
            if let Some(at) = line.find(mark)
                && tx.send(line[at + mark.len()..].to_owned()).is_err()
            {
                return;
            }
        }
    });
    (child, lines)
}

/// A child process running this test binary's `entry` test in `role`; killed on drop.
pub struct ChildProcess {
    /// In a mutex so that `&self` methods can ask whether it has exited.
    child: Mutex<Child>,
    pid: u32,
    role: String,
    lines: mpsc::Receiver<String>,
    /// The last [`STDERR_TAIL`] lines the child wrote to stderr.
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// Reads the child's stderr until it is closed.
    stderr_reader: Option<JoinHandle<()>>,
}

impl ChildProcess {
    /// `entry` is the entry test's full path in this binary, e.g. `processes::child_entry`.
    pub fn spawn(entry: &str, role: &str, url: &str) -> Self {
        let (mut child, lines) = spawn_self(
            entry,
            &[(ROLE_VAR, role.as_ref()), (URL_VAR, url.as_ref())],
            MARK,
        );
        let pid = child.id();
        let stderr = child.stderr.take().expect("child stderr");
        let stderr_tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL)));
        let stderr_reader = std::thread::spawn({
            let tail = stderr_tail.clone();
            let role = role.to_owned();
            move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    // Shown with the test's output if the test fails (threads spawned by a
                    // test inherit its output capture).
                    eprintln!("[child {pid} {role}] {line}");
                    let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
                    if tail.len() == STDERR_TAIL {
                        tail.pop_front();
                    }
                    tail.push_back(line);
                }
            }
        });
        Self {
            child: Mutex::new(child),
            pid,
            role: role.to_owned(),
            lines,
            stderr_tail,
            stderr_reader: Some(stderr_reader),
        }
    }

    /// Waits for a report starting with `prefix` and returns it; if none comes, fails with
    /// why (see [`Self::why`]).
    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn expect_line(&self, prefix: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                    "no `{prefix}` line from the child within {within:?}: {}",
                    self.why(Duration::ZERO)
                ),
                // Its stdout was closed: it has exited or is about to.
                Err(mpsc::RecvTimeoutError::Disconnected) => panic!(
                    "no `{prefix}` line from the child, whose stdout closed: {}",
                    self.why(Duration::from_secs(5))
                ),
            }
        }
    }

    /// Sends `signal` to the child.
    pub fn signal(&self, signal: i32) {
        let pid = i32::try_from(self.pid).expect("pid");
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own child.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal})");
    }

    /// Waits for the child to exit, and asserts it succeeded (saying why not if it did not).
    pub fn wait_success(self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.exit_status() {
                assert!(
                    status.success(),
                    "the child failed: {}",
                    self.why(Duration::ZERO)
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the child did not exit within {within:?}: {}",
                self.why(Duration::ZERO)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the child to exit (e.g. after a SIGKILL) and returns how it ended.
    pub fn wait_exit(&self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.exit_status() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the child did not exit within {within:?}: {}",
                self.why(Duration::ZERO)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The child's exit status, if it has exited.
    fn exit_status(&self) -> Option<ExitStatus> {
        self.child
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .try_wait()
            .expect("wait for the child")
    }

    /// Why the child is not doing what the test expects: whether it is still running (after
    /// waiting up to `grace` for it to exit), how it ended, and its last stderr lines.
    fn why(&self, grace: Duration) -> String {
        let deadline = Instant::now() + grace;
        let mut status = self.exit_status();
        while status.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            status = self.exit_status();
        }
        let state = match status {
            None => "it is still running".to_owned(),
            Some(status) => describe(status),
        };
        // Once it has exited, the reader gets the rest of its stderr (bounded: a grandchild
        // could hold the pipe open).
        if status.is_some() {
            let until = Instant::now() + Duration::from_secs(1);
            while self
                .stderr_reader
                .as_ref()
                .is_some_and(|r| !r.is_finished())
                && Instant::now() < until
            {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let tail = self
            .stderr_tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let tail = if tail.is_empty() {
            "(nothing)".to_owned()
        } else {
            tail.iter()
                .map(|l| format!("\n    {l}"))
                .collect::<String>()
        };
        format!(
            "child {} (role `{}`): {state}; its last stderr lines: {tail}",
            self.pid, self.role
        )
    }
}

/// How a process ended, in words: its exit code, or the signal that killed it.
fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        let hint = if code == 101 {
            " (a panic: the message is in its stderr)"
        } else {
            ""
        };
        return format!("it exited with code {code}{hint}");
    }
    let Some(signal) = status.signal() else {
        return format!("it ended: {status}");
    };
    let name = match signal {
        libc::SIGKILL => " (SIGKILL: by the test, or by the kernel's OOM killer)",
        libc::SIGSEGV => " (SIGSEGV)",
        libc::SIGABRT => " (SIGABRT: an abort, e.g. a panic while panicking)",
        libc::SIGBUS => " (SIGBUS)",
        libc::SIGTERM => " (SIGTERM)",
        libc::SIGINT => " (SIGINT)",
        libc::SIGPIPE => " (SIGPIPE)",
        _ => "",
    };
    let core = if status.core_dumped() {
        ", core dumped"
    } else {
        ""
    };
    format!("it was killed by signal {signal}{name}{core}")
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(PoisonError::into_inner);
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A child of this binary's `entry` test in `role` that serves HTTP, and the port it said it
/// listens on (`LISTENING <port>`, from [`serve_and_say`]).
pub fn listening(entry: &str, role: &str, url: &str) -> (ChildProcess, u16) {
    let child = ChildProcess::spawn(entry, role, url);
    let port = child
        .expect_line("LISTENING", Duration::from_secs(60))
        .trim_start_matches("LISTENING ")
        .parse()
        .expect("a port after LISTENING");
    (child, port)
}

/// In a child: serves `app` on a free loopback port, after saying `LISTENING <port>` to the
/// parent; until the child is killed.
pub async fn serve_and_say(app: axum::Router) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let port = listener.local_addr().expect("bound address").port();
    say(&format!("LISTENING {port}"));
    axum::serve(listener, app).await.expect("serve");
}
