//! Takes a lease, holds it while the watchdog renews it, and releases it.
//!
//! ```text
//! cargo run --example lease                               # in-memory store
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example lease
//! ```

use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = match std::env::var("REDIS_URL") {
        Ok(url) => distlock::Client::connect(&url).await?,
        Err(_) => distlock::Client::in_memory(),
    };
    println!("store: {}", client.store_kind());

    let lease = client
        .lock("example:report")
        .ttl(Duration::from_secs(3))
        .wait(Duration::from_secs(10))
        .acquire()
        .await?;
    // The fence is minted on first use (one round trip, while the lock is held).
    println!(
        "acquired `{}` with fence {}",
        lease.name(),
        lease.fence().await?
    );

    // Hold it for longer than its ttl: the watchdog renews it every ttl/3.
    for step in 1..=4 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        lease.ensure_held()?;
        println!("step {step}: still held, valid for {:?}", lease.valid_for());
    }

    // A second acquisition while we hold it is refused at once.
    match client.lock("example:report").acquire().await {
        Err(distlock::LockError::Busy { retry_after, .. }) => {
            println!("a second owner is refused; busy for up to {retry_after:?}");
        }
        other => println!("unexpected: {other:?}"),
    }

    let outcome = lease.release().await?;
    println!("released: {outcome:?}");

    let next = client.lock("example:report").acquire().await?;
    println!(
        "the next owner gets fence {} (greater)",
        next.fence().await?
    );
    next.release().await?;
    Ok(())
}
