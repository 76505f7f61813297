//! The JSON line of DESIGN §9 and a human table.

use std::fmt::Write as _;
use std::time::Duration;

use crate::stats::Samples;
use crate::workloads::Peer;

/// One (peer, workload) result.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub peer: &'static str,
    pub workload: &'static str,
    pub ops_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub errors: u64,
    pub violations: u64,
    pub n: u64,
    /// Extra `"name":value` pairs (values already JSON).
    pub extra: Vec<(&'static str, String)>,
}

impl Outcome {
    /// A run of timed operations: how many `samples` holds, their rate over `elapsed` and
    /// their latencies; no errors, violations or extra fields yet.
    pub fn timed(
        peer: Peer,
        workload: &'static str,
        samples: &mut Samples,
        elapsed: Duration,
    ) -> Self {
        let n = samples.len() as u64;
        let (p50_us, p99_us, max_us) = samples.percentiles();
        Self {
            peer: peer.name(),
            workload,
            ops_per_s: n as f64 / elapsed.as_secs_f64(),
            p50_us,
            p99_us,
            max_us,
            errors: 0,
            violations: 0,
            n,
            extra: Vec::new(),
        }
    }

    pub fn json(&self) -> String {
        let mut line = format!(
            r#"{{"peer":"{}","workload":"{}","ops_per_s":{:.1},"p50_us":{:.2},"p99_us":{:.2},"errors":{},"violations":{},"n":{},"max_us":{:.1}"#,
            self.peer,
            self.workload,
            self.ops_per_s,
            self.p50_us,
            self.p99_us,
            self.errors,
            self.violations,
            self.n,
            self.max_us
        );
        for (name, value) in &self.extra {
            let _ = write!(line, r#","{name}":{value}"#);
        }
        line.push('}');
        line
    }

    /// An extra field as a number, if present (and not `null`).
    pub fn extra_f64(&self, name: &str) -> Option<f64> {
        self.extra
            .iter()
            .find(|(k, _)| *k == name)
            .and_then(|(_, v)| v.parse().ok())
    }
}

/// One figure for several runs of one (peer, workload): the median run by throughput (the
/// lower middle of an even count), with the errors of every run added up and the worst run's
/// violations, so repeating a run can steady the figures but never hide a fault. More than one
/// run adds `"rounds"` and the spread of throughput (`"ops_per_s_min"`, `"ops_per_s_max"`).
///
/// # Panics
/// If `runs` is empty.
pub fn median(mut runs: Vec<Outcome>) -> Outcome {
    assert!(!runs.is_empty(), "median of no runs");
    runs.sort_by(|a, b| a.ops_per_s.total_cmp(&b.ops_per_s));
    let rounds = runs.len();
    let errors = runs.iter().map(|r| r.errors).sum();
    let violations = runs.iter().map(|r| r.violations).max().unwrap_or(0);
    let (min, max) = (runs[0].ops_per_s, runs[rounds - 1].ops_per_s);
    let mut median = runs.swap_remove((rounds - 1) / 2);
    median.errors = errors;
    median.violations = violations;
    if rounds > 1 {
        median.extra.push(("rounds", rounds.to_string()));
        median.extra.push(("ops_per_s_min", format!("{min:.1}")));
        median.extra.push(("ops_per_s_max", format!("{max:.1}")));
    }
    median
}

/// The table, with distlock's throughput as a ratio of raw's where both ran, and where the
/// server's cost was measured: its time per operation (commandstats, then the process's CPU),
/// items per script call, and for a cluster workload its server time per operation as a
/// multiple of the same peer's on the single primary.
pub fn table(results: &[Outcome]) -> String {
    let mut out = format!(
        "{:<28} {:<9} {:>12} {:>10} {:>10} {:>10} {:>7} {:>6} {:>9} {:>10} {:>10} {:>8} {:>8} {:>7} {:>9} {:>9}\n",
        "workload",
        "peer",
        "ops/s",
        "p50 µs",
        "p99 µs",
        "max µs",
        "errors",
        "viol.",
        "vs raw",
        "srv µs/op",
        "cpu µs/op",
        "calls/op",
        "µs/call",
        "items",
        "÷ single",
        "cpu ÷ 1"
    );
    let blank_or =
        |v: Option<f64>, digits: usize| v.map_or_else(String::new, |v| format!("{v:.digits$}"));
    for r in results {
        let ratio = results
            .iter()
            .find(|o| o.workload == r.workload && o.peer == "raw")
            .filter(|raw| raw.ops_per_s > 0.0 && r.peer != "raw")
            .map_or_else(String::new, |raw| {
                format!("{:.2}×", r.ops_per_s / raw.ops_per_s)
            });
        let server = r.extra_f64("server_us_per_op");
        let single = crate::workloads::Workload::from_name(r.workload)
            .and_then(|w| w.single_counterpart())
            .and_then(|single| {
                results
                    .iter()
                    .find(|o| o.workload == single.name() && o.peer == r.peer)
            });
        let versus = |field: &str| {
            single
                .and_then(|single| Some(r.extra_f64(field)? / single.extra_f64(field)?))
                .filter(|ratio| ratio.is_finite())
                .map_or_else(String::new, |ratio| format!("{ratio:.2}×"))
        };
        let _ = writeln!(
            out,
            "{:<28} {:<9} {:>12.0} {:>10.0} {:>10.0} {:>10.0} {:>7} {:>6} {:>9} {:>10} {:>10} {:>8} {:>8} {:>7} {:>9} {:>9}",
            r.workload,
            r.peer,
            r.ops_per_s,
            r.p50_us,
            r.p99_us,
            r.max_us,
            r.errors,
            r.violations,
            ratio,
            blank_or(server, 2),
            blank_or(r.extra_f64("server_cpu_us_per_op"), 2),
            blank_or(r.extra_f64("script_calls_per_op"), 3),
            blank_or(r.extra_f64("script_us_per_call"), 2),
            blank_or(r.extra_f64("items_per_script_call"), 2),
            versus("server_us_per_op"),
            versus("server_cpu_us_per_op")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ops_per_s: f64, errors: u64, violations: u64) -> Outcome {
        Outcome {
            peer: "distlock",
            workload: "lock_uncontended_seq",
            ops_per_s,
            p50_us: 1_000_000.0 / ops_per_s,
            p99_us: 0.0,
            max_us: 0.0,
            errors,
            violations,
            n: 1,
            extra: Vec::new(),
        }
    }

    #[test]
    fn the_median_run_is_reported_with_every_fault_kept() {
        let m = median(vec![run(300.0, 0, 0), run(100.0, 2, 0), run(200.0, 1, 5)]);
        assert_eq!(m.ops_per_s, 200.0);
        assert_eq!(m.p50_us, 5_000.0, "the figures come from the median run");
        assert_eq!(m.errors, 3, "errors of all runs count");
        assert_eq!(m.violations, 5, "the worst run's violations are kept");
        let json = m.json();
        assert!(json.contains(r#""rounds":3"#), "{json}");
        assert!(json.contains(r#""ops_per_s_min":100.0"#), "{json}");
        assert!(json.contains(r#""ops_per_s_max":300.0"#), "{json}");
    }

    #[test]
    fn an_even_count_takes_the_lower_middle_and_one_run_is_left_as_is() {
        let m = median(vec![
            run(400.0, 0, 0),
            run(100.0, 0, 0),
            run(300.0, 0, 0),
            run(200.0, 0, 0),
        ]);
        assert_eq!(m.ops_per_s, 200.0);
        let one = median(vec![run(100.0, 1, 2)]);
        assert_eq!((one.errors, one.violations), (1, 2));
        assert!(one.extra.is_empty(), "a single run adds no fields");
    }

    #[test]
    fn the_table_compares_a_cluster_row_with_its_single_primary_counterpart() {
        let row = |workload: &'static str, peer: &'static str, ops: f64, srv: &str| Outcome {
            peer,
            workload,
            extra: vec![
                ("server_us_per_op", srv.to_owned()),
                ("server_cpu_us_per_op", "20.000".to_owned()),
                ("items_per_script_call", "4.00".to_owned()),
            ],
            ..run(ops, 0, 0)
        };
        let results = [
            row("lock_uncontended_parallel", "distlock", 100.0, "8.000"),
            row("lock_uncontended_parallel", "raw", 200.0, "5.000"),
            row("cluster_lock_parallel", "distlock", 50.0, "10.000"),
            row("cluster_lock_parallel", "raw", 100.0, "null"),
        ];
        let table = table(&results);
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[0].contains("srv µs/op") && lines[0].contains("÷ single"),
            "{table}"
        );
        assert!(
            lines[1].contains("0.50×") && lines[1].contains("8.00"),
            "{table}"
        );
        let last = |line: &str, n: usize| -> Vec<String> {
            let words: Vec<&str> = line.split_whitespace().collect();
            words[words.len() - n..]
                .iter()
                .map(|w| (*w).to_owned())
                .collect()
        };
        assert_eq!(
            last(lines[3], 2),
            ["1.25×", "1.00×"],
            "10 ÷ 8 server µs and 20 ÷ 20 cpu µs for distlock: {table}"
        );
        assert_eq!(
            last(lines[4], 2),
            ["4.00", "1.00×"],
            "a null figure leaves its ratio blank, the cpu ratio stays: {table}"
        );
        assert!(
            !lines[2].trim_end().ends_with('×'),
            "a single row has no ratio: {table}"
        );
    }
}
