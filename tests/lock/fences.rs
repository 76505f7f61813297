//! Lazy and eager fences (TESTPLAN 58, issue 41): a lease mints its fence when first asked for,
//! only while the store holds it, and keeps it; a lost lease never gets one; fences minted by
//! successive holders increase whether they were minted with the grant or later, and across a
//! flush of the store. On Redis, the uncontended acquire of a lazy lease is the plain
//! `SET key token NX PX ttl`, and a retry under a token the key already holds is granted.

use std::time::Duration;

use distlock::{LockError, LossReason};

use crate::support::fixture::{Fixture, on_both_stores};

on_both_stores!(
    a_lazy_lease_mints_once_while_held,
    a_lost_lease_never_gets_a_fence,
    lazy_and_eager_fences_of_successive_holders_increase,
);

/// Nothing is minted by the grant; the first `fence()` mints, later ones (and concurrent first
/// ones) answer the same; an eager lease has its fence from the grant.
async fn a_lazy_lease_mints_once_while_held(fx: Fixture) {
    let lease = fx.client.lock("lazy").acquire().await.expect("acquire");
    assert_eq!(lease.minted_fence(), None, "the grant minted a fence");
    let fence_key = fx.client.__inspect().fence_key("lazy").expect("key");
    let before = fx.client.__inspect().get(&fence_key).await.expect("GET");
    let handle = lease.handle();
    let (a, b) = tokio::join!(lease.fence(), handle.fence());
    let fence = a.expect("minted");
    assert_eq!(
        b.expect("minted"),
        fence,
        "concurrent first calls share one mint"
    );
    assert_eq!(lease.minted_fence(), Some(fence));
    assert_eq!(lease.fence().await.expect("kept"), fence);
    let after = fx.client.__inspect().get(&fence_key).await.expect("GET");
    assert_ne!(before, after, "the mint moved the fence key");
    assert_eq!(
        after.and_then(|v| v.parse::<u64>().ok()),
        Some(fence),
        "one mint: the key holds this fence"
    );
    lease.release().await.expect("release");

    let eager = fx
        .client
        .lock("lazy")
        .fenced()
        .acquire()
        .await
        .expect("acquire");
    let minted = eager.minted_fence().expect("minted with the grant");
    assert!(minted > fence, "{minted} after {fence}");
    assert_eq!(eager.fence().await.expect("fence"), minted);
    eager.release().await.expect("release");
}

/// A lease that expired, whose key was deleted or taken over, or that was released, gets
/// `LeaseLost` from its first `fence()`, and the store mints nothing for it.
async fn a_lost_lease_never_gets_a_fence(fx: Fixture) {
    let inspect = fx.client.__inspect();
    let fence_key = inspect.fence_key("lost").expect("key");

    // Past its deadline: refused without asking the store.
    let expired = fx
        .client
        .lock("lost")
        .ttl(Duration::from_millis(50))
        .watchdog(false)
        .acquire()
        .await
        .expect("acquire");
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert!(matches!(
        expired.fence().await,
        Err(LockError::LeaseLost {
            reason: LossReason::Expired,
            ..
        })
    ));

    // Taken over while the holder still trusts its lease (its key deleted, another holder
    // granted): the store refuses the mint, and the lease ends.
    let held = fx
        .client
        .lock("lost")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire");
    assert!(inspect.delete(&fx.lock_key("lost")).await.expect("delete"));
    let other = fx.another_client().await;
    let next = other.lock("lost").acquire().await.expect("the freed lock");
    let next_fence = next.fence().await.expect("minted");
    let key_before = inspect.get(&fence_key).await.expect("GET");
    match held.fence().await {
        Err(LockError::LeaseLost {
            reason: LossReason::NotHeld,
            ..
        }) => {}
        other => panic!("a lease whose lock was taken got {other:?}"),
    }
    assert!(held.is_lost(), "the refused mint ends the lease");
    assert_eq!(held.lost_reason(), Some(LossReason::NotHeld));
    assert_eq!(
        inspect.get(&fence_key).await.expect("GET"),
        key_before,
        "the refused mint minted nothing"
    );
    assert_eq!(held.minted_fence(), None);

    // Gone (deleted, nobody took it): refused too.
    let gone = fx
        .client
        .lock("lost-gone")
        .acquire()
        .await
        .expect("acquire");
    assert!(
        inspect
            .delete(&fx.lock_key("lost-gone"))
            .await
            .expect("delete")
    );
    assert!(matches!(
        gone.fence().await,
        Err(LockError::LeaseLost {
            reason: LossReason::NotHeld,
            ..
        })
    ));

    // Released: a handle asks in vain.
    let released = fx
        .client
        .lock("lost-released")
        .acquire()
        .await
        .expect("acquire");
    let handle = released.handle();
    released.release().await.expect("release");
    assert!(matches!(
        handle.fence().await,
        Err(LockError::LeaseLost {
            reason: LossReason::Released,
            ..
        })
    ));
    next.release().await.expect("release");
    assert!(next_fence > 0);
}

/// Holders one after the other, some eager, some minting at once, some late in their hold,
/// some never: every fence minted is above every earlier holder's.
async fn lazy_and_eager_fences_of_successive_holders_increase(fx: Fixture) {
    let mut last = 0u64;
    for round in 0..12u32 {
        let lock = fx.client.lock("successive");
        let lease = if round % 3 == 0 {
            lock.fenced().acquire().await
        } else {
            lock.acquire().await
        }
        .expect("acquire");
        if round % 4 == 1 {
            // Never minted: nothing to compare, and the next holder is still above `last`.
            lease.release().await.expect("release");
            continue;
        }
        if round % 2 == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let fence = lease.fence().await.expect("fence");
        assert!(fence > last, "round {round}: fence {fence} after {last}");
        last = fence;
        lease.release().await.expect("release");
    }
}

/// The uncontended acquire of a lazy lease is one plain `SET key token NX PX ttl`: no script
/// runs (`INFO commandstats`); its release is the compare-and-delete script, as a raw client's.
/// An eager acquire is the script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_lazy_acquire_is_the_raw_command() {
    let fx = Fixture::redis().await;
    let server = fx.server.as_ref().expect("redis");
    let mut conn = server.conn().await;
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .expect("RESETSTAT");
    const CYCLES: u64 = 20;
    for i in 0..CYCLES {
        let lease = fx
            .client
            .lock(format!("raw:{i}"))
            .acquire()
            .await
            .expect("acquire");
        lease.release().await.expect("release");
    }
    let stats = commandstats(&mut conn).await;
    assert_eq!(stats("set"), CYCLES, "one SET per acquire");
    assert_eq!(
        stats("evalsha"),
        CYCLES,
        "one script per release, none per acquire"
    );
    assert_eq!(stats("time"), 0, "no fence minted");

    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .expect("RESETSTAT");
    let lease = fx
        .client
        .lock("raw:eager")
        .fenced()
        .acquire()
        .await
        .expect("acquire");
    lease.release().await.expect("release");
    let stats = commandstats(&mut conn).await;
    assert_eq!(
        stats("evalsha"),
        2,
        "the eager grant and the release are scripts"
    );
}

/// A grant whose reply was lost is tried again under the same token: the plain `SET NX`
/// answers nil (the key holds that token), and the script that follows recognises the token
/// and grants it, resetting its ttl. Another token is told the lock is busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_under_its_own_token_is_granted() {
    let fx = Fixture::redis().await;
    let inspect = fx.client.__inspect();
    let key = fx.lock_key("retried");
    let ttl = Duration::from_secs(30);
    assert_eq!(
        inspect
            .acquire_as("retried", "mine", Duration::from_secs(2), false)
            .await
            .expect("acquire"),
        Some(None),
        "granted, nothing minted"
    );
    // The same request again, as a retry after a lost reply.
    assert_eq!(
        inspect
            .acquire_as("retried", "mine", ttl, false)
            .await
            .expect("retry"),
        Some(None),
        "a retry under the holder's token is a grant"
    );
    let left = inspect.pttl(&key).await.expect("PTTL").expect("key");
    assert!(
        left > Duration::from_secs(2),
        "the retry reset the ttl: {left:?}"
    );
    assert_eq!(
        inspect
            .acquire_as("retried", "theirs", ttl, false)
            .await
            .expect("acquire"),
        None,
        "busy for another token"
    );
    let minted = inspect
        .acquire_as("retried", "mine", ttl, true)
        .await
        .expect("retry, eager");
    assert!(
        matches!(minted, Some(Some(fence)) if fence > 0),
        "{minted:?}"
    );
}

/// A `FLUSHALL` between two holders (the fence key is gone): the next fence, minted lazily, is
/// still above the last one, the key re-seeded from the server's clock in µs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lazy_fences_increase_across_a_flush() {
    let fx = Fixture::redis().await;
    let server = fx.server.as_ref().expect("redis");
    let mut conn = server.conn().await;
    let first = fx.client.lock("flushed").acquire().await.expect("acquire");
    let first_fence = first.fence().await.expect("fence");
    first.release().await.expect("release");
    let () = redis::cmd("FLUSHALL")
        .query_async(&mut conn)
        .await
        .expect("FLUSHALL");
    let second = fx.client.lock("flushed").acquire().await.expect("acquire");
    let second_fence = second.fence().await.expect("fence");
    assert!(
        second_fence > first_fence,
        "{second_fence} after {first_fence} across FLUSHALL"
    );
    second.release().await.expect("release");
}

/// `INFO commandstats`: a command's successful calls (`calls` less `failed_calls`: a first
/// `EVALSHA` that finds no script fails and is sent again), by its name in lower case.
async fn commandstats(
    conn: &mut redis::aio::MultiplexedConnection,
) -> impl Fn(&str) -> u64 + use<> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO");
    move |command: &str| {
        let prefix = format!("cmdstat_{command}:");
        let Some(fields) = info.lines().find_map(|line| line.strip_prefix(&prefix)) else {
            return 0;
        };
        let field = |name: &str| -> u64 {
            fields
                .split(',')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .map_or(0, |v| v.parse().unwrap_or(0))
        };
        field("calls") - field("failed_calls")
    }
}
