//! The history format: one event per line, written by each worker (and the nemesis) to its own
//! file as it happens, read back by the checker.
//!
//! ```text
//! <mono ns> <real ns> <process> <op> <tag> key=value ...
//! ```
//!
//! * `mono` is `CLOCK_MONOTONIC` read with the raw system call (processes on one machine share
//!   it, and a worker whose libc clock is faked still records the true one); `real` is
//!   `CLOCK_REALTIME` the same way, the base of Redis `TIME` on this machine, for rate limits.
//! * `process` is the worker's number (0 is the nemesis); `op` numbers the process's
//!   operations, so (`process`, `op`) names one operation.
//! * Tags: `inv` (an operation is invoked), `ok` / `fail` (it completed), `claim` (a lease said
//!   it is valid for `valid` ns from this instant), `lost` (its lost signal fired), `end` (the
//!   worker stops trusting it: just before a release or a drop), `fault` (the nemesis),
//!   `meta`.
//!
//! Every event also carries `rd`, how long the recording thread had waited for a CPU so far
//! (`/proc/thread-self/schedstat`): the checker uses it to tell a late library from a
//! process the machine did not run. Values hold no spaces; `key=value` pairs keep the format
//! open to new fields.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;

/// `CLOCK_MONOTONIC` in ns, through the system call (not the vDSO or libc, which
/// libfaketime may intercept in a worker run with a drifting clock).
pub fn mono_ns() -> u64 {
    raw_clock(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_REALTIME` in ns, through the system call.
pub fn real_ns() -> u64 {
    raw_clock(libc::CLOCK_REALTIME)
}

fn raw_clock(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes one timespec into the pointer we give it.
    let rc = unsafe { libc::syscall(libc::SYS_clock_gettime, clock, std::ptr::from_mut(&mut ts)) };
    assert_eq!(rc, 0, "clock_gettime({clock})");
    u64::try_from(ts.tv_sec).expect("clock after 1970") * 1_000_000_000
        + u64::try_from(ts.tv_nsec).expect("ns")
}

/// One event of a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub mono: u64,
    pub real: u64,
    pub process: u32,
    pub op: u64,
    pub tag: String,
    pub fields: BTreeMap<String, String>,
}

impl Event {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    pub fn num(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(|v| v.parse().ok())
    }

    /// The line this event is written as (no newline).
    pub fn line(&self) -> String {
        let mut line = format!(
            "{} {} {} {} {}",
            self.mono, self.real, self.process, self.op, self.tag
        );
        for (k, v) in &self.fields {
            let _ = write!(line, " {k}={v}");
        }
        line
    }

    /// Parses one line; `None` for a torn or foreign line.
    pub fn parse(line: &str) -> Option<Self> {
        let mut words = line.split_whitespace();
        let mono = words.next()?.parse().ok()?;
        let real = words.next()?.parse().ok()?;
        let process = words.next()?.parse().ok()?;
        let op = words.next()?.parse().ok()?;
        let tag = words.next()?.to_owned();
        let mut fields = BTreeMap::new();
        for word in words {
            let (k, v) = word.split_once('=')?;
            fields.insert(k.to_owned(), v.to_owned());
        }
        Some(Self {
            mono,
            real,
            process,
            op,
            tag,
            fields,
        })
    }
}

/// How long the calling thread has waited for a CPU so far (ns; `run_delay` of
/// `/proc/thread-self/schedstat`), to tell a slow library from a starved process.
pub fn run_delay_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

/// An instant as a record states it: the monotonic time and the thread's CPU wait so far,
/// read together (the wait first, so it never counts time after the instant).
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    pub mono: u64,
    pub rd: Option<u64>,
}

/// Now, as a [`Stamp`].
pub fn stamp() -> Stamp {
    let rd = run_delay_ns();
    Stamp {
        mono: mono_ns(),
        rd,
    }
}

/// Builds an event's fields: `fields(&[("kind", "lock"), ...])`.
pub fn fields(pairs: &[(&str, String)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| {
            debug_assert!(!v.contains(char::is_whitespace), "{k}={v:?} has a space");
            ((*k).to_owned(), v.clone())
        })
        .collect()
}

/// Appends events to one process's history file, one `write` per line (a line is never
/// torn by a SIGSTOP, and what was written survives the process).
pub struct Recorder {
    process: u32,
    file: Mutex<File>,
    next_op: std::sync::atomic::AtomicU64,
}

impl Recorder {
    pub fn create(path: &Path, process: u32) -> Self {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap_or_else(|e| panic!("open history file {}: {e}", path.display()));
        Self {
            process,
            file: Mutex::new(file),
            next_op: std::sync::atomic::AtomicU64::new(1),
        }
    }

    /// A fresh operation number.
    pub fn next_op(&self) -> u64 {
        self.next_op
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Records `tag` for `op` now; returns the event's monotonic time.
    pub fn record(&self, op: u64, tag: &str, pairs: &[(&str, String)]) -> u64 {
        self.record_at(stamp(), op, tag, pairs)
    }

    /// Records `tag` for `op` at an instant the caller stamped earlier.
    pub fn record_at(&self, at: Stamp, op: u64, tag: &str, pairs: &[(&str, String)]) -> u64 {
        let mono = at.mono;
        let mut fields = fields(pairs);
        if let Some(rd) = at.rd {
            fields.insert("rd".to_owned(), rd.to_string());
        }
        let event = Event {
            mono,
            real: real_ns(),
            process: self.process,
            op,
            tag: tag.to_owned(),
            fields,
        };
        let mut line = event.line();
        line.push('\n');
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        file.write_all(line.as_bytes())
            .expect("append to the history file");
        mono
    }
}

/// Every event of every `*.hist` file in `dir`, in time order.
pub fn read_dir(dir: &Path) -> Vec<Event> {
    let mut events = Vec::new();
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read history dir {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("dir entry").path();
        if path.extension().is_some_and(|x| x == "hist") {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            events.extend(text.lines().filter_map(Event::parse));
        }
    }
    events.sort_by_key(|e| (e.mono, e.process, e.op));
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_reads_back_as_written() {
        let event = Event {
            mono: 12,
            real: 34,
            process: 2,
            op: 7,
            tag: "ok".into(),
            fields: fields(&[("fence", "99".into()), ("valid", "1000".into())]),
        };
        assert_eq!(Event::parse(&event.line()), Some(event));
        assert_eq!(Event::parse("12 34 2"), None, "a torn line is skipped");
    }

    #[test]
    fn the_raw_clocks_tick() {
        let (a, b) = (mono_ns(), mono_ns());
        assert!(b >= a);
        assert!(real_ns() > 1_600_000_000_000_000_000);
    }
}
