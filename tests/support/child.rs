//! Tests that need several OS processes re-run their own test binary as a child: the child
//! runs one ignored entry test (selected with `--exact --ignored`) in the role named in its
//! environment, and reports to the parent in lines that start with [`MARK`].

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const ROLE_VAR: &str = "DISTLOCK_TEST_CHILD_ROLE";
const URL_VAR: &str = "DISTLOCK_TEST_REDIS_URL";
/// Start of every report line.
pub const MARK: &str = "CHILD ";

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

/// A child process running this test binary's `entry` test in `role`; killed on drop.
pub struct ChildProcess {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl ChildProcess {
    /// `entry` is the entry test's full path in this binary, e.g. `processes::child_entry`.
    pub fn spawn(entry: &str, role: &str, url: &str) -> Self {
        let exe = std::env::current_exe().expect("path of this test binary");
        let mut child = Command::new(exe)
            .args([
                "--exact",
                entry,
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE_VAR, role)
            .env(URL_VAR, url)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn a child test process");
        let stdout = child.stdout.take().expect("child stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest may have printed `test ... ` on the same line before ours.
                if let Some(at) = line.find(MARK)
                    && tx.send(line[at + MARK.len()..].to_owned()).is_err()
                {
                    return;
                }
            }
        });
        Self { child, lines }
    }

    /// Waits for a report starting with `prefix` and returns it.
    pub fn expect_line(&self, prefix: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => {}
                Err(e) => panic!("no `{prefix}` line from the child within {within:?}: {e}"),
            }
        }
    }

    /// Sends `signal` to the child.
    pub fn signal(&self, signal: i32) {
        let pid = i32::try_from(self.child.id()).expect("pid");
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own child.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal})");
    }

    /// Waits for the child to exit, and asserts it succeeded.
    pub fn wait_success(mut self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the child") {
                assert!(status.success(), "the child failed: {status}");
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the child did not exit within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
