//! The JSON line of DESIGN §9 and a human table.

use std::fmt::Write as _;

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
}

/// The table, with distlock's throughput as a ratio of raw's where both ran.
pub fn table(results: &[Outcome]) -> String {
    let mut out = format!(
        "{:<28} {:<9} {:>12} {:>10} {:>10} {:>10} {:>7} {:>6} {:>9}\n",
        "workload", "peer", "ops/s", "p50 µs", "p99 µs", "max µs", "errors", "viol.", "vs raw"
    );
    for r in results {
        let ratio = results
            .iter()
            .find(|o| o.workload == r.workload && o.peer == "raw")
            .filter(|raw| raw.ops_per_s > 0.0 && r.peer != "raw")
            .map_or_else(String::new, |raw| {
                format!("{:.2}×", r.ops_per_s / raw.ops_per_s)
            });
        let _ = writeln!(
            out,
            "{:<28} {:<9} {:>12.0} {:>10.0} {:>10.0} {:>10.0} {:>7} {:>6} {:>9}",
            r.workload,
            r.peer,
            r.ops_per_s,
            r.p50_us,
            r.p99_us,
            r.max_us,
            r.errors,
            r.violations,
            ratio
        );
    }
    out
}
