//! The critical section of the multi-process mutual-exclusion tests (`lock/processes.rs`,
//! `quorum`, `cluster/locks.rs`), in pieces: entering counts the holders inside
//! (`occupancy{tag}`; `violations` when one is not alone), the work is a non-atomic
//! read-modify-write of `counter{tag}`, and leaving uncounts. `tag` ends every key (a hash tag
//! on a cluster, `""` elsewhere). The parent then reads `violations` (must be unset) and
//! `counter` (must equal the number of sections).

use std::time::Duration;

use redis::AsyncCommands as _;
use redis::aio::ConnectionLike;

/// Counts this holder in `occupancy{tag}`, and a violation in `violations` if another one is
/// inside.
pub async fn enter_section<C: ConnectionLike + Send + Sync>(conn: &mut C, tag: &str) {
    let inside: i64 = conn.incr(format!("occupancy{tag}"), 1).await.expect("incr");
    if inside != 1 {
        let _: i64 = conn.incr("violations", 1).await.expect("incr");
    }
}

/// Writes `fence` to `fenced` (a script that accepts only a fence above the last one, kept in
/// `key`), and counts a violation in `fence-violations` if it was refused.
pub async fn write_fenced<C: ConnectionLike + Send + Sync>(
    conn: &mut C,
    fenced: &redis::Script,
    key: &str,
    fence: u64,
) {
    let accepted: i64 = fenced
        .key(key)
        .arg(fence)
        .invoke_async(&mut *conn)
        .await
        .expect("fenced write");
    if accepted != 1 {
        let _: i64 = conn.incr("fence-violations", 1).await.expect("incr");
    }
}

/// Reads `counter{tag}`, pauses up to `max_pause_us` µs (so that an overlapping holder would
/// lose an update), writes it back plus one, and leaves: uncounts this holder in
/// `occupancy{tag}`.
pub async fn bump_counter_and_leave<C: ConnectionLike + Send + Sync>(
    conn: &mut C,
    tag: &str,
    max_pause_us: u64,
) {
    let counter = format!("counter{tag}");
    let seen: i64 = conn.get(&counter).await.unwrap_or(0);
    tokio::time::sleep(Duration::from_micros(rand::random_range(0..max_pause_us))).await;
    let _: () = conn.set(&counter, seen + 1).await.expect("set");
    let _: i64 = conn.decr(format!("occupancy{tag}"), 1).await.expect("decr");
}
