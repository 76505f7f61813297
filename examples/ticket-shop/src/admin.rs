//! Operator endpoints. A real shop would put them behind authentication; this example keeps
//! them open on the loopback interface.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use distlock_tower::lock::HeldLock;

use crate::AppState;
use crate::error::AppError;
use crate::store::{Fenced, JobRun, Log, Report};

/// `POST /admin/reindex`: rebuilds the sales report from every seat record, slowly.
///
/// It runs behind a `LockLayer` whose lock is `admin/reindex`, so one runs at a time across all
/// replicas; a second request meanwhile gets `423 Locked` with `Retry-After`. The report is
/// saved under the lock's fence, so a run whose lease expired cannot overwrite a newer one.
pub async fn reindex(
    State(state): State<AppState>,
    lock: HeldLock,
) -> Result<Json<Report>, AppError> {
    let sales = state.store.sales(state.settings.seats).await?;
    // The expensive part, which is why two at once would be a waste.
    tokio::time::sleep(state.settings.reindex_time).await;

    let mut by_replica = BTreeMap::<String, u64>::new();
    for sale in &sales {
        *by_replica.entry(sale.replica.clone()).or_default() += 1;
    }
    // Minted now, on first use, while the lock is held (the layer is not `fenced`: most of
    // its requests never ask).
    let fence = lock.fence().await?;
    let report = Report {
        replica: state.settings.replica.clone(),
        fence,
        built_at_ms: state.store.now_ms().await?,
        seats_sold: sales.len() as u64,
        sold_by_replica: by_replica.into_iter().collect(),
    };
    match state.store.append(Log::Reports, fence, &report).await? {
        Fenced::Ok => Ok(Json(report)),
        Fenced::Sold | Fenced::Stale { .. } => Err(AppError::LostLock),
    }
}

/// The body of `GET /admin/leader`.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct LeaderView {
    /// The replica that keeps the job's schedule, if one leads now.
    pub replica: Option<String>,
    /// Its term: the fence of its leadership, higher with every new leader.
    pub term: Option<u64>,
}

/// `GET /admin/leader`: which replica leads the periodic job, and in which term.
pub async fn leader(State(state): State<AppState>) -> Result<Json<LeaderView>, AppError> {
    let leader = crate::job::election(&state)?.leader().await?;
    Ok(Json(LeaderView {
        term: leader.as_ref().map(|l| l.term),
        replica: leader.map(|l| l.identity),
    }))
}

/// `GET /admin/jobs`: the recorded runs of the periodic job, oldest first.
pub async fn job_runs(State(state): State<AppState>) -> Result<Json<Vec<JobRun>>, AppError> {
    Ok(Json(state.store.records(Log::JobRuns).await?))
}
