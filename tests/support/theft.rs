//! A lock's key deleted behind its holder's back, as the lease-loss tests of the lock and
//! the macro suites do it.

use std::time::Duration;

use distlock::{Client, LockError, LossReason};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Once the holder's body says it is in (through the returned sender), `thief` waits 250 ms
/// and deletes `key` (which must still be there); the task returns when it did.
pub fn steal_once_entered(
    thief: Client,
    key: String,
) -> (oneshot::Sender<()>, JoinHandle<Instant>) {
    let (entered_tx, entered) = oneshot::channel();
    let steal = tokio::spawn(async move {
        entered.await.expect("the body started");
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(thief.__inspect().delete(&key).await.expect("delete"));
        Instant::now()
    });
    (entered_tx, steal)
}

/// Whether `result` is the lease lost as a renewal finds it: the key gone (`NotHeld`; the
/// lease's deadline would say `Expired`).
pub fn lost_at_a_renewal<T>(result: &Result<T, LockError>) -> bool {
    matches!(
        result,
        Err(LockError::LeaseLost {
            reason: LossReason::NotHeld,
            ..
        })
    )
}
