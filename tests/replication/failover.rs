//! The library behind Sentinel (TESTPLAN 38): `Client::connect_sentinel` finds the primary,
//! follows a failover to the promoted replica (killed primary, and a graceful failover that
//! leaves the old primary up as a read-only replica), and leases, waiters, fences and rate
//! limits carry on; an any-of rate limit (issue 28 §4) charges one policy per request there
//! as on a single primary, before and after a failover.

use std::time::{Duration, Instant};

use distlock::Client;
use distlock::ratelimit::{Policy, Rate};

use crate::support::election::{a_leads, expect_seen};
use crate::support::sentinel::SentinelSetup;

async fn client(setup: &SentinelSetup) -> Client {
    Client::builder()
        .response_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
        .connect_sentinel(setup.master_name(), setup.sentinel_urls())
        .await
        .unwrap_or_else(|e| panic!("connect_sentinel: {e}\n{}", setup.logs()))
}

/// Retries `acquire` of a fresh name until the client reaches a primary again; returns how
/// long that took.
async fn until_served(client: &Client, within: Duration) -> Duration {
    let started = Instant::now();
    let mut last = None;
    while started.elapsed() < within {
        match client
            .lock(format!("probe:{}", rand::random::<u64>()))
            .acquire()
            .await
        {
            Ok(lease) => {
                lease.release().await.expect("release");
                return started.elapsed();
            }
            Err(err) => last = Some(err),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the client never reached the promoted primary: {last:?}");
}

/// Behind Sentinel, an any-of limiter charges the steady rate, then the burst budget, then
/// neither, with the figures of a single primary; its state is replicated, so after a
/// failover the budget is still spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_any_of_limiter_charges_one_policy_behind_sentinel() {
    let setup = SentinelSetup::start();
    let client = client(&setup).await;
    let limiter = client
        .rate_limiter_any([
            Policy::gcra("steady", Rate::per_hour(2).expect("rate")).expect("policy"),
            Policy::gcra("burst", Rate::per_day(3).expect("rate")).expect("policy"),
        ])
        .deny_cache(0)
        .build()
        .expect("valid limiter");
    let charged = async || {
        let d = limiter.check("user").await.expect("check");
        assert_eq!(d.allowed, d.granted == 1, "{d:?}");
        d.policies
            .iter()
            .filter(|p| p.charged)
            .map(|p| p.policy.to_string())
            .collect::<Vec<_>>()
    };
    for want in ["steady", "steady", "burst", "burst"] {
        assert_eq!(charged().await, [want]);
    }
    setup.wait_replication_synced().await;
    setup.kill_primary().await;
    until_served(&client, Duration::from_secs(20)).await;
    assert_eq!(
        charged().await,
        ["burst"],
        "one unit of the budget was left"
    );
    assert!(charged().await.is_empty(), "both spent: denied");
    let d = limiter.peek("user").await.expect("peek");
    assert!(!d.allowed, "{d:?}");
    assert_eq!(
        d.policies.iter().map(|p| p.remaining).collect::<Vec<_>>(),
        [0, 0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_is_followed_to_the_promoted_replica() {
    let setup = SentinelSetup::start();
    let holder = client(&setup).await;
    let waiter = client(&setup).await;
    let limiter = holder
        .rate_limiter(Policy::gcra("api", Rate::per_second(1000).expect("rate")).expect("policy"))
        .build()
        .expect("valid limiter");
    assert!(limiter.check("user").await.expect("check").allowed);

    let lease = holder
        .lock("held")
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquire");
    let first_fence = lease.fence().await.expect("fence");
    let waiting = tokio::spawn(async move {
        let lease = waiter
            .lock("held")
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .expect("the waiter gets the lock after the failover");
        (Instant::now(), lease)
    });
    setup.wait_replication_synced().await;

    let promotion = setup.kill_primary().await;
    let reached = until_served(&holder, Duration::from_secs(20)).await;
    eprintln!(
        "sentinel failover: replica promoted {:?} after the kill; the client was served again \
         {reached:?} after the promotion",
        promotion.promoted_after
    );
    assert!(
        reached < Duration::from_secs(10),
        "reached after {reached:?}"
    );

    // The lease was on the replica: it stays valid, renewed on the new primary.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        !lease.is_lost(),
        "the lease was lost: {:?}",
        lease.lost_reason()
    );
    assert!(
        limiter
            .check("user")
            .await
            .expect("check after the failover")
            .allowed
    );

    // The waiter, subscribed on the old primary, is woken on the new one.
    let released = Instant::now();
    lease.release().await.expect("release");
    let (got, second) = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the waiter never got the lock")
        .expect("waiter task");
    assert!(
        got - released < Duration::from_secs(2),
        "the waiter got the lock {:?} after the release",
        got - released
    );
    assert!(
        second.fence().await.expect("fence") > first_fence,
        "fences went backwards across the failover"
    );
    second.release().await.expect("release");
}

/// A graceful failover (`SENTINEL FAILOVER`) leaves the old primary up and writable for
/// several seconds before the sentinels demote it; whatever is written there meanwhile is
/// discarded when it resyncs from the new primary. The client moves on the sentinels'
/// `+switch-master` announcement, so the lease's renewals land on the new primary: it
/// survives a failover that takes longer than its ttl. (Following only on errors, the
/// renewals went to the old primary until its demotion, and the lease expired on the new
/// one: this test failed with `NotHeld`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_failover_is_followed_on_the_announcement() {
    let setup = SentinelSetup::start();
    let client = client(&setup).await;
    let ttl = Duration::from_secs(6);
    let lease = client
        .lock("graceful")
        .ttl(ttl)
        .acquire()
        .await
        .expect("acquire");
    setup.wait_replication_synced().await;
    let began = Instant::now();
    let promotion = setup.failover().await;
    eprintln!(
        "graceful sentinel failover: promoted after {:?}, settled after {:?}",
        promotion.promoted_after,
        began.elapsed()
    );
    // The old primary is a replica again by now; make sure the lease outlived its ttl on the
    // new primary (renewed there, not on the node that was demoted).
    let past_ttl = began + ttl + Duration::from_secs(2);
    tokio::time::sleep_until(past_ttl.into()).await;
    assert!(!lease.is_lost(), "lost: {:?}", lease.lost_reason());
    let lease_key = "distlock:lock:{graceful}";
    let mut new_primary = setup.primary().await.conn().await;
    let pttl: i64 = redis::cmd("PTTL")
        .arg(lease_key)
        .query_async(&mut new_primary)
        .await
        .expect("PTTL on the new primary");
    assert!(pttl > 0, "the lease's key on the new primary: PTTL {pttl}");

    // New work goes to the new primary without an error.
    let other = client
        .lock("after-graceful")
        .acquire()
        .await
        .expect("acquire after");
    other.release().await.expect("release");
    assert_eq!(
        lease.release().await.expect("release"),
        distlock::ReleaseOutcome::Released
    );
}

/// Leader election behind Sentinel: resign hands over at once, followers are told, and after
/// a failover the next leader's term is above every earlier one and followers (resubscribed
/// on the promoted primary) see it within the observe bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_carries_on_through_a_failover() {
    const TTL: Duration = Duration::from_secs(10);
    let setup = SentinelSetup::start();
    let a = client(&setup).await;
    let b = client(&setup).await;
    let (mut e, first) = a_leads(&a, &b, "leader", TTL).await;
    let second = e.hand_over_to_b(first, &b, "leader", "sentinel").await;
    let second_term = second.term();
    second.resign().await.expect("resign");

    let promotion = setup.failover().await;
    println!("failover settled after {:?}", promotion.settled_after);
    until_served(&a, Duration::from_secs(20)).await;
    let third = tokio::time::timeout(Duration::from_secs(30), e.ea.campaign("c"))
        .await
        .expect("elected on the promoted primary")
        .expect("campaign");
    assert!(
        third.term() > second_term,
        "terms keep increasing across the failover"
    );
    expect_seen(
        &mut e.followed,
        e.within,
        (third.term(), "c"),
        "the leader on the promoted primary",
    )
    .await;
    third.resign().await.expect("resign");
}
