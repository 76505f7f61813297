//! Latency samples and the figures reported from them.

use std::time::Duration;

/// Latencies in nanoseconds, one per operation.
#[derive(Default, Debug)]
pub struct Samples(Vec<u64>);

impl Samples {
    pub fn with_capacity(n: usize) -> Self {
        Self(Vec::with_capacity(n))
    }

    pub fn record(&mut self, d: Duration) {
        self.0.push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    pub fn merge(&mut self, other: Samples) {
        self.0.extend(other.0);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// (p50, p99, max) in microseconds; zeros when empty.
    pub fn percentiles(&mut self) -> (f64, f64, f64) {
        if self.0.is_empty() {
            return (0.0, 0.0, 0.0);
        }
        self.0.sort_unstable();
        let at = |q: f64| {
            let idx = ((self.0.len() as f64 - 1.0) * q).round() as usize;
            self.0[idx] as f64 / 1000.0
        };
        (at(0.50), at(0.99), at(1.0))
    }
}
