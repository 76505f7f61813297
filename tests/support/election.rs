//! What the election tests of every backend share: waiting until a campaigner waits, and a
//! follower that is already watching when each leader changes.

use std::time::Duration;

use futures_util::StreamExt as _;
use tokio::time::Instant;

/// Waits until a campaigner has marked election `name`'s lock as waited on (it found the lock
/// busy and sleeps on it), rather than guessing how long that takes.
pub async fn until_a_campaigner_waits(client: &distlock::Client, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = client.lock_state(name).await.expect("lock_state");
        if matches!(state, distlock::LockState::Held { waiters: true, .. }) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no campaigner waits on {name}: {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Follows `election` in a task of its own, from now on: a follower already waiting when
/// each leader changes (not one that only starts to look once told to).
pub fn follow(
    election: &distlock::Election,
) -> tokio::sync::mpsc::UnboundedReceiver<distlock::Leader> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut stream = Box::pin(election.observe());
    tokio::spawn(async move {
        while let Some(leader) = stream.next().await {
            if tx.send(leader).is_err() {
                return;
            }
        }
    });
    rx
}
