//! Hierarchical locks on a real Redis Cluster (TESTPLAN 62): a whole hierarchy lives in its
//! root's slot, so each path is one script on one node; the matrix holds against the
//! reference model, rows and tables never overlap incompatibly, and a table's writer is not
//! starved, for roots on every master.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::locks::{client, names_on_every_master};
use crate::support::cluster::RedisCluster;
use crate::support::hierarchy::{
    Occupancy, a_table_writer_behind_readers, mixed_workload, model_check,
};

/// The model check (4 random sequences of 200 steps) under a root on each master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_matrix_matches_the_reference_model_on_every_master() {
    let cluster = RedisCluster::shared();
    let client = client(cluster, "hier-model").await;
    for (i, root) in names_on_every_master(cluster, &client, 1)
        .await
        .iter()
        .enumerate()
    {
        for seed in 0..4 {
            model_check(
                &client,
                &format!("{root}{seed}"),
                100 * i as u64 + seed,
                200,
            )
            .await;
        }
    }
}

/// Rows and tables of a database on each master at once, over two clients: no incompatible
/// overlap, rows overlapping each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_and_tables_never_overlap_incompatibly_on_every_master() {
    let cluster = RedisCluster::shared();
    let clients = [
        client(cluster, "hier-mix").await,
        client(cluster, "hier-mix").await,
    ];
    let roots = names_on_every_master(cluster, &clients[0], 1).await;
    let runs: Vec<_> = roots
        .into_iter()
        .map(|root| {
            let clients = clients.clone();
            tokio::spawn(async move {
                let occupancy = Arc::new(Occupancy::default());
                mixed_workload(&clients, &root, 3, 2, 100, occupancy.clone()).await;
                (root, occupancy)
            })
        })
        .collect();
    for run in runs {
        let (root, occupancy) = run.await.expect("run");
        assert_eq!(
            occupancy.violations.load(Ordering::SeqCst),
            0,
            "{root}: incompatible holders overlapped\n{}",
            cluster.logs()
        );
        assert!(
            occupancy.most_rows.load(Ordering::SeqCst) > 1,
            "{root}: rows never overlapped"
        );
    }
}

/// A table's writer behind a stream of readers on the Cluster gets in within the bound the
/// single primary's real-clock run has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_writer_is_not_starved_on_a_cluster() {
    let cluster = RedisCluster::shared();
    let readers = [
        client(cluster, "hier-starve").await,
        client(cluster, "hier-starve").await,
    ];
    let writer = client(cluster, "hier-starve").await;
    let waits =
        a_table_writer_behind_readers(&readers, &writer, "stream", Duration::from_secs(5)).await;
    eprintln!("table writer waits on a cluster: {waits:?}");
}
