//! Case 11: the server's script cache is flushed before every operation.

use std::time::Duration;

use distlock::{Lease, ReleaseOutcome};

use crate::common::{calm_client, command_stats, pttl, script_runs};
use crate::support::RedisServer;

const OPERATIONS: u64 = 1000;
const NAMES: usize = 4;

/// `SCRIPT FLUSH` before each of 1000 operations (acquire, extend and release in rotation
/// on 4 locks): every operation succeeds with the expected effect on the key, each is applied
/// exactly once (successful EVALSHA/EVAL executions, calls − failed_calls in
/// `INFO commandstats`, equal the number of operations), and each lock's fences strictly
/// increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_before_every_operation() {
    let server = RedisServer::start();
    let client = calm_client(&server.url()).await;
    let mut conn = server.conn().await;
    let ttl = Duration::from_secs(5);
    let names: Vec<String> = (0..NAMES).map(|i| format!("noscript:{i}")).collect();
    let keys: Vec<String> = names
        .iter()
        .map(|n| client.__inspect().lock_key(n).expect("key"))
        .collect();

    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .expect("CONFIG RESETSTAT");
    // Per lock: the lease, and whether it has been extended.
    let mut held: Vec<Option<(Lease, bool)>> = (0..NAMES).map(|_| None).collect();
    let mut fences: Vec<Vec<u64>> = vec![Vec::new(); NAMES];
    let (mut acquires, mut extends, mut releases) = (0u64, 0u64, 0u64);
    for op in 0..OPERATIONS {
        let () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .expect("SCRIPT FLUSH");
        let i = usize::try_from(op).expect("small") % NAMES;
        match held[i].take() {
            None => {
                // Eager: the grant is a script (a lazy one is a plain `SET` that no flush
                // can refuse), which mints the fence this test checks.
                let lease = client
                    .lock(&names[i])
                    .ttl(ttl)
                    .watchdog(false)
                    .fenced()
                    .acquire()
                    .await
                    .unwrap_or_else(|e| panic!("operation {op}: acquire {}: {e}", names[i]));
                fences[i].push(lease.fence().await.expect("fence"));
                held[i] = Some((lease, false));
                acquires += 1;
            }
            Some((lease, false)) => {
                lease
                    .extend(ttl * 2)
                    .await
                    .unwrap_or_else(|e| panic!("operation {op}: extend {}: {e}", names[i]));
                let left = pttl(&mut conn, &keys[i]).await;
                assert!(
                    left.is_some_and(|d| d > ttl),
                    "operation {op}: extend to {:?} left pttl {left:?}",
                    ttl * 2
                );
                held[i] = Some((lease, true));
                extends += 1;
            }
            Some((lease, true)) => {
                let outcome = lease
                    .release()
                    .await
                    .unwrap_or_else(|e| panic!("operation {op}: release {}: {e}", names[i]));
                assert_eq!(outcome, ReleaseOutcome::Released, "operation {op}");
                assert_eq!(
                    pttl(&mut conn, &keys[i]).await,
                    None,
                    "operation {op}: key left"
                );
                releases += 1;
            }
        }
    }
    let runs = script_runs(&mut conn).await;
    let evalsha = command_stats(&mut conn, "evalsha").await;
    let load = command_stats(&mut conn, "script|load").await;
    assert_eq!(acquires + extends + releases, OPERATIONS);
    assert_eq!(
        runs, OPERATIONS,
        "successful script executions != operations ({acquires} acquires, {extends} extends, \
         {releases} releases); evalsha (calls, failed) = {evalsha:?}, script load = {load:?}"
    );
    // Every operation met an empty cache: its first EVALSHA failed with NOSCRIPT.
    assert_eq!(evalsha.1, OPERATIONS, "NOSCRIPT failures: {evalsha:?}");
    for (name, fences) in names.iter().zip(&fences) {
        assert!(
            fences.windows(2).all(|w| w[0] < w[1]),
            "fences of {name} do not strictly increase: {fences:?}"
        );
    }
    for lease in held.into_iter().flatten() {
        let _ = lease.0.release().await;
    }
}
