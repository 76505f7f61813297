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
    let limiter = client
        .rate_limiter(
            Policy::gcra(
                "partner",
                Rate::per_second(50).expect("rate").burst(1).expect("burst"),
            )
            .expect("policy"),
        )
        .build()
        .expect("valid limiter");
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
                    // When the turn comes, as this process learned it.
                    let due =
                        reserved + u64::try_from(reservation.delay().as_micros()).expect("fits");
                    let decision = reservation.ready().await;
                    assert!(decision.allowed);
                    say(&format!("PASS {asked} {reserved} {due} {}", wall_us()));
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
    due: u64,
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
                due: numbers[2],
                passed: numbers[3],
            });
        }
    }
    for child in children {
        child.wait_success(Duration::from_secs(10));
    }
    let interval = u64::try_from(INTERVAL.as_micros()).expect("fits");
    let run = u64::try_from(RUN.as_micros()).expect("fits");
    let turns = spacing(&passes, |p| p.due);
    let wakeups = spacing(&passes, |p| p.passed);
    // The turns of the 5 s from the first: counted from where the turns start (the median of
    // each turn's time less its offset, so one late answer does not move the window), half an
    // interval of jitter allowed either side.
    let mut dues: Vec<u64> = passes.iter().map(|p| p.due).collect();
    dues.sort_unstable();
    let mut origins: Vec<u64> = dues
        .iter()
        .enumerate()
        .map(|(k, due)| due - interval * u64::try_from(k).expect("fits"))
        .collect();
    origins.sort_unstable();
    let origin = origins[origins.len() / 2];
    let in_run = dues
        .iter()
        .filter(|due| **due + interval / 2 >= origin && **due < origin + run - interval / 2)
        .count();
    // Served in order: a turn taken before another was asked for comes first. A turn is known
    // only to lie between `asked` and `reserved` plus its delay (the store chose it somewhere
    // in that round trip), so an inversion counts when those spans prove it, however late an
    // answer arrived on a loaded machine. Wake-ups follow the turns up to the scheduler's
    // lateness (reported, not asserted).
    let inversions = |later: fn(&Pass, &Pass) -> bool| {
        let mut n = 0;
        for a in &passes {
            for b in &passes {
                if a.reserved < b.asked && later(a, b) {
                    n += 1;
                }
            }
        }
        n
    };
    let out_of_order = inversions(|a, b| a.earliest_due() > b.due);
    let woken_out_of_order = inversions(|a, b| a.passed > b.passed);
    println!(
        "waiting limiter, 64 tasks in 2 processes at 50/s: {} passes, {in_run} turns in the 5 s \
         from the first; turns {turns}; wake-ups {wakeups}; {out_of_order} turns and \
         {woken_out_of_order} wake-ups out of arrival order",
        passes.len(),
    );
    assert_eq!(in_run, 250, "exactly 5 s × 50/s");
    assert_eq!(
        out_of_order, 0,
        "turns are served in the order they were taken"
    );
    assert!(
        (turns.mean - 20_000.0).abs() < 500.0 && (wakeups.mean - 20_000.0).abs() < 500.0,
        "mean gaps {} and {} µs",
        turns.mean,
        wakeups.mean
    );
    assert!(
        (turns.median - 20_000).abs() <= 2_000,
        "median turn gap {} µs",
        turns.median
    );
}

impl Pass {
    /// The earliest the turn can be: its delay counted from when it was asked for.
    fn earliest_due(&self) -> u64 {
        self.asked + (self.due - self.reserved)
    }
}

/// Gaps between consecutive times, in µs.
struct Spacing {
    mean: f64,
    sd: f64,
    median: i64,
    p1: i64,
    p99: i64,
    min: i64,
    max: i64,
}

impl std::fmt::Display for Spacing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |us: i64| us as f64 / 1000.0;
        write!(
            f,
            "mean {:.2} ms, sd {:.2} ms, median {:.2} ms, p1 {:.2} ms, p99 {:.2} ms, min {:.2} \
             ms, max {:.2} ms",
            self.mean / 1000.0,
            self.sd / 1000.0,
            ms(self.median),
            ms(self.p1),
            ms(self.p99),
            ms(self.min),
            ms(self.max)
        )
    }
}

fn spacing(passes: &[Pass], time: fn(&Pass) -> u64) -> Spacing {
    let mut times: Vec<u64> = passes.iter().map(time).collect();
    times.sort_unstable();
    let mut gaps: Vec<i64> = times
        .windows(2)
        .map(|w| i64::try_from(w[1] - w[0]).expect("fits"))
        .collect();
    let mean = gaps.iter().sum::<i64>() as f64 / gaps.len() as f64;
    let sd =
        (gaps.iter().map(|g| (*g as f64 - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
    gaps.sort_unstable();
    let pct = |p: usize| gaps[(gaps.len() - 1) * p / 100];
    Spacing {
        mean,
        sd,
        median: pct(50),
        p1: pct(1),
        p99: pct(99),
        min: gaps[0],
        max: gaps[gaps.len() - 1],
    }
}
