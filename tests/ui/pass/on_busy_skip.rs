//! `on_busy = skip` on the return types that have a "did not run" value: `()` (also through
//! an alias such as `io::Result<()>`) and `Option<T>`; a skipped call returns `Ok(())` or
//! `Ok(None)` without running the body.
#![deny(warnings)]

use std::sync::atomic::{AtomicU32, Ordering};

use distlock::{Client, LockError, distributed_lock};

static RUNS: AtomicU32 = AtomicU32::new(0);

#[distributed_lock(key = "tick", client = client, on_busy = skip)]
async fn tick(client: &Client) -> Result<(), LockError> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "tick", client = client, on_busy = "skip", min_hold = "1m")]
async fn report(client: &Client) -> Result<Option<String>, LockError> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(Some("sent".to_owned()))
}

impl From<LockError> for Io {
    fn from(_: LockError) -> Self {
        Io
    }
}

#[derive(Debug)]
struct Io;

type IoResult<T> = Result<T, Io>;

#[distributed_lock(key = "tick", client = client, on_busy = skip)]
async fn flush(client: &Client) -> IoResult<()> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = Client::in_memory();
    tick(&client).await.expect("free: runs");
    assert_eq!(report(&client).await.expect("runs"), Some("sent".to_owned()));
    // `report` keeps the lock for a minute: every call now skips.
    assert_eq!(report(&client).await.expect("skipped"), None);
    tick(&client).await.expect("skipped");
    flush(&client).await.expect("skipped");
    assert_eq!(RUNS.load(Ordering::SeqCst), 2);
}
