//! Lock semantics that hold on every store: each test runs on Redis and in memory. The bodies
//! live in one file per behaviour (`semantics/*.rs`: holders, leases, waiters); the tests are
//! declared here, so that their names stay `semantics::<body>::{redis,memory}`.

use std::time::Duration;

use distlock::{Client, Lease, ReleaseOutcome};

use crate::support::fixture::on_both_stores;

mod holders;
mod leases;
mod waiters;

use holders::{
    busy_reports_the_holders_remaining_ttl, exactly_one_winner_of_125_simultaneous_tries,
    extend_resets_the_ttl_and_refuses_a_lost_lease, fence_keeps_increasing_after_its_key_is_lost,
    fences_strictly_increase_in_grant_order, invalid_input_is_refused_and_writes_nothing,
    mutual_exclusion_16_tasks, names_that_look_alike_are_different_locks,
    release_and_extend_after_expiry_touch_nothing, stale_owner_never_disturbs_the_next_one,
};
use leases::{
    cancellation_and_drop_leave_nothing_behind, max_hold_bounds_the_hold,
    non_reentrant_run_waits_for_itself, panic_in_critical_section_releases_the_lock,
    reentrant_run_joins_the_outer_lease, run_ends_the_body_when_the_lease_is_lost,
    watchdog_keeps_a_long_hold_alive, watchdog_off_lease_is_lost_at_its_deadline,
};
use waiters::{
    many_waiters_leave_no_subscription_behind, missed_wakeup_costs_at_most_one_pttl,
    waiters_of_one_client_are_woken_release_by_release,
};

on_both_stores!(
    mutual_exclusion_16_tasks,
    exactly_one_winner_of_125_simultaneous_tries,
    release_and_extend_after_expiry_touch_nothing,
    fences_strictly_increase_in_grant_order,
    fence_keeps_increasing_after_its_key_is_lost,
    cancellation_and_drop_leave_nothing_behind,
    panic_in_critical_section_releases_the_lock,
    many_waiters_leave_no_subscription_behind,
    waiters_of_one_client_are_woken_release_by_release,
    reentrant_run_joins_the_outer_lease,
    non_reentrant_run_waits_for_itself,
    extend_resets_the_ttl_and_refuses_a_lost_lease,
    busy_reports_the_holders_remaining_ttl,
    invalid_input_is_refused_and_writes_nothing,
    names_that_look_alike_are_different_locks,
);

// Bodies whose timing matters: on Redis they check what holds whatever the scheduling; on
// tokio's paused clock (memory), where nothing runs late, the exact bounds as well.
on_both_stores!(
    paused_memory: stale_owner_never_disturbs_the_next_one,
    watchdog_keeps_a_long_hold_alive,
    missed_wakeup_costs_at_most_one_pttl,
    run_ends_the_body_when_the_lease_is_lost,
    watchdog_off_lease_is_lost_at_its_deadline,
    max_hold_bounds_the_hold,
);

/// Lock `name` of `client`, acquired with `ttl`.
async fn acquire_with_ttl(client: &Client, name: &str, ttl: Duration) -> Lease {
    client.lock(name).ttl(ttl).acquire().await.expect("acquire")
}

/// The names of the lock keys left in `client`'s store (a test that released or outlived all
/// its leases expects none).
pub(crate) async fn lock_keys_left(client: &Client) -> Vec<String> {
    client
        .__inspect()
        .keys()
        .await
        .expect("keys")
        .into_iter()
        .filter(|k| k.contains(":lock:"))
        .collect()
}

/// A service that takes and releases one lease at a time leaves the watchdog with nothing to
/// watch at every look; a new lease that is not due before the watchdog's next look must not
/// wake it (a wake-up per lease is a task switch and a scan on the hot path). One runtime
/// thread, as in a `current_thread` service: the task can only look between leases, so it
/// always finds the map empty. The watchdog does not depend on the store; memory suffices.
#[tokio::test]
async fn one_lease_at_a_time_does_not_wake_the_watchdog_each_time() {
    const LEASES: u64 = 200;
    let client = Client::in_memory();
    let inspect = client.__inspect();
    // A short lease starts the task, which looks again at its renewal time (ttl/3) and then
    // finds nothing to watch: the idle state every later lease arrives in.
    let lease = acquire_with_ttl(&client, "seq", Duration::from_millis(60)).await;
    lease.release().await.expect("release");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = inspect.watchdog_scans();
    for _ in 0..LEASES {
        let lease = client.lock("seq").acquire().await.expect("acquire");
        assert_eq!(inspect.watched_leases(), 1, "the lease is watched");
        lease.release().await.expect("release");
        tokio::task::yield_now().await;
    }
    let scans = inspect.watchdog_scans() - before;
    assert!(
        scans < LEASES / 10,
        "{scans} watchdog scans for {LEASES} one-at-a-time leases"
    );
}

/// The watchdog task exits after a long idle spell; the next lease starts a new one and is
/// renewed. On a paused clock, so the 30 s idle spell costs nothing.
#[tokio::test(start_paused = true)]
async fn a_lease_after_the_watchdog_went_idle_is_still_renewed() {
    let client = Client::in_memory();
    let inspect = client.__inspect();
    let lease = acquire_with_ttl(&client, "idle", Duration::from_secs(3)).await;
    lease.release().await.expect("release");
    // Long enough for the task to find nothing to watch for its whole idle allowance.
    tokio::time::sleep(Duration::from_secs(120)).await;
    let scans = inspect.watchdog_scans();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        inspect.watchdog_scans(),
        scans,
        "the idle watchdog task did not exit"
    );

    let renewals = inspect.renewal_calls();
    let lease = acquire_with_ttl(&client, "idle", Duration::from_secs(3)).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        !lease.is_lost(),
        "the lease was lost: {:?}",
        lease.lost_reason()
    );
    assert!(
        inspect.renewal_calls() >= renewals + 3,
        "a 10 s hold of a 3 s lease was renewed {} times",
        inspect.renewal_calls() - renewals
    );
    assert_eq!(
        lease.release().await.expect("release"),
        ReleaseOutcome::Released
    );
}
