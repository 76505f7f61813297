//! TESTPLAN 20 on a real server: memory per subject is bounded however hard it is hammered,
//! every key carries a ttl, and denied requests leave no trace.
//!
//! The plan's figures (60 s of hammering, 10^6 keys) are scaled down to keep this binary
//! within its time budget on two shared cores: 1.2 s of hammering per algorithm and
//! 100 000 distinct keys. The properties are per key, so the count does not change what is
//! shown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use distlock::Client;
use distlock::ratelimit::{Algorithm, RateLimiter};
use redis::aio::MultiplexedConnection;

use crate::common::{ALGORITHMS, policy};
use crate::support::RedisServer;
use crate::support::fixture::connect;

const DISTINCT_KEYS: usize = 100_000;

async fn memory_usage(conn: &mut MultiplexedConnection, key: &str) -> Option<u64> {
    redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(conn)
        .await
        .expect("MEMORY USAGE")
}

/// How many entries a sliding log's `key` holds (`ZCARD`).
async fn log_size(conn: &mut MultiplexedConnection, key: &str) -> u64 {
    redis::cmd("ZCARD")
        .arg(key)
        .query_async(conn)
        .await
        .expect("ZCARD")
}

/// A fresh server, a client of it and a connection to inspect it.
async fn a_server() -> (RedisServer, Client, MultiplexedConnection) {
    let server = RedisServer::start();
    let client = connect(&server.url()).await;
    let conn = server.conn().await;
    (server, client, conn)
}

/// `algorithm`'s limiter of `count` per `period`, with the deny cache off so that every check
/// reaches the server.
fn uncached(client: &Client, algorithm: Algorithm, count: u32, period: Duration) -> RateLimiter {
    client
        .rate_limiter(policy(algorithm, count, period))
        .deny_cache(0)
        .build()
        .expect("valid limiter")
}

async fn hammer(limiter: &RateLimiter, subject: &str, for_how_long: Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let limiter = limiter.clone();
            let stop = Arc::clone(&stop);
            let subject = subject.to_owned();
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    limiter.check(&subject).await.expect("check");
                }
            })
        })
        .collect();
    tokio::time::sleep(for_how_long).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("hammer task");
    }
}

/// One subject hammered by 4 tasks (far above its limit, deny cache off so every check
/// reaches the server): `MEMORY USAGE` of its key stays flat for the O(1) algorithms, and
/// the sliding log never holds more than its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_hammered_stays_the_same_size() {
    let (_server, client, mut conn) = a_server().await;
    for algorithm in ALGORITHMS {
        let limiter = uncached(&client, algorithm, 50, Duration::from_millis(500));
        let key = limiter.__keys("hot").expect("keys").remove(0);
        let sampling = {
            let limiter = limiter.clone();
            tokio::spawn(async move { hammer(&limiter, "hot", Duration::from_millis(1200)).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut sizes = Vec::new();
        let mut cards = Vec::new();
        while !sampling.is_finished() {
            if let Some(size) = memory_usage(&mut conn, &key).await {
                sizes.push(size);
            }
            if algorithm == Algorithm::SlidingLog {
                cards.push(log_size(&mut conn, &key).await);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        sampling.await.expect("hammer");
        let (min, max) = (
            sizes.iter().min().copied().unwrap_or(0),
            sizes.iter().max().copied().unwrap_or(0),
        );
        eprintln!(
            "memory: {:<14} {} samples, MEMORY USAGE {min}..={max} bytes",
            algorithm.name(),
            sizes.len()
        );
        assert!(sizes.len() >= 10, "{algorithm}: too few samples");
        if algorithm == Algorithm::SlidingLog {
            assert!(
                cards.iter().all(|&c| c <= 50),
                "{algorithm}: log above its cap: {cards:?}"
            );
            assert!(max <= 8 * 1024, "{algorithm}: {max} bytes for 50 entries");
        } else {
            // The value's digits may change length (a count going from 9 to 10), nothing more.
            assert!(
                max - min <= 16,
                "{algorithm}: grew from {min} to {max} bytes"
            );
        }
    }
}

/// Many distinct subjects over every algorithm: every key the library created has a ttl,
/// and there is exactly one key per subject and policy (fixed-window keys may already be
/// gone: they expire at their window's end, which may fall inside the test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_one_of_many_keys_has_a_ttl() {
    let (_server, client, mut conn) = a_server().await;
    let limiters: Arc<Vec<RateLimiter>> = Arc::new(
        ALGORITHMS
            .iter()
            .map(|&a| {
                client
                    .rate_limiter(policy(a, 3, Duration::from_secs(3600)))
                    .build()
                    .expect("valid limiter")
            })
            .collect(),
    );
    let workers = 32;
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let limiters = Arc::clone(&limiters);
            tokio::spawn(async move {
                for i in (w..DISTINCT_KEYS).step_by(workers) {
                    let limiter = &limiters[i % limiters.len()];
                    let d = limiter.check(&format!("user:{i}")).await.expect("check");
                    assert!(d.allowed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("worker");
    }

    let mut cursor: u64 = 0;
    let mut seen = 0usize;
    let mut fixed = 0usize;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("distlock:rl:*")
            .arg("COUNT")
            .arg(2000)
            .query_async(&mut conn)
            .await
            .expect("SCAN");
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.cmd("PTTL").arg(key);
            }
            let ttls: Vec<i64> = pipe.query_async(&mut conn).await.expect("PTTL");
            for (key, ttl) in keys.iter().zip(&ttls) {
                // -1: no ttl. (-2 would be a key that expired since SCAN saw it.)
                assert_ne!(*ttl, -1, "{key} has no ttl");
            }
            seen += keys.len();
            fixed += keys.iter().filter(|k| k.contains(":fw:")).count();
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    let per_algorithm = DISTINCT_KEYS / ALGORITHMS.len();
    assert_eq!(
        seen - fixed,
        DISTINCT_KEYS - per_algorithm,
        "one key per subject"
    );
    assert!(fixed <= per_algorithm, "{fixed} fixed-window keys");
}

/// Denied checks change nothing on the server: the key's serialized value is identical
/// and its ttl is not extended, on every algorithm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_requests_are_not_stored() {
    let (_server, client, mut conn) = a_server().await;
    for algorithm in ALGORITHMS {
        // An hour's window: a fixed window is aligned to the epoch, and with 30 s the 200
        // denied checks crossed a window's end about once in 300 runs (the next window then
        // allowed one, which is no stored denial).
        let limiter = uncached(&client, algorithm, 5, Duration::from_secs(3600));
        for _ in 0..5 {
            assert!(limiter.check("full").await.expect("check").allowed);
        }
        let key = limiter.__keys("full").expect("keys").remove(0);
        let dump = |conn: &mut MultiplexedConnection| {
            let mut conn = conn.clone();
            let key = key.clone();
            async move {
                let value: Vec<u8> = redis::cmd("DUMP")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .expect("DUMP");
                let ttl: i64 = redis::cmd("PTTL")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .expect("PTTL");
                (value, ttl)
            }
        };
        let (before, ttl_before) = dump(&mut conn).await;
        for _ in 0..200 {
            assert!(
                !limiter.check("full").await.expect("check").allowed,
                "{algorithm}"
            );
        }
        let (after, ttl_after) = dump(&mut conn).await;
        assert_eq!(
            before, after,
            "{algorithm}: a denied request changed the stored value"
        );
        assert!(
            ttl_after <= ttl_before,
            "{algorithm}: a denied request extended the ttl"
        );
        if algorithm == Algorithm::SlidingLog {
            let card = log_size(&mut conn, &key).await;
            assert_eq!(card, 5, "only the allowed requests are in the log");
        }
    }
}
