//! No `redis-server` or `redis-sentinel` of the Sentinel and TLS harnesses outlives the test
//! process, however it ends: child processes of this test binary start a [`SentinelSetup`]
//! and a [`TlsServer`], then exit without dropping them (only the `atexit` hook can kill
//! them) or are SIGKILLed (only `PR_SET_PDEATHSIG` can).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use crate::support::child::{self, ChildProcess};
use crate::support::files::{live_processes_in_dirs, wait_until_none_left};
use crate::support::sentinel::{SENTINELS, SentinelSetup, temp_dir_prefix};
use crate::support::tls::TlsServer;

const ENTRY: &str = "leaks::child_entry";

/// Processes a child starts: two data nodes, the sentinels, one TLS server.
const PROCESSES: usize = 2 + SENTINELS + 1;

/// Entry point of the child processes (does nothing in a normal run).
#[test]
#[ignore = "entry point of child processes of the leak tests; does nothing on its own"]
fn child_entry() {
    let Some((mode, _)) = child::role() else {
        return;
    };
    let setup = SentinelSetup::start();
    let tls = TlsServer::start();
    let mut pids = setup.pids();
    pids.push(tls.node().pid());
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    child::say(&format!("OWNER {}", std::process::id()));
    child::say(&format!("PIDS {}", pids.join(" ")));
    match mode.as_str() {
        "exit" => {
            // Never dropped: only the exit hook (or the parent-death signal) kills them.
            std::mem::forget(setup);
            std::mem::forget(tls);
        }
        "sigkill" => {
            child::say("READY");
            std::thread::sleep(Duration::from_secs(120));
        }
        other => panic!("unknown child mode {other}"),
    }
}

/// Live (not zombie) redis processes whose working directory is a dir of test process
/// `owner` (`distlock-repl-{sentinel,tls}-<owner>-...`): redis rewrites its command line, so
/// the cwd is what identifies them.
fn processes_of(owner: u32) -> BTreeSet<u32> {
    let needles: Vec<String> = ["sentinel", "tls"]
        .iter()
        .map(|kind| format!("/{}{kind}-{owner}-", temp_dir_prefix()))
        .collect();
    live_processes_in_dirs(&["redis-server", "redis-sentinel"], &needles)
}

/// Polls (up to 10 s) until test process `owner` has no live redis process; returns how long.
fn wait_none_left(owner: u32) -> Duration {
    wait_until_none_left("redis processes", owner, || processes_of(owner))
}

/// Removes the temp dirs a child could not remove itself.
fn remove_dirs_of(owner: u32) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    let infix = format!("-{owner}-");
    let dirs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(temp_dir_prefix()) && name.contains(&infix)
        })
        .map(|e| e.path())
        .collect();
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The child's own pid, which it reports first.
fn owner_of(child: &ChildProcess) -> u32 {
    let line = child.expect_line("OWNER", Duration::from_secs(60));
    line.trim_start_matches("OWNER")
        .trim()
        .parse()
        .expect("pid")
}

fn parse_pids(line: &str) -> BTreeSet<u32> {
    line.trim_start_matches("PIDS")
        .split_whitespace()
        .map(|p| p.parse().expect("pid"))
        .collect()
}

#[test]
fn no_process_outlives_a_test_binary_that_exits() {
    let child = ChildProcess::spawn(ENTRY, "exit", "");
    let owner = owner_of(&child);
    let pids = parse_pids(&child.expect_line("PIDS", Duration::from_secs(10)));
    assert_eq!(pids.len(), PROCESSES, "{pids:?}");
    child.wait_success(Duration::from_secs(30));
    let took = wait_none_left(owner);
    eprintln!("exit: the child's {PROCESSES} redis processes were gone {took:?} after it exited");
    remove_dirs_of(owner);
}

#[test]
fn no_process_outlives_a_sigkilled_test_binary() {
    let child = ChildProcess::spawn(ENTRY, "sigkill", "");
    let owner = owner_of(&child);
    let pids = parse_pids(&child.expect_line("PIDS", Duration::from_secs(10)));
    child.expect_line("READY", Duration::from_secs(10));
    // The detection works: it sees exactly the child's processes.
    assert_eq!(processes_of(owner), pids);
    child.signal(libc::SIGKILL);
    let took = wait_none_left(owner);
    eprintln!(
        "sigkill: the child's {PROCESSES} redis processes were gone {took:?} after its SIGKILL"
    );
    drop(child);
    remove_dirs_of(owner);
}
