//! Capturing what `tracing` writes on the test's own thread.
//!
//! `tracing` caches, per call site and for the whole process, whether anyone is interested in
//! it. While only one dispatcher is registered (ours), a call site first reached by another
//! test's thread, which has no subscriber, is cached as uninteresting for every thread, and
//! our capture silently misses it (tokio-rs/tracing#3611). A second registered dispatcher,
//! held for as long as the capture, makes every new call site ask all dispatchers instead;
//! rebuilding the cache fixes call sites cached before.

use std::io::Write;
use std::sync::{Arc, Mutex};

use tracing::Dispatch;
use tracing::subscriber::{DefaultGuard, NoSubscriber};

/// A thread-local subscriber writing into a buffer, installed until this is dropped.
pub struct Capture {
    buffer: Buffer,
    _default: DefaultGuard,
    _pin: Dispatch,
}

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("capture").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    /// Captures events at `level` and above on this thread (with a current-thread runtime:
    /// every task of the test).
    pub fn start(level: tracing::Level) -> Self {
        let pin = Dispatch::new(NoSubscriber::default());
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let default = tracing::subscriber::set_default(subscriber);
        tracing::callsite::rebuild_interest_cache();
        Self {
            buffer,
            _default: default,
            _pin: pin,
        }
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8(self.buffer.0.lock().expect("capture").clone()).expect("utf-8")
    }
}
