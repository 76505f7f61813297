//! The operators' view (issue 18 §2): `Client::lock_state` and `Client::force_unlock`, on
//! Redis and in memory.

use std::time::Duration;

use distlock::{Client, LockError, LockState};
use tokio::time::Instant;

use crate::support::fixture::{Fixture, on_both_stores};

on_both_stores!(
    held_locks_lists_this_prefixs_held_locks_by_name,
    lock_state_reports_free_held_and_waiters,
    force_unlock_frees_the_lock_wakes_its_waiter_and_the_holder_learns,
);

/// Polls `lock_state` until `want` says yes, for at most `within`.
async fn state_until(
    fx: &Fixture,
    name: &str,
    within: Duration,
    want: impl Fn(&LockState) -> bool,
) -> LockState {
    let deadline = Instant::now() + within;
    loop {
        let state = fx.client.lock_state(name).await.expect("lock_state");
        if want(&state) || Instant::now() >= deadline {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn lock_state_reports_free_held_and_waiters(fx: Fixture) {
    const TTL: Duration = Duration::from_secs(5);
    assert_eq!(
        fx.client.lock_state("state").await.expect("lock_state"),
        LockState::Free
    );
    let lease = fx
        .client
        .lock("state")
        .ttl(TTL)
        .acquire()
        .await
        .expect("acquire");
    match fx.client.lock_state("state").await.expect("lock_state") {
        LockState::Held {
            remaining_ttl,
            waiters: false,
            holder,
            ..
        } => {
            assert!(
                remaining_ttl <= TTL && remaining_ttl > TTL - Duration::from_secs(2),
                "remaining ttl {remaining_ttl:?} of a {TTL:?} lease just granted"
            );
            let holder = holder.expect("a lease of this version names its holder");
            assert_eq!(holder.identity, fx.client.identity());
        }
        other => panic!("a held lock with no waiter: {other:?}"),
    }
    // A waiter of another client marks it.
    let other = fx.another_client().await;
    let waiter = tokio::spawn(async move {
        other
            .lock("state")
            .wait(Duration::from_secs(20))
            .acquire()
            .await
    });
    let marked = state_until(&fx, "state", Duration::from_secs(5), |s| {
        matches!(s, LockState::Held { waiters: true, .. })
    })
    .await;
    assert!(
        matches!(marked, LockState::Held { waiters: true, .. }),
        "a lock with a waiter: {marked:?}"
    );
    lease.release().await.expect("release");
    let taken = waiter.await.expect("waiter task").expect("waiter acquires");
    assert!(matches!(
        fx.client.lock_state("state").await.expect("lock_state"),
        LockState::Held { .. }
    ));
    taken.release().await.expect("release");
    let free = state_until(&fx, "state", Duration::from_secs(2), |s| {
        *s == LockState::Free
    })
    .await;
    assert_eq!(free, LockState::Free);
    // Bad names are refused like everywhere else.
    assert!(matches!(
        fx.client.lock_state("").await,
        Err(LockError::InvalidName(_))
    ));
    assert!(matches!(
        fx.client.force_unlock("").await,
        Err(LockError::InvalidName(_))
    ));
}

async fn force_unlock_frees_the_lock_wakes_its_waiter_and_the_holder_learns(fx: Fixture) {
    // Long, so that the holder's first renewal (a third of it) cannot be what tells it.
    const TTL: Duration = Duration::from_secs(30);
    assert!(
        !fx.client
            .force_unlock("forced")
            .await
            .expect("force_unlock"),
        "a free lock: nothing to force"
    );
    let holder = fx.another_client().await;
    let asked_at = Instant::now();
    let lease = holder
        .lock("forced")
        .ttl(TTL)
        .acquire()
        .await
        .expect("holder acquires");
    let handle = lease.handle();
    // Minted while held: a lease the force takes the lock from mints nothing afterwards.
    let forced_fence = handle.fence().await.expect("fence");
    let waiter_client = fx.another_client().await;
    let waiter = tokio::spawn(async move {
        let lease = waiter_client
            .lock("forced")
            .wait(Duration::from_secs(30))
            .acquire()
            .await;
        (lease, Instant::now())
    });
    // The waiter is listening once it has marked the lock.
    let marked = state_until(&fx, "forced", Duration::from_secs(5), |s| {
        matches!(s, LockState::Held { waiters: true, .. })
    })
    .await;
    assert!(matches!(marked, LockState::Held { waiters: true, .. }));
    fx.until_listening_for_forces(1).await;
    let lost_at = tokio::spawn({
        let handle = handle.clone();
        async move {
            handle.lost().await;
            Instant::now()
        }
    });
    let forced_at = Instant::now();
    assert!(
        fx.client
            .force_unlock("forced")
            .await
            .expect("force_unlock")
    );
    // Woken by the forced release, not by the holder's ttl running out (the watchdog keeps
    // renewing a held lease; the holder's renewals stop only once it learns).
    let (taken, taken_at) = waiter.await.expect("waiter task");
    let taken = taken.expect("the waiter gets the forced lock");
    assert!(
        taken_at.duration_since(forced_at) < TTL,
        "the waiter got the lock {:?} after it was forced",
        taken_at.duration_since(forced_at)
    );
    assert!(taken.fence().await.expect("fence") > forced_fence);
    // The old holder is told through the revocation channel: it learns long before its
    // watchdog's next renewal would tell it (a third of its ttl).
    let lost_at = tokio::time::timeout_at(asked_at + TTL / 3, lost_at)
        .await
        .expect("the forced holder's lost signal fires before its first renewal")
        .expect("lost task");
    eprintln!(
        "forced holder told {:?} after force_unlock was called",
        lost_at.saturating_duration_since(forced_at)
    );
    assert!(handle.is_lost());
    assert_eq!(handle.lost_reason(), Some(distlock::LossReason::NotHeld));
    // Its release changes nothing for the new holder.
    assert!(matches!(
        lease.release().await,
        Ok(distlock::ReleaseOutcome::HeldByOther) | Err(LockError::LeaseLost { .. })
    ));
    assert!(!taken.is_lost());
    taken.release().await.expect("release");
}

/// `held_locks` (issue 29 §6): every held lock of the client's prefix by its name (braces,
/// `%` and glob characters included), with its holder; no lock of another prefix (one with
/// glob characters), no semaphore, nothing released; a limit it says it stopped at.
async fn held_locks_lists_this_prefixs_held_locks_by_name(fx: Fixture) {
    const TTL: Duration = Duration::from_secs(20);
    let names = ["100%", "a*b?[c]\\", "orders:{42}"];
    let mut leases = Vec::new();
    for name in names {
        leases.push(
            fx.client
                .lock(name)
                .identity("lister-test")
                .ttl(TTL)
                .acquire()
                .await
                .expect("acquire"),
        );
    }
    // Things that are not locks of this prefix.
    let _permit = fx
        .client
        .semaphore("not-a-lock", 2)
        .acquire()
        .await
        .expect("semaphore");
    let other_prefix = match &fx.server {
        Some(server) => Client::builder()
            .prefix(format!("{}*", fx.client.prefix()))
            .connect(&server.url())
            .await
            .expect("connect"),
        None => Client::builder()
            .prefix(format!("{}*", fx.client.prefix()))
            .in_memory(),
    };
    let _foreign = other_prefix
        .lock("foreign")
        .acquire()
        .await
        .expect("acquire on another prefix");

    let listing = fx.client.held_locks(100).await.expect("held_locks");
    assert!(listing.complete, "three locks, well under the limit");
    let listed: Vec<&str> = listing.locks.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(listed, names, "by name, in order");
    for lock in &listing.locks {
        match &lock.state {
            LockState::Held {
                remaining_ttl,
                holder: Some(holder),
                ..
            } => {
                assert_eq!(holder.identity, "lister-test");
                assert!(*remaining_ttl <= TTL, "{lock:?}");
            }
            other => panic!("{}: held and named: {other:?}", lock.name),
        }
    }
    // The other prefix sees its own lock only, though its prefix is a glob of ours.
    let theirs = other_prefix.held_locks(100).await.expect("held_locks");
    let theirs: Vec<&str> = theirs.locks.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(theirs, ["foreign"]);

    // A limit below what is held: that many, and it says so.
    let two = fx.client.held_locks(2).await.expect("held_locks");
    assert_eq!(two.locks.len(), 2);
    assert!(!two.complete, "it stopped at its limit: {two:?}");

    // Released or forced locks are gone from the listing.
    leases.remove(0).release().await.expect("release");
    assert!(fx.client.force_unlock(names[2]).await.expect("force"));
    let left = fx.client.held_locks(100).await.expect("held_locks");
    let left: Vec<&str> = left.locks.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(left, [names[1]]);
    assert!(
        fx.client
            .held_locks(0)
            .await
            .expect("held_locks")
            .locks
            .is_empty()
    );
}
