//! A free function with every argument, called through the default client.
#![deny(warnings)]

use distlock::{LockError, distributed_lock};

/// Docs stay on the function.
#[distributed_lock(
    key = "report:{day}",
    ttl = "2s",
    wait = "1s",
    watchdog = true,
    on_busy = wait,
    reentrant = false,
    fenced = true,
)]
#[must_use = "the report is the point"]
pub async fn build_report(day: u32) -> Result<String, LockError> {
    let lease = distlock::current_lease().expect("inside the lock");
    assert_eq!(lease.name(), format!("report:{day}"));
    // Minted with the grant (`fenced = true`): answered without a round trip.
    Ok(format!("day {day}, fence {}", lease.fence().await?))
}

#[distributed_lock(key = "report:{day}", on_busy = error)]
async fn try_report(day: u32) -> Result<(), LockError> {
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    distlock::set_default_client(distlock::Client::in_memory());
    let report = build_report(3).await.expect("report");
    assert!(report.starts_with("day 3, fence "));
    try_report(3).await.expect("free again");
}
