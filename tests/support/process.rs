//! Child processes tied to the test process, shared by the multi-process harnesses
//! (cluster.rs, sentinel.rs): each is forked by one long-lived thread with a parent-death
//! signal, registered for an `atexit` hook that SIGKILLs and reaps whatever is left (and
//! removes registered temp dirs), and SIGKILLed and reaped on drop.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::sync::{Mutex, MutexGuard, Once, OnceLock, PoisonError, TryLockError, mpsc};
use std::time::Duration;

/// Pids of every live process spawned by this module, and temp dirs to remove,
/// for the `atexit` hook.
pub(crate) struct Registry {
    pub(crate) pids: BTreeSet<u32>,
    pub(crate) dirs: Vec<PathBuf>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    pids: BTreeSet::new(),
    dirs: Vec::new(),
});

pub(crate) fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Installs [`kill_registered_at_exit`] once.
fn ensure_exit_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        // SAFETY: registering a plain `extern "C" fn()` has no preconditions.
        let rc = unsafe { libc::atexit(kill_registered_at_exit) };
        assert_eq!(rc, 0, "atexit() failed: cannot guarantee cluster cleanup");
    });
}

/// `atexit` hook: SIGKILLs and reaps every registered process (the shared
/// cluster's nodes, and any cluster that was leaked) and removes the
/// registered temp dirs. Never panics.
extern "C" fn kill_registered_at_exit() {
    // Another thread might hold the lock at exit; never block forever on it.
    let mut guard = None;
    for _ in 0..100 {
        match REGISTRY.try_lock() {
            Ok(g) => {
                guard = Some(g);
                break;
            }
            Err(TryLockError::Poisoned(p)) => {
                guard = Some(p.into_inner());
                break;
            }
            Err(TryLockError::WouldBlock) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    let Some(mut reg) = guard else { return };
    let pids: Vec<u32> = std::mem::take(&mut reg.pids).into_iter().collect();
    for &pid in &pids {
        if let Ok(pid) = libc::pid_t::try_from(pid) {
            // SAFETY: kill(2) has no memory-safety preconditions; the pid is an
            // unreaped child of ours (registered until reaped).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    for &pid in &pids {
        if let Ok(pid) = libc::pid_t::try_from(pid) {
            // SAFETY: waitpid(2) with a null status pointer is allowed.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        }
    }
    for dir in std::mem::take(&mut reg.dirs) {
        let _ = fs::remove_dir_all(dir);
    }
}

/// A child spawned through [`spawn_tied`]: registered for the exit hook until
/// it is reaped; SIGKILLed and reaped on drop.
#[derive(Debug)]
pub(crate) struct TiedChild {
    child: Child,
}

impl TiedChild {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(status)` once the process has exited (it is then reaped).
    pub(crate) fn try_wait(&mut self) -> Option<ExitStatus> {
        let status = self.child.try_wait().expect("try_wait on a child process");
        if status.is_some() {
            registry().pids.remove(&self.child.id());
        }
        status
    }

    pub(crate) fn signal(&self, sig: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid fits in pid_t");
        // SAFETY: kill(2) has no memory-safety preconditions; `pid` is our own,
        // not yet reaped child.
        let rc = unsafe { libc::kill(pid, sig) };
        assert!(
            rc == 0,
            "kill({pid}, {sig}) failed: {}",
            io::Error::last_os_error()
        );
    }
}

impl Drop for TiedChild {
    fn drop(&mut self) {
        registry().pids.remove(&self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `cmd` from the long-lived spawner thread with a parent-death signal
/// (SIGKILL), and registers its pid for the exit hook.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, so
/// children are forked by one thread that lives as long as the process (test
/// threads come and go; a cluster shared by all tests outlives the test that
/// started it).
pub(crate) fn spawn_tied(cmd: Command) -> io::Result<TiedChild> {
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    ensure_exit_hook();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("redis-test-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(spawn_with_pdeathsig(&mut cmd));
                }
            })
            .expect("start the spawner thread");
        tx
    });
    let (tx, rx) = mpsc::channel();
    spawner
        .send((cmd, tx))
        .expect("the spawner thread lives as long as the process");
    let child = rx.recv().expect("the spawner thread answers")?;
    Ok(TiedChild { child })
}

/// Runs on the spawner thread.
fn spawn_with_pdeathsig(cmd: &mut Command) -> io::Result<Child> {
    die_with_parent(cmd);
    // Register under the lock taken before spawning, so the exit hook cannot
    // run between the spawn and the registration.
    let mut reg = registry();
    let child = cmd.spawn()?;
    reg.pids.insert(child.id());
    Ok(child)
}

/// Makes the kernel SIGKILL the child `cmd` spawns when the thread that spawns it exits
/// (`PR_SET_PDEATHSIG`), and refuses to start it if the parent is already gone.
pub(crate) fn die_with_parent(cmd: &mut Command) {
    // SAFETY: getpid(2) has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure only calls async-signal-safe functions (prctl,
    // getppid) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl: then nobody would kill us.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}
