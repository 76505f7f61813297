//! Hierarchical locks on both stores (TESTPLAN 62): the compatibility matrix against a
//! reference model, row and table holders never overlapping incompatibly, a table's writer
//! not starved by a stream of readers, leases like every other (fences, renewal, release), and
//! bad paths refused with a typed error.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use distlock::{HierarchyMode, InvalidName, LeaseKind, LockError, ReleaseOutcome};

use crate::support::fixture::{Fixture, on_both_stores};
use crate::support::hierarchy::{
    Occupancy, a_table_writer_behind_readers, mixed_workload, model_check,
};

on_both_stores!(
    the_matrix_matches_the_reference_model,
    rows_and_tables_never_overlap_incompatibly,
    a_path_is_a_lease_like_every_other,
    bad_paths_are_refused_with_a_typed_error,
);
on_both_stores!(
    paused_memory: a_table_writer_behind_a_stream_of_readers_gets_in_within_a_bound,
    a_vanished_waiters_mark_goes_with_its_wait_plus_the_claim,
    the_watchdog_renews_every_level,
);

/// 8 random sequences of 250 tries and releases over `a`, `a/b`, `a/c`, `a/b/x`, `a/b/y`,
/// `a/c/z`, each step held against the reference.
async fn the_matrix_matches_the_reference_model(fx: Fixture) {
    for seed in 0..8 {
        model_check(&fx.client, &format!("m{seed}"), seed, 250).await;
    }
}

/// 3 row tasks (X on random rows of `db/t`) and 2 table tasks (S or X on `db/t`) over two
/// clients, 150 sections each: no table holder overlaps a row holder, no two X on one row
/// or on the table overlap; rows overlap each other, table readers each other.
async fn rows_and_tables_never_overlap_incompatibly(fx: Fixture) {
    let clients = [fx.client.clone(), fx.another_client().await];
    let occupancy = Arc::new(Occupancy::default());
    mixed_workload(&clients, "db", 3, 2, 150, occupancy.clone()).await;
    assert_eq!(
        occupancy.violations.load(Ordering::SeqCst),
        0,
        "incompatible holders overlapped"
    );
    assert!(
        occupancy.most_rows.load(Ordering::SeqCst) > 1,
        "rows never overlapped"
    );
}

/// As the read-write lock's writer: where nothing runs late, the readers' 40 ms holds and a
/// few round trips; on the real clock, only "the readers in finish, no new one starts" told
/// from a writer starved for its whole 10 s wait.
async fn a_table_writer_behind_a_stream_of_readers_gets_in_within_a_bound(fx: Fixture) {
    let bound = if fx.paused() {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(5)
    };
    let mut readers = Vec::new();
    for _ in 0..3 {
        readers.push(fx.another_client().await);
    }
    let waits = a_table_writer_behind_readers(&readers, &fx.client, "stream", bound).await;
    eprintln!("table writer waits behind 6 readers (40 ms holds): {waits:?}");
}

/// Fences minted with the grant and rising; the lease listed as a hierarchy lease; renewed
/// (extend) on every level; released on every level (an X on the table gets in after); the
/// operators' read names each level's holders.
async fn a_path_is_a_lease_like_every_other(fx: Fixture) {
    let row = fx
        .client
        .hierarchy_lock("shop/orders/42")
        .ttl(Duration::from_secs(2))
        .exclusive()
        .await
        .expect("row");
    let fence = row.fence().await.expect("fence");
    let own = fx.client.own_leases();
    assert!(
        own.iter()
            .any(|l| l.name == "shop/orders/42" && l.kind == LeaseKind::Hierarchy),
        "{own:?}"
    );
    let other_row = fx
        .client
        .hierarchy_lock("shop/orders/43")
        .intent_exclusive()
        .await
        .expect("another row");
    assert!(other_row.fence().await.expect("fence") > fence);
    let table = fx.client.hierarchy_lock("shop/orders");
    assert!(matches!(table.shared().await, Err(LockError::Busy { .. })));
    let holders = fx
        .client
        .hierarchy_lock_state("shop/orders")
        .await
        .expect("state");
    assert_eq!(holders.len(), 2, "{holders:?}");
    assert!(
        holders
            .iter()
            .all(|h| h.mode == HierarchyMode::IntentExclusive && h.path == "shop/orders")
    );
    let root = fx.client.hierarchy_lock_state("shop").await.expect("state");
    assert_eq!(root.len(), 2, "{root:?}");
    row.extend(Duration::from_secs(20))
        .await
        .expect("extend every level");
    for level in ["shop", "shop/orders", "shop/orders/42"] {
        let holders = fx.client.hierarchy_lock_state(level).await.expect("state");
        assert!(
            holders
                .iter()
                .any(|h| h.state.remaining_ttl > Duration::from_secs(10)),
            "{level} was not renewed: {holders:?}"
        );
    }
    assert_eq!(
        row.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_eq!(
        other_row.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    for level in ["shop", "shop/orders", "shop/orders/42"] {
        let holders = fx.client.hierarchy_lock_state(level).await.expect("state");
        assert!(holders.is_empty(), "{level} still held: {holders:?}");
    }
    let table = fx
        .client
        .hierarchy_lock("shop/orders")
        .exclusive()
        .await
        .expect("the table, once the rows are released");
    assert!(table.fence().await.expect("fence") > fence);
    table.release().await.expect("release");
}

async fn bad_paths_are_refused_with_a_typed_error(fx: Fixture) {
    let cases = [
        ("", InvalidName::Empty),
        ("a//b", InvalidName::EmptyLevel { level: 2 }),
        ("/a", InvalidName::EmptyLevel { level: 1 }),
        ("a/b/", InvalidName::EmptyLevel { level: 3 }),
        (
            "a/b/c/d/e/f/g/h/i",
            InvalidName::TooManyLevels {
                levels: 9,
                max: distlock::MAX_HIERARCHY_LEVELS,
            },
        ),
    ];
    for (path, expected) in cases {
        for mode in HierarchyMode::ALL {
            match fx.client.hierarchy_lock(path).lock(mode).await {
                Err(LockError::InvalidName(err)) => assert_eq!(err, expected, "{path:?}"),
                other => panic!("{path:?} {mode}: {other:?}"),
            }
        }
        assert!(matches!(
            fx.client.hierarchy_lock_state(path).await,
            Err(LockError::InvalidName(_))
        ));
    }
    let long = "x".repeat(distlock::MAX_NAME_LEN + 1);
    assert!(matches!(
        fx.client.hierarchy_lock(long).exclusive().await,
        Err(LockError::InvalidName(InvalidName::TooLong { .. }))
    ));
    let err = fx
        .client
        .hierarchy_lock("a/b")
        .ttl(Duration::ZERO)
        .shared()
        .await
        .expect_err("a zero ttl");
    assert!(matches!(err, LockError::InvalidConfig { .. }), "{err}");
    // Eight levels is the most, and fine.
    let deep = fx
        .client
        .hierarchy_lock("a/b/c/d/e/f/g/h")
        .exclusive()
        .await
        .expect("8 levels");
    deep.release().await.expect("release");
}

/// A waiter for the table that gives up (its wait runs out behind a reader without a
/// watchdog) leaves its mark: new readers are refused meanwhile, but only until the reader's
/// ttl plus the claim time (250 ms) has passed since the waiter's last attempt, then they get
/// in.
async fn a_vanished_waiters_mark_goes_with_its_wait_plus_the_claim(fx: Fixture) {
    const TTL: Duration = Duration::from_millis(400);
    const CLAIM: Duration = Duration::from_millis(250);
    let reader = fx
        .client
        .hierarchy_lock("gone/t")
        .ttl(TTL)
        .watchdog(false)
        .shared()
        .await
        .expect("reader");
    let other = fx.another_client().await;
    let waited = other
        .hierarchy_lock("gone/t")
        .wait(Duration::from_millis(100))
        .exclusive()
        .await;
    assert!(
        matches!(waited, Err(LockError::Timeout { .. })),
        "{waited:?}"
    );
    let gave_up = tokio::time::Instant::now();
    // The mark keeps a new reader out although only a reader holds the table.
    let refused = fx.client.hierarchy_lock("gone/t").shared().await;
    assert!(
        matches!(refused, Err(LockError::Busy { .. })),
        "{refused:?}"
    );
    std::mem::forget(reader);
    let late = fx
        .client
        .hierarchy_lock("gone/t")
        .wait(Duration::from_secs(10))
        .shared()
        .await
        .expect("a reader gets in once the mark is gone");
    let after = gave_up.elapsed();
    // The mark was set for at most the reader's remaining ttl plus the claim time; the late
    // reader slept what the mark had left plus its jitter. Where nothing runs late only: on
    // the real clock nothing bounds a busy machine's delays.
    if fx.paused() {
        assert!(
            after <= TTL + CLAIM + Duration::from_millis(100),
            "{after:?}"
        );
    }
    let keys = fx
        .client
        .__inspect()
        .hierarchy_keys("gone/t")
        .expect("keys");
    assert_eq!(
        fx.client.__inspect().pttl(&keys[1][4]).await.expect("pttl"),
        None
    );
    late.release().await.expect("release");
}

/// A path held three ttls by the watchdog alone stays held on every level: a table X is
/// still refused, the lease never lost. Then one level taken away behind its back makes the
/// next renewal lose the whole lease.
async fn the_watchdog_renews_every_level(fx: Fixture) {
    let row = fx
        .client
        .hierarchy_lock("dog/t/1")
        .ttl(Duration::from_millis(600))
        .exclusive()
        .await
        .expect("row");
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert!(
        !row.handle().is_lost(),
        "lost: {:?}",
        row.handle().lost_reason()
    );
    for path in ["dog", "dog/t", "dog/t/1"] {
        assert!(
            matches!(
                fx.client.hierarchy_lock(path).exclusive().await,
                Err(LockError::Busy { .. })
            ),
            "{path} was not kept"
        );
    }
    let keys = fx
        .client
        .__inspect()
        .hierarchy_keys("dog/t/1")
        .expect("keys");
    // The root's IX set: the row holds IX there.
    assert!(
        fx.client
            .__inspect()
            .delete(&keys[0][1])
            .await
            .expect("delete")
    );
    let err = row
        .extend(Duration::from_secs(5))
        .await
        .expect_err("one level gone: the lease is lost");
    assert!(matches!(err, LockError::LeaseLost { .. }), "{err}");
    assert!(row.handle().is_lost());
}
