//! Both attributes on one function: the lower one runs first, so here the rate limit is
//! checked before the lock is taken, and a limited call never takes the lock. The error type
//! converts from both errors.
#![deny(warnings)]

use distlock::{Client, RateLimitError, distributed_lock, rate_limit};

#[path = "../shared/app_error.rs"]
mod app_error;

use app_error::AppError;

#[distributed_lock(key = "order:{id}", client = client, on_busy = error)]
#[rate_limit(policy = "checkout: 1/min", key = "order:{id}", client = client)]
async fn checkout(client: &Client, id: u64) -> Result<u64, AppError> {
    Ok(distlock::current_lease()
        .expect("inside the lock")
        .fence()
        .await?)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = Client::in_memory();
    checkout(&client, 1).await.expect("first checkout");
    // Hold the lock elsewhere: the second call is refused by the rate limit before it would
    // find the lock busy.
    let held = client.lock("order:1").acquire().await.expect("free");
    match checkout(&client, 1).await {
        Err(AppError::Limited(RateLimitError::Limited { .. })) => {}
        other => panic!("expected the rate limit first, got {other:?}"),
    }
    held.release().await.expect("release");
}
