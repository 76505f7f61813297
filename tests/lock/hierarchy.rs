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
on_both_stores!(paused_memory: a_table_writer_behind_a_stream_of_readers_gets_in_within_a_bound);

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
