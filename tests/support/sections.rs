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

/// The parent's check once every section has run: never two holders inside at once, no
/// fenced write refused (when `fenced`: the sections wrote fences), and no lost update: the
/// `counter{tag}` of `tags` add up to `sections`. `context` ends each failure message (a
/// server log, say).
pub async fn assert_sections_ran_alone<C: ConnectionLike + Send + Sync>(
    conn: &mut C,
    tags: &[String],
    sections: usize,
    fenced: bool,
    context: &str,
) {
    let violations: Option<i64> = conn.get("violations").await.expect("GET");
    assert_eq!(
        violations.unwrap_or(0),
        0,
        "two holders were inside at once{context}"
    );
    if fenced {
        let refused: Option<i64> = conn.get("fence-violations").await.expect("GET");
        assert_eq!(refused.unwrap_or(0), 0, "a fence did not increase{context}");
    }
    let mut total = 0;
    for tag in tags {
        let counter: Option<i64> = conn.get(format!("counter{tag}")).await.expect("GET");
        total += counter.unwrap_or(0);
    }
    assert_eq!(total, sections as i64, "lost updates{context}");
}
