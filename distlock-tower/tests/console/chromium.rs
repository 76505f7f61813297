//! A real headless Chromium, driven over the DevTools protocol on a pipe
//! (`--remote-debugging-pipe`: the browser reads commands on its fd 3 and writes answers on
//! its fd 4, each message JSON ending in a NUL byte). No web driver and no mock: the page's
//! own JavaScript runs, fetches from the server over TCP and renders.
//!
//! The binary is `$DISTLOCK_TEST_CHROMIUM` if set (a path), else the first of `chromium`,
//! `chromium-browser`, `google-chrome` on `PATH`; without one the test fails with the command
//! that installs it.

use std::fs::File;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A running headless Chromium with one page; killed on drop.
pub struct Browser {
    child: Child,
    commands: File,
    answers: mpsc::Receiver<Value>,
    session: String,
    next_id: u64,
    profile: std::path::PathBuf,
}

/// The browser binary, or a panic saying how to install one.
fn binary() -> String {
    if let Ok(named) = std::env::var("DISTLOCK_TEST_CHROMIUM") {
        assert!(
            std::path::Path::new(&named).is_file(),
            "DISTLOCK_TEST_CHROMIUM={named:?} is not a file"
        );
        return named;
    }
    let path = std::env::var("PATH").unwrap_or_default();
    for candidate in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in path.split(':') {
            let full = std::path::Path::new(dir).join(candidate);
            if full.is_file() {
                return full.to_string_lossy().into_owned();
            }
        }
    }
    panic!(
        "no Chromium found (tried chromium, chromium-browser, google-chrome on PATH; \
         DISTLOCK_TEST_CHROMIUM names another): the console's page test needs one. Install \
         it: sudo apt-get install -y chromium (./scripts/test.sh does)"
    );
}

/// A pipe, both ends closed on exec (the child gets its ends through `dup2`).
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: pipe2 succeeded, so both are open descriptors that nothing else owns.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

impl Browser {
    /// Starts the browser and opens one blank page.
    pub fn launch() -> Self {
        let profile = crate::support::files::make_temp_dir("chromium");
        let (their_in, our_out) = pipe();
        let (our_in, their_out) = pipe();
        let (read_fd, write_fd) = (their_in.as_raw_fd(), their_out.as_raw_fd());
        let mut command = Command::new(binary());
        command
            .args([
                "--headless",
                "--remote-debugging-pipe",
                // Root in CI: Chromium refuses its sandbox there.
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--window-size=1280,800",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group, so that drop kills its helper processes too.
            .process_group(0);
        // SAFETY: only async-signal-safe calls (dup2) between fork and exec.
        unsafe {
            command.pre_exec(move || {
                // Out of the way first, in case either already is 3 or 4; dup2's copies are
                // not closed on exec.
                let r = libc::fcntl(read_fd, libc::F_DUPFD_CLOEXEC, 10);
                let w = libc::fcntl(write_fd, libc::F_DUPFD_CLOEXEC, 10);
                if r < 0 || w < 0 || libc::dup2(r, 3) < 0 || libc::dup2(w, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("start Chromium");
        drop((their_in, their_out));
        let (tx, answers) = mpsc::channel();
        let reader = BufReader::new(File::from(our_in));
        std::thread::spawn(move || {
            for message in reader.split(0) {
                let Ok(message) = message else { break };
                let Ok(value) = serde_json::from_slice::<Value>(&message) else {
                    continue;
                };
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        let mut browser = Self {
            child,
            commands: File::from(our_out),
            answers,
            session: String::new(),
            next_id: 0,
            profile,
        };
        let target = browser.call("Target.createTarget", json!({ "url": "about:blank" }));
        let target_id = target["targetId"].as_str().expect("targetId").to_owned();
        let attached = browser.call(
            "Target.attachToTarget",
            json!({ "targetId": target_id, "flatten": true }),
        );
        browser.session = attached["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_owned();
        browser
    }

    /// Sends one command (to the page once attached) and returns its result; panics on an
    /// error answer or none within 30 s.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            message["sessionId"] = Value::String(self.session.clone());
        }
        let mut bytes = serde_json::to_vec(&message).expect("JSON");
        bytes.push(0);
        self.commands.write_all(&bytes).expect("write to Chromium");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = match self.answers.recv_timeout(left) {
                Ok(answer) => answer,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("Chromium did not answer {method} within 30 s")
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => panic!(
                    "Chromium closed its DevTools pipe before answering {method} (exit: {:?})",
                    self.child.try_wait()
                ),
            };
            if answer["id"].as_u64() == Some(id) {
                if let Some(error) = answer.get("error") {
                    panic!("Chromium refused {method}: {error}");
                }
                return answer["result"].clone();
            }
            // An event, or an answer to nothing we wait for.
        }
    }

    /// Opens `url` in the page.
    pub fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({ "url": url }));
    }

    /// The value of JavaScript `expression` in the page (awaited if it is a promise).
    pub fn eval(&mut self, expression: &str) -> Value {
        self.try_eval(expression)
            .unwrap_or_else(|exception| panic!("the page threw on {expression}: {exception}"))
    }

    /// The value of `expression`, or what the page threw on it.
    fn try_eval(&mut self, expression: &str) -> Result<Value, Value> {
        let result = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        );
        match result.get("exceptionDetails") {
            Some(exception) => Err(exception.clone()),
            None => Ok(result["result"]["value"].clone()),
        }
    }

    /// Evaluates `expression` every 100 ms until `want` accepts its value, for at most
    /// `within`; returns the last value either way. A throw (the page still loading, its
    /// elements not there yet) counts as a value not yet wanted, and is what comes back if
    /// the time runs out on one.
    pub fn eval_until(
        &mut self,
        expression: &str,
        within: Duration,
        want: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let value = self.try_eval(expression).unwrap_or_else(|thrown| thrown);
            if want(&value) || Instant::now() >= deadline {
                return value;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: a plain kill(2) of the browser's process group.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
