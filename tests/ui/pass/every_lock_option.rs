//! Every lock option of the table the macro reads (`distlock_grammar::LOCK_OPTIONS`) is an
//! argument that compiles into the runtime's setter of the same name, and the lock it sets
//! is taken and given back.
#![deny(warnings)]

use distlock::{Client, LockError, distributed_lock};

#[distributed_lock(
    key = "every-option:{n}",
    client = client,
    ttl = "10s",
    wait = "forever",
    store_patience = "2s",
    watchdog = false,
    max_hold = "1m",
    min_hold = "0s",
    reentrant = false,
    max_attempts = 3,
    fenced = true,
    fair = true
)]
async fn every_option(client: &Client, n: u32) -> Result<u32, LockError> {
    Ok(n + 1)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = Client::in_memory();
    assert_eq!(every_option(&client, 1).await.expect("granted"), 2);
    let lease = client
        .lock("every-option:1")
        .acquire()
        .await
        .expect("given back");
    lease.release().await.expect("released");
}
