//! A throw-away `redis-server` for runs without `--url`, and what the local cluster
//! ([`crate::cluster`]) shares with it: starting one (pinned to CPUs with `taskset` if asked)
//! and waiting for it to listen.

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    child: Child,
    port: u16,
}

/// A free loopback port (free when asked: another process may take it before the server does).
pub fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

/// `redis-server` with `args`, under `taskset -c CPUS` if `cpus` is given. Its output goes to
/// `log` if given, else nowhere.
pub fn spawn(
    args: &[&str],
    cpus: Option<&str>,
    dir: Option<&Path>,
    log: Option<&Path>,
) -> Result<Child, String> {
    let mut command = match cpus {
        Some(cpus) => {
            let mut c = Command::new("taskset");
            c.args(["-c", cpus, "redis-server"]);
            c
        }
        None => Command::new("redis-server"),
    };
    command.args(args).stdin(Stdio::null());
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    match log {
        Some(path) => {
            let file = std::fs::File::create(path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            let copy = file.try_clone().map_err(|e| e.to_string())?;
            command.stdout(file).stderr(copy);
        }
        None => {
            command.stdout(Stdio::null()).stderr(Stdio::null());
        }
    }
    command.spawn().map_err(|e| {
        let what = if cpus.is_some() {
            "taskset redis-server"
        } else {
            "redis-server"
        };
        format!(
            "cannot start {what} ({e}); install it (apt-get install redis-server) or pass --url"
        )
    })
}

/// Waits until `port` accepts connections, or fails if `child` exits first or `deadline` passes.
pub fn wait_listening(child: &mut Child, port: u16, deadline: Instant) -> Result<(), String> {
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("redis-server on port {port} exited: {status}"));
        }
        if Instant::now() > deadline {
            return Err(format!("redis-server on port {port} did not start in time"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

impl Server {
    /// Starts a server on a free port, pinned to `cpus` if given.
    pub fn start(cpus: Option<&str>) -> Result<Self, String> {
        let port = free_port()?;
        let port_arg = port.to_string();
        let args = [
            "--port",
            &port_arg,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ];
        let child = spawn(&args, cpus, None, None)?;
        // From here on, dropping `server` kills the child, whatever fails next.
        let mut server = Self { child, port };
        wait_listening(
            &mut server.child,
            port,
            Instant::now() + Duration::from_secs(10),
        )?;
        eprintln!(
            "distlock-bench: started redis-server on 127.0.0.1:{port} (pid {}{})",
            server.child.id(),
            cpus.map_or_else(String::new, |c| format!(", CPUs {c}"))
        );
        Ok(server)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
