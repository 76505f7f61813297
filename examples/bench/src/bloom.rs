//! `bloom_contains_many` (only when named): lookups of 1000 items per call in a Bloom filter
//! of 1 000 000 expected items at 1 % holding 100 000 of them; half the items asked are
//! present. `ops_per_s` counts calls; `items_per_s` the items looked up. The "raw" peer keeps
//! the same bits in one key and reads each call's positions with one `BITFIELD_RO`, with no
//! configuration check, no script and no sharding: what the library costs on top.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use xxhash_rust::xxh3::xxh3_128;

use crate::cli::Args;
use crate::report::Outcome;
use crate::stats::Samples;
use crate::workloads::{Peer, Targets, Workload, distlock_client};

const ITEMS: u64 = 1_000_000;
const FILLED: u64 = 100_000;
const PER_CALL: u64 = 1000;
/// The library's sizing of 1 000 000 items at 1 %.
const BITS: u64 = 9_585_059;
const HASHES: u64 = 7;
const RAW_KEY: &str = "bench:bloom:raw";

fn item(i: u64) -> String {
    format!("item:{i}")
}

/// A call's items: half present, half absent, different every call.
fn batch(call: u64) -> Vec<String> {
    (0..PER_CALL)
        .map(|j| {
            let n = call * PER_CALL + j;
            if j % 2 == 0 {
                item(n % FILLED)
            } else {
                item(FILLED + n)
            }
        })
        .collect()
}

/// The positions the raw peer reads (double hashing, as the library does).
fn positions(item: &str, out: &mut Vec<u64>) {
    let h = xxh3_128(item.as_bytes());
    let (mut x, mut y) = ((h & u128::from(u64::MAX)) as u64, (h >> 64) as u64);
    for i in 0..HASHES {
        out.push(x % BITS);
        x = x.wrapping_add(y);
        y = y.wrapping_add(i);
    }
}

async fn raw_call(
    conn: &mut MultiplexedConnection,
    items: &[String],
    set: bool,
) -> Result<(), String> {
    let mut ps = Vec::with_capacity(items.len() * HASHES as usize);
    for i in items {
        positions(i, &mut ps);
    }
    let mut cmd = redis::cmd(if set { "BITFIELD" } else { "BITFIELD_RO" });
    cmd.arg(RAW_KEY);
    for p in ps {
        if set {
            cmd.arg("SET").arg("u1").arg(p).arg(1);
        } else {
            cmd.arg("GET").arg("u1").arg(p);
        }
    }
    let _: Vec<i64> = cmd.query_async(conn).await.map_err(|e| e.to_string())?;
    Ok(())
}

pub async fn run(peer: Peer, targets: &Targets, args: &Args) -> Result<Outcome, String> {
    let budget = args.duration.unwrap_or(Duration::from_secs(5));
    let cap = args.ops.unwrap_or(100_000);
    let filled: Vec<String> = (0..FILLED).map(item).collect();
    let mut samples = Samples::default();
    let mut errors = 0;
    let mut call = 0u64;
    let started;
    match peer {
        Peer::Distlock => {
            let client = distlock_client(Workload::BloomContainsMany, targets).await?;
            let filter = client
                .bloom_filter(format!("bench:{}", rand::random::<u32>()))
                .expected_items(ITEMS)
                .false_positive_rate(0.01)
                .open()
                .await
                .map_err(|e| e.to_string())?;
            filter.add_many(&filled).await.map_err(|e| e.to_string())?;
            started = Instant::now();
            while call < cap && started.elapsed() < budget {
                let items = batch(call);
                let start = Instant::now();
                match filter.contains_many(&items).await {
                    Ok(_) => samples.record(start.elapsed()),
                    Err(_) => errors += 1,
                }
                call += 1;
            }
            filter.clear().await.map_err(|e| e.to_string())?;
        }
        Peer::Raw => {
            let mut conn = redis::Client::open(targets.single()?)
                .map_err(|e| e.to_string())?
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| e.to_string())?;
            for chunk in filled.chunks(PER_CALL as usize) {
                raw_call(&mut conn, chunk, true).await?;
            }
            started = Instant::now();
            while call < cap && started.elapsed() < budget {
                let items = batch(call);
                let start = Instant::now();
                match raw_call(&mut conn, &items, false).await {
                    Ok(()) => samples.record(start.elapsed()),
                    Err(_) => errors += 1,
                }
                call += 1;
            }
            let _: () = redis::cmd("DEL")
                .arg(RAW_KEY)
                .query_async(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
        }
    }
    let timed = Outcome::timed(
        peer,
        Workload::BloomContainsMany.name(),
        &mut samples,
        started.elapsed(),
    );
    let per_s = timed.ops_per_s;
    Ok(Outcome {
        errors,
        extra: vec![
            ("items_per_call", PER_CALL.to_string()),
            ("items_per_s", format!("{:.0}", per_s * PER_CALL as f64)),
        ],
        ..timed
    })
}
