//! The waiting limiter across OS processes: 64 tasks in 2 processes take turns at 50 per
//! second from one Redis. Children re-run this test binary (the ignored `child_entry` test)
//! and report every pass to the parent in lines prefixed `CHILD `.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock::ratelimit::{Policy, Rate};

use crate::support::RedisServer;
use crate::support::child::{self, ChildProcess, say};
use crate::support::fixture::connect;

/// This binary's entry test for child processes.
const ENTRY: &str = "processes::child_entry";
const TASKS_PER_PROCESS: usize = 32;
const RUN: Duration = Duration::from_secs(5);
const INTERVAL: Duration = Duration::from_millis(20);

fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Entry point of the child processes; does nothing unless the parent set a role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as a child process of the tests in this module"]
async fn child_entry() {
    let Some((role, url)) = child::role() else {
        return;
    };
    let until: u64 = role
        .strip_prefix("acquire:")
        .and_then(|t| t.parse().ok())
        .expect("role acquire:<until µs>");
    let client = connect(&url).await;
    let limiter = client.rate_limiter(
        Policy::gcra(
            "partner",
            Rate::per_second(50).expect("rate").burst(1).expect("burst"),
        )
        .expect("policy"),
    );
    let tasks: Vec<_> = (0..TASKS_PER_PROCESS)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                while wall_us() < until {
                    let asked = wall_us();
                    let reservation = limiter
                        .reserve("partner-api", 1, Duration::from_secs(10))
                        .await
                        .expect("reserve");
                    let reserved = wall_us();
                    assert!(reservation.is_granted(), "{reservation:?}");
                    let decision = reservation.ready().await;
                    assert!(decision.allowed);
                    say(&format!("PASS {asked} {reserved} {}", wall_us()));
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    say("DONE");
}

/// One pass as a child saw it, in µs since the epoch.
#[derive(Debug, Clone, Copy)]
struct Pass {
    asked: u64,
    reserved: u64,
    passed: u64,
}

/// The test: 64 tasks over 2 processes at 50/s for 5 s. Passes are spaced 20 ms
/// apart (± scheduling jitter), in the order the turns were taken, and the 5 s from the
/// first pass hold exactly 250 of them.
#[test]
fn sixty_four_waiters_in_two_processes_take_turns_at_the_rate() {
    let server = RedisServer::start();
    let until = wall_us() + 1_000_000 + u64::try_from(RUN.as_micros()).expect("fits");
    let children: Vec<ChildProcess> = (0..2)
        .map(|_| ChildProcess::spawn(ENTRY, &format!("acquire:{until}"), &server.url()))
        .collect();
    let mut passes = Vec::new();
    for child in &children {
        loop {
            let line = child.expect_line("", Duration::from_secs(60));
            if line == "DONE" {
                break;
            }
            let numbers: Vec<u64> = line
                .trim_start_matches("PASS ")
                .split(' ')
                .map(|n| n.parse().expect("µs"))
                .collect();
            passes.push(Pass {
                asked: numbers[0],
                reserved: numbers[1],
                passed: numbers[2],
            });
        }
    }
    for child in children {
        child.wait_success(Duration::from_secs(10));
    }
    passes.sort_by_key(|p| p.passed);
    let first = passes[0].passed;
    let interval = u64::try_from(INTERVAL.as_micros()).expect("fits");
    let run = u64::try_from(RUN.as_micros()).expect("fits");
    // The 5 s from the first pass, less half an interval for the jitter of the last one.
    let in_run = passes
        .iter()
        .filter(|p| p.passed < first + run - interval / 2)
        .count();
    let gaps: Vec<i64> = passes
        .windows(2)
        .map(|w| i64::try_from(w[1].passed - w[0].passed).expect("fits"))
        .collect();
    let mean = gaps.iter().sum::<i64>() as f64 / gaps.len() as f64;
    let sd =
        (gaps.iter().map(|g| (*g as f64 - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
    let mut sorted = gaps.clone();
    sorted.sort_unstable();
    let pct = |p: usize| sorted[(sorted.len() - 1) * p / 100];
    // Served in order: a turn taken before another was asked for passes first.
    let mut out_of_order = 0;
    for a in &passes {
        for b in &passes {
            if a.reserved < b.asked && a.passed > b.passed {
                out_of_order += 1;
            }
        }
    }
    println!(
        "waiting limiter, 64 tasks in 2 processes at 50/s: {} passes, {in_run} in the 5 s from \
         the first; gaps mean {:.2} ms, sd {:.2} ms, min {:.2} ms, p1 {:.2} ms, p99 {:.2} ms, \
         max {:.2} ms; {out_of_order} out of order",
        passes.len(),
        mean / 1000.0,
        sd / 1000.0,
        sorted[0] as f64 / 1000.0,
        pct(1) as f64 / 1000.0,
        pct(99) as f64 / 1000.0,
        sorted[sorted.len() - 1] as f64 / 1000.0,
    );
    assert_eq!(in_run, 250, "exactly 5 s × 50/s");
    assert_eq!(
        out_of_order, 0,
        "turns are served in the order they were taken"
    );
    assert!((mean - 20_000.0).abs() < 500.0, "mean gap {mean} µs");
    for gap in &gaps {
        assert!(
            (5_000..=40_000).contains(gap),
            "a gap of {gap} µs (20 ms ± jitter)"
        );
    }
}
