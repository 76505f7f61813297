//! Ports, temp dirs and logs of the processes the harness starts (the single server, the
//! Cluster, the Sentinel and TLS set-ups, PostgreSQL): one copy of each helper.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Name of a Redis process's log file (`logfile`) inside its dir.
pub const LOG_FILE: &str = "redis.log";

/// Name of the file receiving a process's stdout and stderr inside its dir (config errors are
/// printed there, before the log file is opened).
pub const STDIO_FILE: &str = "stdio.log";

/// A port that was free a moment ago (bind to port 0, read it, drop the listener). Racy by
/// nature; callers retry on a clash.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port on 127.0.0.1")
        .port()
}

/// `n` distinct ports that were free a moment ago (all bound at once, then released). Racy by
/// nature; callers retry on a clash.
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| {
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .expect("bind an ephemeral port on 127.0.0.1")
        })
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local addr").port())
        .collect()
}

/// A fresh dir `<prefix><test process pid>-<n>-<nanos>` under the system temp dir (the pid
/// lets a test find the processes of a given test process by their cwd).
pub fn make_temp_dir(prefix: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    for _ in 0..100 {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("{prefix}{}-{n}-{nanos:x}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => return dir,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => panic!("cannot create temp dir {}: {e}", dir.display()),
        }
    }
    panic!("cannot create a unique temp dir under {}", base.display());
}

/// The file's content from byte `offset` on ("" if unreadable): the part of a log written by
/// the current run of a process.
pub fn log_since(path: &Path, offset: u64) -> String {
    let Ok(bytes) = fs::read(path) else {
        return String::new();
    };
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

/// The [`LOG_FILE`] of a process dir (all runs), followed by anything `program` wrote to
/// stdout/stderr ([`STDIO_FILE`]), for humans. Never panics: an unreadable file yields a
/// placeholder.
pub fn read_logs(dir: &Path, program: &str) -> String {
    let mut out = match fs::read(dir.join(LOG_FILE)) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => format!("<no log file {}: {e}>\n", dir.join(LOG_FILE).display()),
    };
    if let Ok(bytes) = fs::read(dir.join(STDIO_FILE))
        && !bytes.is_empty()
    {
        let _ = writeln!(out, "--- {program} stdout/stderr ---");
        out.push_str(&String::from_utf8_lossy(&bytes));
    }
    out
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Live (not zombie) processes whose command name starts with one of `commands` and whose
/// working directory contains one of `cwd_needles`: how a test finds the redis processes the
/// harness started for a given test process (redis rewrites its command line, but its cwd is
/// its temp dir, named after the test process: see [`make_temp_dir`]).
pub fn live_processes_in_dirs(commands: &[&str], cwd_needles: &[String]) -> BTreeSet<u32> {
    let mut found = BTreeSet::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let proc_dir = entry.path();
        let comm = fs::read_to_string(proc_dir.join("comm")).unwrap_or_default();
        if !commands.iter().any(|c| comm.starts_with(c)) {
            continue;
        }
        let Ok(cwd) = fs::read_link(proc_dir.join("cwd")) else {
            continue;
        };
        let stat = fs::read_to_string(proc_dir.join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        let cwd = cwd.to_string_lossy();
        if !zombie && cwd_needles.iter().any(|n| cwd.contains(n.as_str())) {
            found.insert(pid);
        }
    }
    found
}

/// Polls `left()` (up to 10 s) until it is empty, and returns how long that took; panics with
/// `"{what} {left:?} outlived test process {owner}"` if it never is.
pub fn wait_until_none_left(what: &str, owner: u32, left: impl Fn() -> BTreeSet<u32>) -> Duration {
    let began = Instant::now();
    loop {
        let left = left();
        if left.is_empty() {
            return began.elapsed();
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "{what} {left:?} outlived test process {owner}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
