//! Every lock option of the table the macro reads (`distlock_grammar::LOCK_OPTIONS`) is an
//! argument that compiles into the runtime's setter of the same name, and the lock it sets
//! is taken and given back.
#![deny(warnings)]

use distlock::{Client, LockError, LockState, distributed_lock};

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
    fair = true,
    identity = "every-option-test"
)]
async fn every_option(client: &Client, n: u32) -> Result<u32, LockError> {
    Ok(n + 1)
}

#[distributed_lock(key = "watched", client = client, identity = "every-option-test")]
async fn watched(client: &Client) -> Result<Option<String>, LockError> {
    Ok(match client.lock_state("watched").await? {
        LockState::Held {
            holder: Some(holder),
            ..
        } => Some(holder.identity),
        _ => None,
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = Client::in_memory();
    assert_eq!(every_option(&client, 1).await.expect("granted"), 2);
    // The identity reached the lease: a holder seen while the body runs says it.
    let seen = watched(&client).await.expect("granted");
    assert_eq!(seen.as_deref(), Some("every-option-test"));
    let lease = client
        .lock("every-option:1")
        .acquire()
        .await
        .expect("given back");
    lease.release().await.expect("released");
}
