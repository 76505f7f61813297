//! TESTPLAN 24: the lease token (the secret that proves ownership) never shows in `Debug`,
//! `Display` or tracing output, on either store, through acquire, renewal, loss and release.

use std::time::Duration;

use distlock::LockError;

use crate::support::fixture::Fixture;
use crate::traces::Capture;

async fn token_never_shows(fx: Fixture) {
    // Current-thread runtime: every task (the watchdog too) runs on this thread.
    let capture = Capture::start(tracing::Level::TRACE);

    let inspect = fx.client.__inspect();
    let mut shown = String::new();
    let lease = fx
        .client
        .lock("secret")
        // Renewed at 400 and 800 ms; long enough that a busy machine cannot make a renewal
        // miss the deadline (2/3 of it less the margin: ~740 ms).
        .ttl(Duration::from_millis(1200))
        .acquire()
        .await
        .expect("acquire");
    let token = inspect
        .get(&inspect.lock_key("secret").expect("key"))
        .await
        .expect("get")
        .expect("the lock key holds the token");
    // The secret, then who holds it and since when (shown to operators on purpose).
    let (secret, holder) = token.split_at(32);
    assert!(
        secret.bytes().all(|b| b.is_ascii_hexdigit()),
        "128-bit secret as hex: {token}"
    );
    assert!(
        holder.starts_with(&format!(".{}.", fx.client.identity())),
        "the identity follows the secret: {token}"
    );
    let token = secret.to_owned();
    tokio::time::sleep(Duration::from_millis(900)).await; // a few renewals
    shown.push_str(&format!("{lease:?} {:?}", lease.handle()));
    let busy = fx.client.lock("secret").acquire().await.expect_err("busy");
    shown.push_str(&format!("{busy} {busy:?}"));
    // Lose it: the key disappears, the watchdog notices, the release finds it gone.
    inspect
        .delete(&inspect.lock_key("secret").expect("key"))
        .await
        .expect("delete");
    lease.lost().await;
    let lost = lease.ensure_held().expect_err("lost");
    assert!(matches!(lost, LockError::LeaseLost { .. }));
    shown.push_str(&format!("{lost} {lost:?} {lease:?}"));
    let outcome = lease.release().await.expect("release");
    shown.push_str(&format!("{outcome:?}"));
    shown.push_str(&format!("{:?}", fx.client));

    let logged = capture.text();
    assert!(
        logged.contains("lease lost"),
        "the loss was not traced at all:\n{logged}"
    );
    assert!(
        !logged.contains(&token),
        "the token leaked into tracing output:\n{logged}"
    );
    assert!(
        !shown.contains(&token),
        "the token leaked into Debug/Display: {shown}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn token_never_shows_redis() {
    token_never_shows(Fixture::redis().await).await;
}

#[tokio::test(flavor = "current_thread")]
async fn token_never_shows_memory() {
    token_never_shows(Fixture::memory()).await;
}
