//! Server clock jumps with libfaketime (Debian `faketime`), and a `redis-server` whose clock,
//! persistence and process the test controls ([`ClockedServer`]).
//!
//! ## Why a server under libfaketime "does not start", and the fix
//! Debian's `redis-server` is linked with jemalloc (`libjemalloc.so.2`). libfaketime 0.9.10
//! initializes itself on the first call of any function it wraps, and its initialization calls
//! `dlsym`, which allocates. jemalloc's own initialization (run from a constructor, before
//! `main`) calls two functions libfaketime wraps, `clock_gettime` and `pthread_cond_init`:
//! libfaketime then initializes inside jemalloc's initialization, its allocation re-enters
//! jemalloc, and the process deadlocks on jemalloc's init mutex (or libfaketime reports
//! "Unexpected recursive calls to clock_gettime() without proper initialization" and the
//! server hangs). This is libfaketime's known jemalloc clash (upstream issues #130, #327,
//! #478, unfixed).
//!
//! The fix, [`FakeClock::prepare`]: a 30-line guard library, compiled at test time with `cc`
//! and preloaded *before* libfaketime, answers those two calls itself: `clock_gettime` of any
//! clock but `CLOCK_REALTIME` goes straight to the kernel (the monotonic clocks are not faked
//! anyway, `FAKETIME_DONT_FAKE_MONOTONIC=1`), `CLOCK_REALTIME` goes on to libfaketime, and
//! `pthread_cond_init`/`pthread_cond_destroy` are glibc's (libfaketime wraps them only for
//! timed waits on a faked realtime clock, which Redis does not use). jemalloc then never
//! reaches libfaketime during its initialization, and libfaketime fakes Redis's realtime
//! (`gettimeofday`, `clock_gettime(CLOCK_REALTIME)`: key expiry, `TIME`, the scripts' clock).
//! The offset is read from a file on every call (`FAKETIME_NO_CACHE=1`), so a jump takes
//! effect at once; measured cost: about 17 000 requests/s through redis-benchmark.

use std::fs;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::process::{TiedChild, spawn_tied};

/// Where Debian's libfaketime lives (amd64 and arm64 layouts).
const LIBFAKETIME: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
];

const GUARD_SOURCE: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
/* Keeps jemalloc's initialization away from libfaketime: see tests/support/faketime.rs. */
typedef int (*clock_fn)(clockid_t, struct timespec *);
static clock_fn next_clock_gettime;
int clock_gettime(clockid_t clk, struct timespec *ts) {
    if (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE) {
        if (!next_clock_gettime) next_clock_gettime = (clock_fn)dlsym(RTLD_NEXT, "clock_gettime");
        if (next_clock_gettime) return next_clock_gettime(clk, ts);
    }
    return (int)syscall(SYS_clock_gettime, clk, ts);
}
int pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a) {
    memset(c, 0, sizeof *c);
    if (a) {
        clockid_t clk;
        int shared;
        /* glibc keeps the clock in bit 1 of __wrefs and process-sharing in bit 0. */
        if (pthread_condattr_getclock(a, &clk) == 0 && clk == CLOCK_MONOTONIC) c->__data.__wrefs |= 2u;
        if (pthread_condattr_getpshared(a, &shared) == 0 && shared) c->__data.__wrefs |= 1u;
    }
    return 0;
}
int pthread_cond_destroy(pthread_cond_t *c) { (void)c; return 0; }
"#;

/// The guard library and libfaketime, ready to preload; one per test process.
#[derive(Debug)]
pub struct FakeTime {
    guard: PathBuf,
    libfaketime: PathBuf,
}

/// Builds (once per process) the guard library and finds libfaketime.
///
/// # Panics
///
/// If libfaketime is not installed (`apt-get install faketime`) or `cc` cannot build the
/// guard: the message says which.
pub fn faketime() -> &'static FakeTime {
    static BUILT: OnceLock<FakeTime> = OnceLock::new();
    BUILT.get_or_init(|| {
        let libfaketime = LIBFAKETIME
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .unwrap_or_else(|| {
                panic!(
                    "libfaketime not found (looked in {LIBFAKETIME:?}): install it with \
                     `apt-get install -y faketime` (scripts/test.sh does)"
                )
            });
        let dir = std::env::temp_dir().join(format!("distlock-faketime-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("create the faketime build dir");
        super::process::registry().dirs.push(dir.clone());
        let source = dir.join("guard.c");
        let guard = dir.join("guard.so");
        fs::write(&source, GUARD_SOURCE).expect("write guard.c");
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&guard)
            .arg(&source)
            .arg("-ldl")
            .output()
            .unwrap_or_else(|e| panic!("cannot run cc to build the libfaketime guard: {e}"));
        assert!(
            out.status.success(),
            "cc failed to build the libfaketime guard:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        FakeTime { guard, libfaketime }
    })
}

/// Removes the shared-memory segments libfaketime 0.9.10 makes per process
/// (`/dev/shm/faketime_shm_<pid>`, `/dev/shm/sem.faketime_sem_<pid>`) whose process is gone:
/// it removes its own at a normal exit, not after a SIGKILL (a crash test) or an `exec` (the
/// `ip netns exec` of a worker on a drifting clock).
pub fn remove_dead_segments() {
    let Ok(entries) = fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let pid = name
            .strip_prefix("faketime_shm_")
            .or_else(|| name.strip_prefix("sem.faketime_sem_"));
        if let Some(pid) = pid.and_then(|p| p.parse::<u32>().ok())
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = fs::remove_file(entry.path());
        }
    }
}

impl FakeTime {
    /// libfaketime itself (for processes without jemalloc, which need no guard).
    pub fn libfaketime(&self) -> &Path {
        &self.libfaketime
    }
}

/// A server's fake clock: its offset file. A jump writes a larger offset.
#[derive(Debug)]
pub struct FakeClock {
    file: PathBuf,
    offset: Mutex<Duration>,
}

impl FakeClock {
    fn new(dir: &Path) -> Self {
        let file = dir.join("faketime-offset");
        fs::write(&file, "+0\n").expect("write the faketime offset file");
        Self {
            file,
            offset: Mutex::new(Duration::ZERO),
        }
    }

    /// The environment that puts a process on this clock.
    fn env(&self) -> Vec<(&'static str, String)> {
        let ft = faketime();
        vec![
            (
                "LD_PRELOAD",
                format!("{} {}", ft.guard.display(), ft.libfaketime.display()),
            ),
            ("FAKETIME_TIMESTAMP_FILE", self.file.display().to_string()),
            ("FAKETIME_NO_CACHE", "1".into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
        ]
    }

    /// Moves the clock forward by `by` (whole milliseconds), from the next time read on.
    /// Returns the total offset.
    pub fn jump(&self, by: Duration) -> Duration {
        let mut offset = self
            .offset
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *offset += by;
        // libfaketime reads "+<seconds>" with a fraction.
        let text = format!("+{:.3}\n", offset.as_secs_f64());
        let tmp = self.file.with_extension("tmp");
        fs::write(&tmp, text).expect("write the faketime offset");
        fs::rename(&tmp, &self.file).expect("replace the faketime offset");
        *offset
    }

    pub fn offset(&self) -> Duration {
        *self
            .offset
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[derive(Debug)]
struct Proc {
    child: Option<TiedChild>,
    pid: u32,
}

/// A `redis-server` on a fixed loopback port with its own dir, optionally on a [`FakeClock`],
/// with append-only persistence (`appendfsync always`) so that a crash can keep or lose its
/// data as the test chooses ([`crash_restart`](Self::crash_restart)). Killed on drop.
#[derive(Debug)]
pub struct ClockedServer {
    name: String,
    port: u16,
    dir: PathBuf,
    clock: Option<FakeClock>,
    process: Mutex<Proc>,
}

impl ClockedServer {
    /// Starts `name` (for messages) on a free port; `fake_clock` puts it on a [`FakeClock`].
    ///
    /// # Panics
    ///
    /// If it does not answer `PING` within 10 s (the message has its log).
    pub fn start(name: &str, fake_clock: bool) -> Self {
        super::server::require_supported_version();
        // On a tmpfs when there is one: `appendfsync always` then costs no disk flush (the
        // file still outlives the process, which is what a crash test needs).
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!(
            "distlock-clocked-{}-{name}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create the server dir");
        super::process::registry().dirs.push(dir.clone());
        let clock = fake_clock.then(|| FakeClock::new(&dir));
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let server = Self {
            name: name.to_owned(),
            port,
            dir,
            clock,
            process: Mutex::new(Proc {
                child: None,
                pid: 0,
            }),
        };
        server.spawn();
        server
    }

    fn proc(&self) -> std::sync::MutexGuard<'_, Proc> {
        self.process
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn spawn(&self) {
        let dir = self.dir.display().to_string();
        let mut cmd = Command::new("redis-server");
        cmd.args([
            "--port",
            &self.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--dir",
            &dir,
            "--logfile",
            &format!("{dir}/redis.log"),
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--enable-debug-command",
            "yes",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        if let Some(clock) = &self.clock {
            for (k, v) in clock.env() {
                cmd.env(k, v);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let child = spawn_tied(cmd_clone(&cmd)).unwrap_or_else(|e| {
                if e.kind() == io::ErrorKind::NotFound {
                    panic!("redis-server not found on PATH: apt-get install -y redis-server");
                }
                panic!("spawn redis-server: {e}")
            });
            let pid = child.pid();
            {
                let mut p = self.proc();
                p.child = Some(child);
                p.pid = pid;
            }
            while Instant::now() < deadline {
                if ping(self.addr()) {
                    return;
                }
                if self
                    .proc()
                    .child
                    .as_mut()
                    .and_then(TiedChild::try_wait)
                    .is_some()
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(
                Instant::now() < deadline,
                "{} did not answer PING within 10 s; log:\n{}",
                self.name,
                fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
            );
            // Exited at once (the old process's port not yet free): try again.
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr())
    }

    pub fn pid(&self) -> u32 {
        self.proc().pid
    }

    pub fn clock(&self) -> Option<&FakeClock> {
        self.clock.as_ref()
    }

    /// Moves this server's fake clock forward by `by` and returns once the server's own
    /// `TIME` shows it (within 500 ms of the total offset; waiting up to 5 s): a jump the
    /// server never read would leave a test about clock jumps passing without one. Returns
    /// how far ahead of this machine's clock `TIME` then was.
    ///
    /// # Panics
    ///
    /// If the server has no fake clock, does not answer `TIME`, or its `TIME` does not move.
    pub async fn jump_clock(&self, by: Duration) -> Duration {
        let clock = self
            .clock
            .as_ref()
            .unwrap_or_else(|| panic!("{} runs on the real clock", self.name));
        let offset = clock.jump(by);
        let want = offset.saturating_sub(Duration::from_millis(500));
        let client = redis::Client::open(self.url()).expect("a valid url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.name));
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let (secs, micros): (u64, u64) = redis::cmd("TIME")
                .query_async(&mut conn)
                .await
                .unwrap_or_else(|e| panic!("TIME on {}: {e}", self.name));
            let server =
                std::time::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros);
            let ahead = server
                .duration_since(std::time::SystemTime::now())
                .unwrap_or(Duration::ZERO);
            if ahead >= want {
                return ahead;
            }
            assert!(
                Instant::now() < deadline,
                "{}'s fake clock was moved {offset:?} ahead, but after 5 s its TIME is only \
                 {ahead:?} ahead: the jump did not take effect",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGSTOP.
    pub fn stop_process(&self) {
        if let Some(c) = &self.proc().child {
            c.signal(libc::SIGSTOP);
        }
    }

    /// SIGCONT.
    pub fn cont_process(&self) {
        if let Some(c) = &self.proc().child {
            c.signal(libc::SIGCONT);
        }
    }

    /// SIGKILL, then a restart on the same port: with its append-only file if `keep_data`,
    /// empty otherwise (the file is removed first). Returns once it answers.
    pub fn crash_restart(&self, keep_data: bool) {
        self.crash_restart_after(keep_data, Duration::ZERO);
    }

    /// [`crash_restart`](Self::crash_restart), staying down for `down` first.
    pub fn crash_restart_after(&self, keep_data: bool, down: Duration) {
        {
            let mut p = self.proc();
            drop(p.child.take());
        }
        std::thread::sleep(down);
        if !keep_data {
            let _ = fs::remove_dir_all(self.dir.join("appendonlydir"));
        }
        self.spawn();
    }
}

impl Drop for ClockedServer {
    fn drop(&mut self) {
        drop(self.proc().child.take());
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn cmd_clone(cmd: &Command) -> Command {
    let mut out = Command::new(cmd.get_program());
    out.args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            out.env(k, v);
        }
    }
    out.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    out
}

fn ping(addr: SocketAddr) -> bool {
    use std::io::{BufRead as _, BufReader, Write as _};
    let attempt = || -> io::Result<String> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(300))?;
        stream.set_read_timeout(Some(Duration::from_secs(1)))?;
        stream.write_all(b"*1\r\n$4\r\nPING\r\n")?;
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line)?;
        Ok(line)
    };
    matches!(attempt(), Ok(line) if line.starts_with("+PONG"))
}
