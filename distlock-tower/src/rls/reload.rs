//! Reloading the configuration when its files change: the directory is looked at every
//! period (names, sizes and modification times); a change is read and, if it holds, put in
//! use; if not, the error is logged, counted and kept for the debug page, and the
//! configuration in use stays.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::{RateLimitServer, RlsConfig};

/// What the directory held when last looked at.
type Signature = Vec<(PathBuf, u64, Option<SystemTime>)>;

fn signature(dir: &Path) -> Signature {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut seen: Signature = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            meta.is_file()
                .then(|| (e.path(), meta.len(), meta.modified().ok()))
        })
        .collect();
    seen.sort();
    seen
}

/// Watches `dir` every `period` and reloads `server` from it when its files change, in a
/// task of its own; abort the returned handle to stop it.
pub fn watch(
    server: RateLimitServer,
    dir: PathBuf,
    period: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut last = signature(&dir);
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let now = signature(&dir);
            if now == last {
                continue;
            }
            last = now;
            let read = {
                let dir = dir.clone();
                tokio::task::spawn_blocking(move || RlsConfig::from_dir(&dir)).await
            };
            match read {
                Ok(Ok(config)) => {
                    // A refusal is logged and counted by `reload`.
                    if server.reload(config).is_ok() {
                        tracing::info!(dir = %dir.display(), "rate-limit configuration reloaded");
                    }
                }
                Ok(Err(err)) => server.reload_failed(&err.to_string()),
                Err(err) => server.reload_failed(&format!("the reading task failed: {err}")),
            }
        }
    })
}
