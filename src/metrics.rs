//! [`describe_metrics`]: one call for every metric distlock records. The metrics themselves
//! live with what records them: the locks' in `lock/metrics.rs`, the rate limiters' in
//! `ratelimit/metrics.rs`.

/// Describes every metric distlock records (help text and unit) to the installed recorder,
/// for exporters that publish descriptions (Prometheus' `# HELP`). Call it once, after
/// installing the recorder; the metrics are recorded whether or not it is called.
///
/// The metrics (see the guide's [metrics](crate::guide::operations#metrics) for their
/// labels):
/// `distlock_lock_acquired_total`, `distlock_lock_busy_total`, `distlock_lock_timeout_total`,
/// `distlock_lock_lost_total`, `distlock_lock_handoff_total`, `distlock_lock_wait_seconds`,
/// `distlock_lock_hold_seconds`, `distlock_leases_held`, `distlock_lock_waiters`,
/// `distlock_ratelimit_decisions_total`, `distlock_ratelimit_check_seconds`,
/// `distlock_ratelimit_unavailable_total`, `distlock_ratelimit_breaker_open` and
/// `distlock_adaptive_limit`.
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    crate::lock::metrics::describe();
    crate::ratelimit::metrics::describe();
    metrics::describe_gauge!(
        "distlock_adaptive_limit",
        "the shared concurrency limit an adaptive limit last read, by name"
    );
}
